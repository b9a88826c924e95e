package ovncentral

import (
	"flag"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flags. kube-ovn's
// ovn-central shares these with the host (hostPath /var/run/ovn, and
// OVN_DIR for the database files: /var/lib/ovn in Cozystack,
// /etc/origin/ovn upstream).
type Plugin struct{ cfg Config }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.cfg.NBCtl, "ovn-nb-ctl", "/var/run/ovn/ovnnb_db.ctl", "ovn-central's OVN_Northbound ovsdb-server control socket; empty skips NB")
	fs.StringVar(&p.cfg.SBCtl, "ovn-sb-ctl", "/var/run/ovn/ovnsb_db.ctl", "ovn-central's OVN_Southbound ovsdb-server control socket; empty skips SB")
	fs.StringVar(&p.cfg.DBDir, "ovn-db-dir", "/var/lib/ovn", "directory of ovn-central's database files on the host: a file without a running member is a member down")
}

// Build implements checks.Plugin.
func (p *Plugin) Build(*sources.Set) (checkkit.Check, error) { return New(p.cfg), nil }
