package fsynclatency

import "math"

func posInf() float64 { return math.Inf(1) }
