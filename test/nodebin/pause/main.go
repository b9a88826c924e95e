// Command pause is the CRI sandbox ("pause") process of the harness's node: it
// holds the pod's namespaces, reaps zombies it inherits, and exits on SIGTERM
// or SIGINT, as registry.k8s.io/pause does. It is a static Go binary because
// the harness builds every image locally, without a registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
