package ingest

import (
	"runtime"
	"time"

	"github.com/cozystack/cozy-health/pkg/signing"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// Batched verification. A verifier takes one job, then every job already
// waiting or handed over while it yields once, up to verifyBatchMax
// (gatherer.gather); runs the checks before the signature on each report
// (verify.Verifier.Admit); verifies the signatures of the admitted ones in
// one signing.Batch; and finishes each report with its own answer
// (verify.Verifier.Finish). signing.Batch answers each signature exactly
// as the report's own VerifyKey.Verify would (a failed batch is verified
// again one signature at a time, a batch of one is verified alone), so a
// report's checks, their order and its rejection reason are those of
// verify.Verifier.Verify, and a rejected report still changes nothing but
// its node's rate bucket.

const (
	// verifyBatchMax bounds the reports of one batch. curve25519-voi uses
	// the keys' precomputed tables up to 94 signatures a batch
	// (batchPippengerThreshold); per signature of a 3 KB report, a batch
	// of 64 costs 17.2 against 26.7 microseconds alone, one of 16 costs
	// 18.0 (go test -bench BatchVerify ./pkg/signing/).
	//
	// A verifier does not wait for reports on a timer, so batching adds
	// no timed wait to an ack. Once every stream with a report in flight
	// has handed it over, any wait is pure delay: a fixed 2 ms window cut
	// 8 closed-loop streams from about 30,000 to 3,000 reports/s, and a
	// 200 us gap between reports (whose timer took over a millisecond to
	// fire on the bench machine) to 5,000 (BenchmarkIngestVerifiers). Batches therefore form when
	// reports arrive faster than one verifier verifies them (a burst, the
	// reconnection of every agent); at a steady 1,000 reports/s most
	// batches hold one report, verified alone as before.
	verifyBatchMax = 64
)

// gatherer hands batches of jobs to the verifiers. Every verifier
// receives on jobs directly, as before batching: while one verifies its
// batch, the reports that arrive gather for the next verifier to take.
// (One gatherer at a time, behind a mutex, made larger batches but woke a
// second verifier for every batch, which cost more than batching saved in
// BenchmarkIngestGRPC.)
type gatherer struct {
	jobs <-chan *verifyJob
	stop <-chan struct{}
}

// gather appends to buf one job, then those already waiting, up to
// verifyBatchMax. Between rounds it yields its thread (runtime.Gosched), so
// that streams whose acks were just sent, runnable but waiting for a
// thread, hand over their next report; it stops at the first round that
// finds none. It returns done once stop is closed; the jobs it returns
// must still be answered.
func (g *gatherer) gather(buf []*verifyJob) ([]*verifyJob, bool) {
	select {
	case <-g.stop:
		return buf, true
	case j := <-g.jobs:
		buf = append(buf, j)
	}
	yielded := false
	for len(buf) < verifyBatchMax {
		select {
		case j := <-g.jobs:
			buf = append(buf, j)
			yielded = false
			continue
		default:
		}
		if yielded {
			break
		}
		runtime.Gosched()
		yielded = true
	}
	return buf, false
}

// verifierBatch is one verifier's reusable buffers.
type verifierBatch struct {
	jobs     []*verifyJob
	admitted []*verifyJob
	nows     []time.Time
	sigs     *signing.Batch
}

func newVerifierBatch() *verifierBatch {
	return &verifierBatch{
		jobs: make([]*verifyJob, 0, verifyBatchMax), admitted: make([]*verifyJob, 0, verifyBatchMax),
		nows: make([]time.Time, 0, verifyBatchMax), sigs: signing.NewBatch(verifyBatchMax),
	}
}

// verifyJobs answers every job of vb.jobs: a Hello's key is expanded, a
// report is checked as handleReport checks it, with the signatures of the
// reports that reach that check verified in one batch. A job is not
// touched after its answer is sent: its stream reuses it.
func (s *Server) verifyJobs(vb *verifierBatch) {
	for _, j := range vb.jobs {
		if j.pub != nil {
			j.key, j.keyErr = signing.NewVerifyKey(j.pub)
			j.resp <- nil
			continue
		}
		s.m.received.Inc()
		now := s.now()
		if reason, detail := s.verifier.Admit(&j.sess.Session, j.sr, now); reason != "" {
			j.resp <- s.answer(j.sess, j.sr, now, 0, reason, detail)
			continue
		}
		vb.admitted = append(vb.admitted, j)
		vb.nows = append(vb.nows, now)
		vb.sigs.Add(j.sess.Key, j.sr.GetPayload(), j.sr.GetSignature())
	}
	if n := vb.sigs.Len(); n > 0 {
		s.m.verifyBatchSize.Observe(float64(n))
		errs, _ := vb.sigs.Verify()
		for i, j := range vb.admitted {
			seq, reason, detail := s.verifier.Finish(&j.sess.Session, j.sr, vb.nows[i], errs[i], s.sink.Accept)
			j.resp <- s.answer(j.sess, j.sr, vb.nows[i], seq, reason, detail)
		}
	}
	vb.sigs.Reset()
	clear(vb.jobs)
	clear(vb.admitted)
	vb.jobs, vb.admitted, vb.nows = vb.jobs[:0], vb.admitted[:0], vb.nows[:0]
}

// answer counts and acknowledges a checked report as handleReport does.
func (s *Server) answer(sess *session, sr *pb.SignedReport, now time.Time, seq uint64, reason, detail string) *pb.IngestResponse {
	if reason != "" {
		s.reject(reason, sess.Node, sess.peer, detail, seq)
		return s.ack(seq, reason)
	}
	s.m.accepted.Inc()
	s.latest.report(sess.Node, sess.Instance, sess.KeyID, sr, seq, now)
	return s.ack(seq, "")
}
