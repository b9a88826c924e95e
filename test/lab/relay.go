package lab

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// uplinkRelay is a node's network path to the aggregators: the node's
// agent dials the aggregators only through it (one loopback listener per
// replica, Node.Uplinks), and the partition fault cuts it. Cut, it behaves
// as a network that drops every packet between the node and the
// aggregators: bytes in flight on open connections are swallowed in both
// directions (neither end sees a close or a reset; keepalives and acks
// go unanswered), and a new connection is accepted by the kernel but
// nothing ever passes on it (a TLS handshake hangs, as a dial into a
// dropped SYN does). Healed, the connections that lived through the cut
// are closed (their byte streams lost data; over a real network they
// would have timed out) and new ones pass again.
//
// CutFrom cuts the path to one replica only, the same way (a partial
// partition: the other replicas still hear the node); Heal repairs both
// kinds.
type uplinkRelay struct {
	node string
	// target is the current address of aggregator i (read from lab.json
	// at dial time: the replicas' addresses are chosen after the daemon
	// starts).
	target func(i int) (string, error)

	mu  sync.Mutex
	cut bool
	// cutFrom are the replicas (by index) the node is cut from alone.
	cutFrom map[int]bool
	conns   map[*relayConn]bool // live connections -> lived through a cut
	lns     []net.Listener
	closed  bool
}

type relayConn struct {
	client, upstream net.Conn
	// replica is the index of the aggregator this connection goes to.
	replica int
}

func (c *relayConn) close() {
	_ = c.client.Close()
	if c.upstream != nil {
		_ = c.upstream.Close()
	}
}

// startRelay serves one listener per aggregator replica.
func startRelay(node string, lns []net.Listener, target func(int) (string, error)) *uplinkRelay {
	r := &uplinkRelay{node: node, target: target, conns: map[*relayConn]bool{}, lns: lns, cutFrom: map[int]bool{}}
	for i, ln := range lns {
		go r.accept(i, ln)
	}
	return r
}

func (r *uplinkRelay) accept(i int, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go r.handle(i, c)
	}
}

func (r *uplinkRelay) handle(i int, client net.Conn) {
	rc := &relayConn{client: client, replica: i}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = client.Close()
		return
	}
	cut := r.cut || r.cutFrom[i]
	r.conns[rc] = cut
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.conns, rc)
		r.mu.Unlock()
		rc.close()
	}()
	if cut {
		// Into the wall: read and drop until heal closes it.
		_, _ = io.Copy(io.Discard, client)
		return
	}
	addr, err := r.target(i)
	if err != nil {
		return
	}
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return // refused: the replica is down; the agent sees its dial fail
	}
	r.mu.Lock()
	rc.upstream = up
	if r.conns[rc] || r.cut || r.cutFrom[i] {
		// Cut while dialling.
		r.conns[rc] = true
	}
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { r.pipe(up, client, i); done <- struct{}{} }()
	go func() { r.pipe(client, up, i); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst while the relay (or its path to replica i) is
// not cut and drops what it reads while it is.
func (r *uplinkRelay) pipe(dst, src net.Conn, i int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			cut := r.cut || r.cutFrom[i]
			r.mu.Unlock()
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut partitions the node from the aggregators; it returns how many open
// connections went dark.
func (r *uplinkRelay) Cut() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	for c := range r.conns {
		r.conns[c] = true
	}
	return len(r.conns)
}

// CutFrom partitions the node from aggregator i alone; it returns how
// many open connections to it went dark.
func (r *uplinkRelay) CutFrom(i int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cutFrom[i] = true
	n := 0
	for c := range r.conns {
		if c.replica == i {
			r.conns[c] = true
			n++
		}
	}
	return n
}

// Heal ends every partition, whole or from single replicas: connections
// that lived through one are closed, new ones pass. It returns how many
// were closed.
func (r *uplinkRelay) Heal() int {
	r.mu.Lock()
	r.cut = false
	clear(r.cutFrom)
	var stale []*relayConn
	for c, cut := range r.conns {
		if cut {
			stale = append(stale, c)
		}
	}
	r.mu.Unlock()
	for _, c := range stale {
		c.close()
	}
	return len(stale)
}

// Close stops the listeners and every connection.
func (r *uplinkRelay) Close() {
	r.mu.Lock()
	r.closed = true
	conns := make([]*relayConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, ln := range r.lns {
		_ = ln.Close()
	}
	for _, c := range conns {
		c.close()
	}
}

// aggregatorTarget reads aggregator i's gRPC address from the lab state in
// dir.
func aggregatorTarget(dir string) func(int) (string, error) {
	return func(i int) (string, error) {
		s, err := LoadState(dir)
		if err != nil {
			return "", err
		}
		if i >= len(s.Aggregators) {
			return "", fmt.Errorf("lab has no aggregator %d", i)
		}
		return s.Aggregators[i].GRPC, nil
	}
}

// replicaIndex reads partition-from's argument: a replica's index (0, 1,
// 2) or its lab name (aggregator-1, as lab.json and the Lease holder name
// it).
func replicaIndex(arg string, replicas int) (int, error) {
	i, err := strconv.Atoi(strings.TrimPrefix(arg, "aggregator-"))
	if err != nil || i < 0 || i >= replicas {
		return 0, fmt.Errorf("want a replica index 0..%d or its name aggregator-N, got %q", replicas-1, arg)
	}
	return i, nil
}
