package ovs

import (
	"flag"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flags. kube-ovn's ovs-ovn
// shares these with the host (hostPath /run/openvswitch, /var/run/ovn).
type Plugin struct{ cfg Config }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.cfg.DBSocket, "ovs-db-socket", "/run/openvswitch/db.sock", "ovsdb-server socket of kube-ovn's ovs-ovn (its directory holds ovs-vswitchd's pidfile and control socket); empty disables the ovs check")
	fs.StringVar(&p.cfg.ControllerPidfile, "ovn-controller-pidfile", "/var/run/ovn/ovn-controller.pid", "ovn-controller pidfile (its control socket is beside it); empty skips ovn-controller")
}

// Build implements checks.Plugin.
func (p *Plugin) Build(*sources.Set) (checkkit.Check, error) { return New(p.cfg), nil }
