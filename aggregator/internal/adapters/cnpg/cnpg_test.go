package cnpg

import (
	"testing"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit/adaptertest"
)

func TestGolden(t *testing.T) { adaptertest.Run(t, New(), "testdata") }

func TestOldestReleaseSameVerdicts(t *testing.T) { adaptertest.SameVerdicts(t, "testdata") }
