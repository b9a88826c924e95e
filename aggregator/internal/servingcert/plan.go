package servingcert

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// Keys of the Secret. tls.crt, tls.key and ca.crt are the ones cert-manager
// writes and the chart's interface; ca.key and ca-next.key exist only in a
// Secret the aggregator keeps itself (--tls-mode=self-signed).
const (
	KeyCert      = "tls.crt"
	KeyKey       = "tls.key"
	KeyCA        = "ca.crt"
	KeyCAKey     = "ca.key"
	KeyNextCAKey = "ca-next.key"
	// AnnotationNextCAPublishedAt is when the bundle holding the next CA
	// was written: the switch to it waits --tls-ca-overlap from there.
	AnnotationNextCAPublishedAt = "health.cozystack.io/next-ca-published-at"
)

// caCommonName is the subject of the CAs the aggregator mints; the time
// makes successive CAs tell apart in a bundle.
func caCommonName(now time.Time) string {
	return "cozy-health aggregator CA " + now.UTC().Format("2006-01-02T15:04:05Z")
}

// bundleState is a self-kept Secret decoded.
type bundleState struct {
	// bundle is ca.crt: every CA agents trust, old and new.
	bundle []*x509.Certificate
	// signer signs serving certificates; next, during a CA rotation, is the
	// CA published beside it since nextSince.
	signer, next *tlsutil.CA
	nextSince    time.Time
	// leaf is the serving certificate when tls.crt and tls.key parse and
	// match.
	leaf *x509.Certificate
}

func decode(data map[string][]byte, ann map[string]string) bundleState {
	var st bundleState
	st.bundle, _ = tlsutil.ParseCertificates(data[KeyCA])
	st.signer, _ = tlsutil.FindCA(st.bundle, data[KeyCAKey])
	if k := data[KeyNextCAKey]; len(k) > 0 {
		st.next, _ = tlsutil.FindCA(st.bundle, k)
		st.nextSince, _ = time.Parse(time.RFC3339Nano, ann[AnnotationNextCAPublishedAt])
	}
	if pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey]); err == nil {
		st.leaf, _ = x509.ParseCertificate(pair.Certificate[0])
	}
	return st
}

// plan is what maintain decided for one Secret.
type plan struct {
	data        map[string][]byte
	annotations map[string]string
	// actions says what changed, for the log; empty when nothing did.
	actions []string
	// caRotated and servingIssued count for the metrics.
	caRotated, servingIssued bool
}

// policy is the part of Config a plan follows.
type policy struct {
	hosts                               []string
	caValidity, certValidity, caOverlap time.Duration
}

// initial is the Secret of a first start: a new CA and a serving
// certificate it signed.
func initial(now time.Time, p policy) (map[string][]byte, error) {
	pl, err := maintain(now, p, nil, nil, func([]byte) bool { return false })
	if err != nil {
		return nil, err
	}
	return pl.data, nil
}

// maintain decides what the self-kept Secret should hold at now:
//
//   - no usable signing CA (first start, a damaged Secret): a new CA signs
//     at once (a next CA already published takes over instead);
//   - the signing CA in its last third (--tls-ca-validity / 3), or without
//     name constraints (minted by an older release): a next CA is minted
//     and published beside it in ca.crt; every CA minted carries critical
//     name constraints permitting only the serving names, and one whose
//     constraints do not cover them (the names changed) is replaced at once;
//   - the next CA published for --tls-ca-overlap and the CA ConfigMap
//     holding that bundle (published reports it): the next CA signs from
//     now on; the old one stays in the bundle until it expires, so agents
//     holding either bundle keep connecting;
//   - CAs past their expiry leave the bundle;
//   - the serving certificate is (re)issued when it is missing, damaged,
//     not signed by the signing CA, carries other SANs than wanted, or is
//     in its last third and a new one would live longer (a certificate
//     capped by its CA's expiry waits for the CA switch instead).
//
// It never drops a CA agents may still need before it expires.
func maintain(now time.Time, p policy, data map[string][]byte, ann map[string]string, published func(bundle []byte) bool) (plan, error) {
	st := decode(data, ann)
	var pl plan
	act := func(format string, a ...any) { pl.actions = append(pl.actions, fmt.Sprintf(format, a...)) }
	mintCA := func() (*tlsutil.CA, error) {
		return tlsutil.NewCAValid(caCommonName(now), now.Add(-tlsutil.Backdate), now.Add(p.caValidity), p.hosts...)
	}

	if st.signer == nil || !now.Before(st.signer.Cert().NotAfter) || !tlsutil.Permits(st.signer.Cert(), p.hosts) {
		why := "no usable signing CA in the Secret"
		switch {
		case st.signer == nil:
		case !tlsutil.Permits(st.signer.Cert(), p.hosts):
			// The serving names changed (--tls-extra-sans): a CA whose name
			// constraints do not cover them cannot sign them. New
			// connections fail until agents read the new bundle (a minute
			// or two); open streams go on.
			why = "the serving names are outside the signing CA's name constraints"
		default:
			why = "the signing CA expired"
		}
		if st.next != nil && !tlsutil.Permits(st.next.Cert(), p.hosts) {
			st.next = nil
		}
		if st.next != nil {
			st.signer, st.next = st.next, nil
			act("switched to the next CA early: %s", why)
		} else {
			ca, err := mintCA()
			if err != nil {
				return plan{}, err
			}
			st.signer = ca
			st.bundle = append(st.bundle, ca.Cert())
			act("new CA %q: %s", ca.Cert().Subject.CommonName, why)
		}
		pl.caRotated = true
	}
	// A CA minted before name constraints (an older release) is replaced
	// the same gentle way as one in its last third.
	if st.next == nil && (st.signer.Cert().NotAfter.Sub(now) < p.caValidity/3 || !tlsutil.Constrained(st.signer.Cert())) {
		ca, err := mintCA()
		if err != nil {
			return plan{}, err
		}
		st.next, st.nextSince = ca, now
		st.bundle = append(st.bundle, ca.Cert())
		act("next CA %q published beside %q; the switch waits %s", ca.Cert().Subject.CommonName, st.signer.Cert().Subject.CommonName, p.caOverlap)
	}
	// Expired CAs leave the bundle; the signing and next CA always stay.
	var kept []*x509.Certificate
	for _, c := range st.bundle {
		keep := now.Before(c.NotAfter) || c.Equal(st.signer.Cert()) || (st.next != nil && c.Equal(st.next.Cert()))
		if keep && !slices.ContainsFunc(kept, c.Equal) {
			kept = append(kept, c)
		} else if !keep {
			act("expired CA %q left the bundle", c.Subject.CommonName)
		}
	}
	st.bundle = kept
	caPEM := tlsutil.EncodeCertificates(st.bundle)
	if st.next != nil && !now.Before(st.nextSince.Add(p.caOverlap)) && published(caPEM) {
		act("switched to CA %q after %s of overlap", st.next.Cert().Subject.CommonName, now.Sub(st.nextSince).Round(time.Second))
		st.signer, st.next = st.next, nil
		pl.caRotated = true
	}

	certPEM, keyPEM := data[KeyCert], data[KeyKey]
	if why := reissue(now, p, st); why != "" {
		notAfter := earliest(now.Add(p.certValidity), st.signer.Cert().NotAfter)
		var err error
		certPEM, keyPEM, err = st.signer.IssueValid(pkix.Name{CommonName: p.hosts[0]}, p.hosts, x509.ExtKeyUsageServerAuth, now.Add(-tlsutil.Backdate), notAfter)
		if err != nil {
			return plan{}, fmt.Errorf("issue serving certificate: %w", err)
		}
		act("serving certificate issued (%s), valid until %s", why, notAfter.UTC().Format(time.RFC3339))
		pl.servingIssued = true
	}

	signerKey, err := st.signer.KeyPEM()
	if err != nil {
		return plan{}, err
	}
	pl.data = map[string][]byte{KeyCert: certPEM, KeyKey: keyPEM, KeyCA: caPEM, KeyCAKey: signerKey}
	pl.annotations = map[string]string{}
	for k, v := range ann {
		if k != AnnotationNextCAPublishedAt {
			pl.annotations[k] = v
		}
	}
	if st.next != nil {
		if pl.data[KeyNextCAKey], err = st.next.KeyPEM(); err != nil {
			return plan{}, err
		}
		pl.annotations[AnnotationNextCAPublishedAt] = st.nextSince.UTC().Format(time.RFC3339Nano)
	}
	if len(pl.actions) == 0 && !sameData(data, pl.data) {
		act("Secret normalized")
	}
	return pl, nil
}

// reissue says why the serving certificate must be issued again, "" when
// it need not.
func reissue(now time.Time, p policy, st bundleState) string {
	switch {
	case st.leaf == nil:
		return "none usable in the Secret"
	case st.leaf.CheckSignatureFrom(st.signer.Cert()) != nil:
		return "not signed by the signing CA"
	case !sameHosts(st.leaf, p.hosts):
		return "subject alternative names changed"
	case !now.Before(st.leaf.NotAfter):
		return "expired"
	}
	renewAt := st.leaf.NotAfter.Add(-p.certValidity / 3)
	gain := earliest(now.Add(p.certValidity), st.signer.Cert().NotAfter).Sub(st.leaf.NotAfter)
	if !now.Before(renewAt) && gain >= p.certValidity/3 {
		return "in its last third"
	}
	return ""
}

// wake is when maintain may next have something to do for a Secret (zero:
// nothing scheduled).
func wake(now time.Time, p policy, data map[string][]byte, ann map[string]string) time.Time {
	st := decode(data, ann)
	if st.signer == nil {
		return now
	}
	var at []time.Time
	at = append(at, st.signer.Cert().NotAfter)
	if st.next == nil {
		at = append(at, st.signer.Cert().NotAfter.Add(-p.caValidity/3))
	} else {
		// Past the overlap the switch waits for the ConfigMap: look again
		// shortly.
		at = append(at, latest(st.nextSince.Add(p.caOverlap), now.Add(2*time.Second)))
	}
	for _, c := range st.bundle {
		at = append(at, c.NotAfter)
	}
	if st.leaf != nil {
		at = append(at, st.leaf.NotAfter)
		if renewAt := st.leaf.NotAfter.Add(-p.certValidity / 3); renewAt.After(now) {
			at = append(at, renewAt)
		}
	}
	var first time.Time
	for _, t := range at {
		if t.After(now) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

func sameHosts(c *x509.Certificate, hosts []string) bool {
	var have []string
	have = append(have, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		have = append(have, ip.String())
	}
	var want []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			want = append(want, ip.String())
		} else {
			want = append(want, h)
		}
	}
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(slices.Compact(have), slices.Compact(want))
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
