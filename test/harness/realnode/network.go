package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// createBridge creates the node's bridge with the host's address on it. It
// refuses a bridge that exists already (a node that was not stopped) and a
// pod range the host routes elsewhere.
func (s *State) createBridge() error {
	if _, err := net.InterfaceByName(s.Bridge); err == nil {
		return fmt.Errorf("create bridge: %s already exists on this host (a node that was not stopped? `ip link del %s` if it is not in use)", s.Bridge, s.Bridge)
	}
	if err := routeFree(s.PodCIDR); err != nil {
		return err
	}
	if err := run("ip", "link", "add", s.Bridge, "type", "bridge"); err != nil {
		return err
	}
	s.BridgeCreated = true
	if err := s.save(); err != nil {
		return err
	}
	// No IPv6 on the bridge: nothing but the pods' IPv4 runs on it.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+s.Bridge+"/disable_ipv6", []byte("1"), 0o644)
	ones, _ := mustCIDR(s.PodCIDR).Mask.Size()
	if err := run("ip", "addr", "add", s.Address+"/"+strconv.Itoa(ones), "dev", s.Bridge); err != nil {
		return err
	}
	return run("ip", "link", "set", s.Bridge, "up")
}

// routeFree fails when the host already routes cidr somewhere: the node's
// pod range must be private to the bridge it creates.
func routeFree(cidr string) error {
	out, err := exec.Command("ip", "-4", "route", "show", "root", cidr).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip route show: %w: %s", err, out)
	}
	if strings.TrimSpace(string(out)) != "" {
		return fmt.Errorf("the host already routes %s (%s); the node's pod range must be unused", cidr, strings.TrimSpace(string(out)))
	}
	return nil
}

// writeCNIConfig writes the pod network's conflist into containerd's CNI
// configuration directory (the node stays NotReady until one is there).
func (s *starter) writeCNIConfig(context.Context) error {
	conflist := cniConflist(s.st, filepath.Join(s.dir, "cni", "ipam"))
	return os.WriteFile(filepath.Join(s.dir, "cni", "net.d", "10-cozy-health.conflist"), []byte(conflist), 0o600)
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// run runs a host command (ip, nft), its output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
