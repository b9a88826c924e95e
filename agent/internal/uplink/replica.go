package uplink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"

	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// replica is one aggregator replica and its stream state.
type replica struct {
	target
	cancel context.CancelFunc
	// wake has room for one signal: "a newer report may be there".
	wake chan struct{}

	// lastSent is the sequence of the newest report written to a stream of
	// this replica; only the replica's goroutine touches it.
	lastSent uint64

	connected             atomic.Bool
	sent, acked, rejected atomic.Uint64
	// lastAcked is the newest accepted sequence, lastAnswered the newest
	// acknowledged one, accepted or not.
	lastAcked, lastAnswered atomic.Uint64
}

func (r *replica) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// runReplica keeps a stream to one replica open until ctx is done, with its
// own exponential backoff between attempts.
func (u *Uplink) runReplica(ctx context.Context, r *replica) {
	log := u.log.With(zap.String("aggregator", r.addr), zap.String("serverName", r.serverName))
	defer u.m.forget(r.addr)
	tc := u.tls.Clone()
	tc.ServerName = r.serverName
	conn, err := grpc.NewClient("passthrough:///"+r.addr, append(wire.DialOptions(),
		grpc.WithTransportCredentials(newCAReloadingCreds(tc, u.ca, log)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: u.cfg.KeepaliveTime, Timeout: u.cfg.KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: u.cfg.BackoffInitial, Multiplier: 2, Jitter: 0.2, MaxDelay: u.cfg.BackoffMax},
			MinConnectTimeout: u.cfg.HelloTimeout,
		}),
	)...)
	if err != nil {
		// Only a malformed target gets here; it will not get better.
		log.Error("create aggregator client", zap.Error(err))
		return
	}
	defer func() { _ = conn.Close() }()
	client := pb.NewIngestServiceClient(conn)
	delay := u.cfg.BackoffInitial
	failures := 0
	for {
		start := time.Now()
		gotAck, err := u.stream(ctx, client, r, log)
		if ctx.Err() != nil {
			return
		}
		if gotAck {
			delay, failures = u.cfg.BackoffInitial, 0
		}
		failures++
		// The first failure and then every tenth are logged at warn level.
		lvl := log.Debug
		if failures == 1 || failures%10 == 0 {
			lvl = log.Warn
		}
		wait := jitter(delay)
		lvl("aggregator stream failed", zap.Error(err), zap.Duration("lasted", time.Since(start)), zap.Duration("retryIn", wait), zap.Int("failures", failures))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		delay = min(2*delay, u.cfg.BackoffMax)
	}
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// stream runs one stream: Hello, then the newest report whenever there is a
// newer one. It reports whether any report was acknowledged.
func (u *Uplink) stream(ctx context.Context, client pb.IngestServiceClient, r *replica, log *zap.Logger) (bool, error) {
	replicaCtx := ctx // ends when the replica is dropped or the uplink stops
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hello := &pb.Hello{
		PublicKey: u.signer.PublicKey(), KeyId: u.signer.KeyID(), AgentInstanceId: u.instanceID,
		NodeName: u.cfg.NodeName, AgentVersion: u.cfg.AgentVersion,
	}
	if u.cfg.TokenFile != "" {
		// Read for every stream: the kubelet rotates the projected token in
		// place.
		b, err := os.ReadFile(u.cfg.TokenFile)
		if err != nil {
			return false, fmt.Errorf("read token file: %w", err)
		}
		hello.Token = string(bytes.TrimSpace(b))
	}
	helloTimer := time.AfterFunc(u.cfg.HelloTimeout, func() { cancel(errors.New("no hello ack in time")) })
	defer helloTimer.Stop()
	st, err := client.Ingest(ctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	if err := st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: hello}}); err != nil {
		return false, fmt.Errorf("send hello: %w", causeOr(ctx, err))
	}
	resp, err := st.Recv()
	if err != nil {
		return false, fmt.Errorf("receive hello ack: %w", causeOr(ctx, err))
	}
	if !helloTimer.Stop() {
		return false, fmt.Errorf("hello: %w", context.Cause(ctx))
	}
	if a := resp.GetAck(); !a.GetAccepted() {
		return false, fmt.Errorf("hello rejected: %s", a.GetRejectReason())
	}
	u.noteDesired(resp.GetAck())
	r.connected.Store(true)
	u.m.connected.WithLabelValues(r.addr).Set(1)
	defer func() {
		r.connected.Store(false)
		u.m.connected.WithLabelValues(r.addr).Set(0)
		if replicaCtx.Err() == nil {
			u.lostStream()
		}
	}()
	log.Info("aggregator stream open")

	var gotAck atomic.Bool
	// lastProgress (unix nanos) is when an ack last arrived, or when a
	// report was sent with none outstanding.
	var lastProgress atomic.Int64
	lastProgress.Store(time.Now().UnixNano())
	recvDone := make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			a := resp.GetAck()
			u.noteDesired(a)
			gotAck.Store(true)
			lastProgress.Store(time.Now().UnixNano())
			r.lastAnswered.Store(a.GetSequence())
			if a.GetAccepted() {
				r.acked.Add(1)
				r.lastAcked.Store(a.GetSequence())
				u.m.acks.WithLabelValues(r.addr, "accepted").Inc()
			} else {
				r.rejected.Add(1)
				u.m.acks.WithLabelValues(r.addr, "rejected").Inc()
				log.Warn("aggregator rejected report", zap.Uint64("sequence", a.GetSequence()), zap.String("reason", a.GetRejectReason()))
			}
		}
	}()

	// sentHere is the newest sequence sent on this stream; acks on this
	// stream answer only reports sent on it.
	var sentHere atomic.Uint64
	// The watchdog cancels the stream when a report stays unanswered, which
	// also unblocks a Send stuck on a replica that stopped reading.
	go func() {
		check := time.NewTicker(max(u.cfg.AckTimeout/4, 10*time.Millisecond))
		defer check.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-check.C:
				if r.lastAnswered.Load() < sentHere.Load() && time.Since(time.Unix(0, lastProgress.Load())) > u.cfg.AckTimeout {
					cancel(fmt.Errorf("no ack for report %d within %s", sentHere.Load(), u.cfg.AckTimeout))
					return
				}
			}
		}
	}()
	for {
		if p := u.latest.Load(); p != nil && p.seq > r.lastSent {
			if r.lastAnswered.Load() >= sentHere.Load() {
				lastProgress.Store(time.Now().UnixNano())
			}
			// Marked sent before the write: if the write fails we cannot
			// know whether it arrived, and resending it could only be
			// counted as a replay.
			r.lastSent = p.seq
			sentHere.Store(p.seq)
			if err := st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: p.sr}}); err != nil {
				return gotAck.Load(), fmt.Errorf("send report: %w", causeOr(ctx, err))
			}
			r.sent.Add(1)
			u.m.sent.WithLabelValues(r.addr).Inc()
		}
		select {
		case <-ctx.Done():
			_ = st.CloseSend()
			return gotAck.Load(), context.Cause(ctx)
		case err := <-recvDone:
			return gotAck.Load(), fmt.Errorf("receive ack: %w", causeOr(ctx, err))
		case <-r.wake:
		}
	}
}

// causeOr returns why ctx was cancelled, or err when it was not.
func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return fmt.Errorf("%w (%w)", c, err)
	}
	return err
}

// noteDesired adopts the desired interval of an ack.
func (u *Uplink) noteDesired(a *pb.Ack) {
	if d := a.GetDesiredInterval(); d != nil && d.IsValid() && d.AsDuration() > 0 {
		u.desired.Store(int64(d.AsDuration()))
	}
}
