package uplink

import (
	"context"
	"crypto/ed25519"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// lab is a CA with serving files, and a dev key for node cp1.
type lab struct {
	files   tlsutil.Files
	keysDir string
	keyFile string
}

func newLab(t *testing.T, hosts ...string) lab {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	files, err := tlsutil.WriteServing(t.TempDir(), hosts...)
	require.NoError(t, err)
	keysDir := t.TempDir()
	keyFile, err := signing.WriteDevKeyPair(keysDir, "cp1")
	require.NoError(t, err)
	return lab{files: files, keysDir: keysDir, keyFile: keyFile}
}

func (l lab) replica(t *testing.T, extra ...string) *replicaProc {
	return startReplica(t, l.files, append([]string{"--insecure-dev-keys-dir", l.keysDir}, extra...)...)
}

// start builds and runs an uplink to addrs; it stops at test cleanup.
func (l lab) start(t *testing.T, reg prometheus.Registerer, addrs ...string) *Uplink {
	t.Helper()
	u, err := New(Config{
		Aggregators: addrs, CAFile: l.files.CAFile, NodeName: "cp1", InsecureDevKeyFile: l.keyFile,
		BackoffInitial: 100 * time.Millisecond, BackoffMax: 500 * time.Millisecond, AckTimeout: 2 * time.Second,
		ResolveInterval: time.Second, Registerer: reg,
	}, zaptest.NewLogger(t))
	require.NoError(t, err)
	runUplink(t, u)
	return u
}

func runUplink(t *testing.T, u *Uplink) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
}

// publisher publishes a report every period and remembers when each
// sequence was published.
type publisher struct {
	mu   sync.Mutex
	at   map[uint64]time.Time
	stop chan struct{}
	done chan struct{}
}

func publish(t *testing.T, u *Uplink, period time.Duration) *publisher {
	p := &publisher{at: map[uint64]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			r := &report.NodeReport{Interval: period, Observations: []report.Observation{
				{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: report.StatusHealthy, Reason: "FsyncFast",
					ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: "cp1"}, Attributes: map[string]float64{report.AttrFsyncP99Seconds: 0.003}},
			}}
			now := time.Now()
			u.Publish(r)
			p.mu.Lock()
			p.at[u.seq.Load()] = now
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *publisher) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// between returns the sequences published in [from, to).
func (p *publisher) between(from, to time.Time) map[uint64]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[uint64]time.Time{}
	for s, at := range p.at {
		if !at.Before(from) && at.Before(to) {
			out[s] = at
		}
	}
	return out
}

// delivery checks that r accepted the reports in pub, and returns how many it
// missed and the slowest publish->accept latency.
func delivery(r *replicaProc, pub map[uint64]time.Time) (missed int, slowest time.Duration) {
	for seq, at := range pub {
		a, ok := r.has(seq)
		if !ok {
			missed++
			continue
		}
		slowest = max(slowest, time.Unix(0, a.ReceivedAt).Sub(at))
	}
	return missed, slowest
}

func TestStreamsToEveryReplicaAndADeadOneDelaysNoOther(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(map[int]string{2: "two replicas", 3: "three replicas"}[n], func(t *testing.T) {
			l := newLab(t)
			var reps []*replicaProc
			var addrs []string
			for range n {
				r := l.replica(t)
				reps = append(reps, r)
				addrs = append(addrs, r.addr)
			}
			reg := prometheus.NewRegistry()
			u := l.start(t, reg, addrs...)
			p := publish(t, u, 100*time.Millisecond)

			for _, r := range reps {
				require.Eventually(t, func() bool { return len(r.reports()) >= 3 }, 30*time.Second, 50*time.Millisecond, "replica %s gets reports", r.addr)
			}
			for _, r := range reps {
				assert.True(t, u.Streams()[r.addr].Connected)
				assert.Equal(t, 1.0, testutil.ToFloat64(u.m.connected.WithLabelValues(r.addr)))
				for _, a := range r.reports() {
					assert.Equal(t, "cp1", a.Node)
					assert.Equal(t, u.InstanceID(), a.Instance)
				}
			}

			// Kill the first replica; the others keep getting every report
			// promptly.
			dead := reps[0]
			dead.kill()
			killedAt := time.Now()
			time.Sleep(3 * time.Second)
			pub := p.between(killedAt.Add(100*time.Millisecond), time.Now().Add(-time.Second))
			require.NotEmpty(t, pub)
			for _, r := range reps[1:] {
				missed, slowest := delivery(r, pub)
				t.Logf("after the kill, replica %s: %d of %d reports missed, slowest %s", r.addr, missed, len(pub), slowest)
				assert.LessOrEqual(t, missed, len(pub)/5, "a live replica misses (almost) nothing")
				assert.Less(t, slowest, 1500*time.Millisecond, "a dead replica delays no other")
			}
			require.Eventually(t, func() bool { return !u.Streams()[dead.addr].Connected }, 20*time.Second, 50*time.Millisecond)
			assert.Equal(t, 0.0, testutil.ToFloat64(u.m.connected.WithLabelValues(dead.addr)))

			// Restart it on the same port: it resumes with newer reports.
			before := u.seq.Load()
			restartedAt := time.Now()
			dead.start()
			require.Eventually(t, func() bool { return dead.maxSeq() > before }, 30*time.Second, 50*time.Millisecond, "restarted replica resumes")
			t.Logf("restarted replica got report %d %s after restart", dead.maxSeq(), time.Since(restartedAt))
			assert.True(t, u.Streams()[dead.addr].Connected)
		})
	}
}

func TestAFrozenReplicaDelaysNoOther(t *testing.T) {
	l := newLab(t)
	frozen, live := l.replica(t), l.replica(t)
	u := l.start(t, nil, frozen.addr, live.addr)
	p := publish(t, u, 100*time.Millisecond)
	for _, r := range []*replicaProc{frozen, live} {
		require.Eventually(t, func() bool { return len(r.reports()) >= 3 }, 30*time.Second, 50*time.Millisecond)
	}

	// SIGSTOP: the connection stays open and silent; nothing is reset.
	frozen.freeze()
	frozenAt := time.Now()
	require.Eventually(t, func() bool { return !u.Streams()[frozen.addr].Connected }, 30*time.Second, 50*time.Millisecond,
		"a silent replica is dropped (ack timeout)")
	t.Logf("frozen replica dropped after %s", time.Since(frozenAt))
	time.Sleep(time.Second)
	pub := p.between(frozenAt.Add(100*time.Millisecond), time.Now().Add(-time.Second))
	missed, slowest := delivery(live, pub)
	t.Logf("while the other replica was frozen: %d of %d reports missed, slowest %s", missed, len(pub), slowest)
	assert.LessOrEqual(t, missed, len(pub)/5)
	assert.Less(t, slowest, 1500*time.Millisecond)

	before := u.seq.Load()
	frozen.thaw()
	require.Eventually(t, func() bool { return frozen.maxSeq() > before }, 30*time.Second, 50*time.Millisecond, "thawed replica resumes")
}

func TestResolvesDNSNamesToEveryAddress(t *testing.T) {
	l := newLab(t, "127.0.0.1", "localhost")
	r := l.replica(t)
	_, port, err := net.SplitHostPort(r.addr)
	require.NoError(t, err)
	u := l.start(t, nil, net.JoinHostPort("localhost", port))
	publish(t, u, 100*time.Millisecond)
	require.Eventually(t, func() bool { return len(r.reports()) >= 2 }, 30*time.Second, 50*time.Millisecond)
	st := u.Streams()
	require.Contains(t, st, r.addr, "localhost resolved to 127.0.0.1")
	assert.True(t, st[r.addr].Connected, "the certificate was checked for the DNS name")
}

func TestDesiredIntervalComesFromAcks(t *testing.T) {
	l := newLab(t)
	r := l.replica(t, "--desired-interval", "7s")
	u := l.start(t, nil, r.addr)
	assert.Zero(t, u.DesiredInterval())
	require.Eventually(t, func() bool { return u.DesiredInterval() == 7*time.Second }, 30*time.Second, 50*time.Millisecond)
}

func TestUntrustedServerIsNotSentAnything(t *testing.T) {
	l := newLab(t)
	r := l.replica(t)
	other := newLab(t) // another CA
	u, err := New(Config{Aggregators: []string{r.addr}, CAFile: other.files.CAFile, NodeName: "cp1", InsecureDevKeyFile: l.keyFile,
		BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond}, zaptest.NewLogger(t))
	require.NoError(t, err)
	runUplink(t, u)
	publish(t, u, 50*time.Millisecond)
	time.Sleep(2 * time.Second)
	assert.Empty(t, r.reports())
	assert.False(t, u.Streams()[r.addr].Connected)
	assert.Zero(t, u.Streams()[r.addr].Sent)
}

func TestPublishStampsSignsAndNeverMutates(t *testing.T) {
	l := newLab(t)
	u, err := New(Config{Aggregators: []string{"127.0.0.1:1"}, CAFile: l.files.CAFile, NodeName: "cp1", TokenFile: "/nonexistent"}, nil)
	require.NoError(t, err)
	in := &report.NodeReport{Interval: 5 * time.Second, Sequence: 99, AgentInstanceID: "mine"}
	var last uint64
	for range 3 {
		u.Publish(in)
		p := u.latest.Load()
		require.NotNil(t, p)
		require.NoError(t, signing.Verify(u.signer.PublicKey(), p.sr.GetPayload(), p.sr.GetSignature()))
		assert.Equal(t, u.KeyID(), p.sr.GetKeyId())
		assert.Equal(t, signing.KeyID(ed25519.PublicKey(u.signer.PublicKey())), u.KeyID())
		var w pb.NodeReport
		require.NoError(t, proto.Unmarshal(p.sr.GetPayload(), &w))
		r, err := wire.ReportFromProto(&w)
		require.NoError(t, err)
		assert.Equal(t, "cp1", r.NodeName)
		assert.Equal(t, u.InstanceID(), r.AgentInstanceID)
		assert.Greater(t, r.Sequence, last)
		assert.Equal(t, p.seq, r.Sequence)
		assert.WithinDuration(t, time.Now(), r.SentAt, 5*time.Second)
		last = r.Sequence
	}
	assert.Equal(t, uint64(99), in.Sequence, "the caller's report is not changed")
	assert.Equal(t, "mine", in.AgentInstanceID)

	u2, err := New(Config{Aggregators: []string{"127.0.0.1:1"}, CAFile: l.files.CAFile, NodeName: "cp1", TokenFile: "/nonexistent"}, nil)
	require.NoError(t, err)
	assert.NotEqual(t, u.InstanceID(), u2.InstanceID(), "instance id is random per start")
	assert.NotEqual(t, u.KeyID(), u2.KeyID(), "key is fresh per start")
}

func TestConfigValidate(t *testing.T) {
	good := Config{Aggregators: []string{"10.0.0.1:9443", "cozy-health-aggregator.cozy-health.svc:9443"}, CAFile: "/ca", NodeName: "n", TokenFile: "/t"}
	require.NoError(t, good.Validate())
	for name, mutate := range map[string]func(*Config){
		"no aggregators":   func(c *Config) { c.Aggregators = nil },
		"no port":          func(c *Config) { c.Aggregators = []string{"10.0.0.1"} },
		"no ca":            func(c *Config) { c.CAFile = "" },
		"no node":          func(c *Config) { c.NodeName = "" },
		"no token, no dev": func(c *Config) { c.TokenFile = "" },
		"backoff inverted": func(c *Config) { c.BackoffInitial, c.BackoffMax = time.Minute, time.Second },
	} {
		c := good
		mutate(&c)
		assert.Error(t, c.Validate(), name)
	}
}
