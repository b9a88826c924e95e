// Command coredns is CoreDNS with only the plugins the harness's cluster DNS
// uses (bind, kubernetes, template, cache, errors, log, ready, health), built from the Go
// module proxy. It serves cluster.local for the test node's pods exactly as a
// cluster's CoreDNS does: headless Services answer with every ready pod IP.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() {
	coremain.Run()
}
