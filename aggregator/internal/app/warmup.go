package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
)

// warmUpPoll is how often the warm-up looks at which nodes have reported.
const warmUpPoll = 250 * time.Millisecond

// warmUp waits until this replica may campaign for the Lease, and tells
// /readyz how far it is: --warm-up has passed, and every expected node
// (every Node matching --node-selector) that its kubelet reports Ready has
// reported to this replica, or --warm-up-max has passed since start.
//
// A replica that took the Lease with a half-filled view would write every
// node whose agent has not found it yet as Unknown/HeartbeatMissed,
// although those agents report to the other replicas: agents learn of a
// new replica when they next resolve the Service (within seconds after the
// replicas changed, else up to 30 s later). A Node that is not Ready
// (powered off, its kubelet gone) holds nothing back: its agent is
// unlikely to report, and it reads Unknown either way. It returns false
// when ctx ended.
func (a *App) warmUp(ctx context.Context, start time.Time) bool {
	a.setWarming(fmt.Sprintf("warming up: ingesting reports for %s before campaigning for the Lease", a.cfg.WarmUp))
	select {
	case <-ctx.Done():
		return false
	case <-a.clock.After(a.cfg.WarmUp):
	}
	if a.cfg.WarmUpMax <= 0 {
		a.log.Info("warm-up done, campaigning for the Lease", zap.Int("nodes", a.state.Len()))
		return true
	}
	deadline := start.Add(a.cfg.WarmUpMax)
	for {
		synced := a.nodesSynced()
		reported, missing := unreported(a.state, a.readyNodes())
		if synced && len(missing) == 0 {
			a.log.Info("warm-up done: every expected node reported, campaigning for the Lease",
				zap.Int("nodes", reported), zap.Duration("after", a.clock.Since(start)))
			return true
		}
		if !a.clock.Now().Before(deadline) {
			a.log.Warn("warm-up ran out: campaigning for the Lease although expected nodes have not reported to this replica; they read Unknown until they do",
				zap.Int("reported", reported), zap.Int("missing", len(missing)), zap.Strings("missingNodes", firstN(missing, 10)),
				zap.Bool("nodesSynced", synced), zap.Duration("warmUpMax", a.cfg.WarmUpMax))
			return true
		}
		if synced {
			a.setWarming(fmt.Sprintf("warming up: %d of %d expected Ready nodes reported (waiting for %s) until %s",
				reported, reported+len(missing), joinFirst(missing, 3), deadline.UTC().Format(time.RFC3339)))
		} else {
			a.setWarming("warming up: waiting for the Node informer to sync")
		}
		select {
		case <-ctx.Done():
			return false
		case <-a.clock.After(warmUpPoll):
		}
	}
}

func (a *App) setWarming(msg string) { a.warming.Store(&msg) }

// readyNodes is the set of Nodes matching --node-selector whose Ready
// condition is True.
func (a *App) readyNodes() map[string]bool {
	nodes, err := a.nodeLister.List(a.nodes)
	if err != nil {
		return nil
	}
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				out[n.Name] = true
			}
		}
	}
	return out
}

// unreported counts the nodes of st that have reported and lists, sorted,
// those expected and in ready that have not (Entry.Report nil).
func unreported(st *state.State, ready map[string]bool) (reported int, missing []string) {
	st.Read(func(nodes map[string]state.Entry) {
		for name, e := range nodes {
			switch {
			case e.Report != nil:
				reported++
			case ready[name]:
				missing = append(missing, name)
			}
		}
	})
	slices.Sort(missing)
	return reported, missing
}

func firstN(s []string, n int) []string { return s[:min(n, len(s))] }

// joinFirst joins the first n names of s, saying how many more there are.
func joinFirst(s []string, n int) string {
	out := strings.Join(firstN(s, n), ", ")
	if len(s) > n {
		out += fmt.Sprintf(" and %d more", len(s)-n)
	}
	return out
}
