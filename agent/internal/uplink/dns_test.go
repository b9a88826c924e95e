package uplink

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/cozystack/cozy-health/test/harness"
)

// dnsServer is a DNS server on loopback UDP (RFC 1035 messages, parsed
// and built with dnsmessage, as Go's own resolver does) that answers A
// queries for one name with the addresses the test sets: what a headless
// Service's name resolves to as its pods come and go.
type dnsServer struct {
	name  dnsmessage.Name
	pc    net.PacketConn
	mu    sync.Mutex
	addrs []netip.Addr
	// aQueries counts the A queries for name.
	aQueries atomic.Int64
}

func startDNS(t *testing.T, name string) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	d := &dnsServer{name: dnsmessage.MustNewName(name), pc: pc}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if msg, ok := d.answer(buf[:n]); ok {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	}()
	t.Cleanup(func() { _ = pc.Close(); <-done })
	return d
}

func (d *dnsServer) set(addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addrs = d.addrs[:0]
	for _, a := range addrs {
		d.addrs = append(d.addrs, netip.MustParseAddr(a))
	}
}

func (d *dnsServer) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if q.Name != d.name {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	if q.Name == d.name && q.Type == dnsmessage.TypeA {
		d.aQueries.Add(1)
		d.mu.Lock()
		addrs := slices.Clone(d.addrs)
		d.mu.Unlock()
		for _, a := range addrs {
			if b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}, dnsmessage.AResource{A: a.As4()}) != nil {
				return nil, false
			}
		}
	}
	msg, err := b.Finish()
	return msg, err == nil
}

// resolver is a Go resolver that asks only this server.
func (d *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.pc.LocalAddr().String())
	}}
}

// portOnAll picks a port free on 127.0.0.1, .2 and .3, below the ephemeral
// range: replica pods behind one Service port.
func portOnAll(t *testing.T) string {
	t.Helper()
next:
	for range 50 {
		p, err := harness.RebindablePort()
		require.NoError(t, err)
		for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
			if err != nil {
				continue next
			}
			require.NoError(t, ln.Close())
		}
		return strconv.Itoa(p)
	}
	t.Fatal("no port free on 127.0.0.1, .2 and .3")
	return ""
}

// TestFindsReplicasSoonerThanTheResolveInterval: with a 10 minute resolve
// interval, the agent still finds the first replica of a fresh install
// (the name resolved to nothing) and the pod that replaced a deleted one
// (gone from DNS before its replacement appears) within seconds, by
// resolving again soon while it has nothing to stream to and for a while
// after the replicas changed or one stopped answering; once they have
// settled it goes back to the interval, also while a listed replica stays
// down.
func TestFindsReplicasSoonerThanTheResolveInterval(t *testing.T) {
	const host = "cozy-health-aggregator-ingest.cozy-health.svc"
	l := newLab(t, host)
	port := portOnAll(t)
	dns := startDNS(t, host+".")
	u, err := New(Config{
		Aggregators: []string{net.JoinHostPort(host, port)}, CAFile: l.files.CAFile, NodeName: "cp1", InsecureDevKeyFile: l.keyFile,
		BackoffInitial: 100 * time.Millisecond, BackoffMax: 500 * time.Millisecond, AckTimeout: 2 * time.Second,
		ResolveInterval: 10 * time.Minute, ResolveUnsettled: 10 * time.Second, Resolver: dns.resolver(),
	}, zaptest.NewLogger(t))
	require.NoError(t, err)
	runUplink(t, u)
	publish(t, u, 100*time.Millisecond)

	// A fresh install: the Service lists no pod yet.
	require.Eventually(t, func() bool { return dns.aQueries.Load() >= 2 }, 30*time.Second, 50*time.Millisecond,
		"the agent asks again while the name resolves to nothing")
	first := startReplicaAt(t, l.files, net.JoinHostPort("127.0.0.1", port), "--insecure-dev-keys-dir", l.keysDir)
	dns.set("127.0.0.1")
	listed := time.Now()
	require.Eventually(t, func() bool { return len(first.reports()) > 0 }, 30*time.Second, 50*time.Millisecond,
		"the first replica gets reports long before the 10 minute resolve interval")
	t.Logf("first replica streamed to %s after it was listed", time.Since(listed).Round(time.Millisecond))

	// Its pod is deleted: it leaves the Service at once, and the
	// Deployment's replacement, with another address, joins it seconds
	// later, while the agent streams to every replica it knows of.
	first.kill()
	dns.set()
	for n := dns.aQueries.Load(); dns.aQueries.Load() < n+2; {
		time.Sleep(50 * time.Millisecond)
	}
	second := startReplicaAt(t, l.files, net.JoinHostPort("127.0.0.2", port), "--insecure-dev-keys-dir", l.keysDir)
	dns.set("127.0.0.2")
	listed = time.Now()
	require.Eventually(t, func() bool { return len(second.reports()) > 0 }, 30*time.Second, 50*time.Millisecond,
		"the replacement gets reports long before the 10 minute resolve interval")
	t.Logf("replacement streamed to %s after it was listed", time.Since(listed).Round(time.Millisecond))
	require.Eventually(t, func() bool {
		_, gone := u.Streams()[first.addr]
		return !gone
	}, 30*time.Second, 50*time.Millisecond, "the dead replica, gone from DNS, is dropped")

	// A second replica joins: once both stream and none came or went for
	// ResolveUnsettled, no more quick resolves (they are at most 8 s apart).
	third := startReplicaAt(t, l.files, net.JoinHostPort("127.0.0.3", port), "--insecure-dev-keys-dir", l.keysDir)
	dns.set("127.0.0.2", "127.0.0.3")
	require.Eventually(t, func() bool { return len(third.reports()) > 0 }, 30*time.Second, 50*time.Millisecond)
	settled := func(msg string) {
		t.Helper()
		require.Eventually(t, func() bool {
			n := dns.aQueries.Load()
			time.Sleep(12 * time.Second)
			return dns.aQueries.Load() == n
		}, 2*time.Minute, 10*time.Millisecond, msg)
	}
	settled("resolves settle back to the interval")

	// One replica stops answering but stays listed (crash looping: the
	// Service lists it while not ready) while the other streams: its broken
	// stream brings a resolve within seconds, and quick resolves for
	// ResolveUnsettled, not for as long as it stays down.
	third.kill()
	n := dns.aQueries.Load()
	require.Eventually(t, func() bool { return dns.aQueries.Load() > n }, 30*time.Second, 50*time.Millisecond,
		"a broken stream brings a resolve within seconds")
	settled("resolves settle back to the interval while it stays down")
	assert.False(t, u.Streams()[third.addr].Connected)
	assert.True(t, u.Streams()[second.addr].Connected)
}
