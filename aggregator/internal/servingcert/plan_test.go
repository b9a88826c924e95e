package servingcert

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

var testPolicy = policy{
	hosts:        []string{"cozy-health-aggregator", "cozy-health-aggregator.cozy-health.svc", "127.0.0.1"},
	caValidity:   300 * time.Hour,
	certValidity: 30 * time.Hour,
	caOverlap:    10 * time.Hour,
}

func never([]byte) bool  { return false }
func always([]byte) bool { return true }

// secret is the data and annotations of the Secret as a test evolves it.
type secret struct {
	data map[string][]byte
	ann  map[string]string
}

func (s *secret) step(t *testing.T, now time.Time, published func([]byte) bool) []string {
	t.Helper()
	pl, err := maintain(now, testPolicy, s.data, s.ann, published)
	require.NoError(t, err)
	s.data, s.ann = pl.data, pl.annotations
	// Applied twice at the same instant it must settle: nothing to do.
	again, err := maintain(now, testPolicy, s.data, s.ann, published)
	require.NoError(t, err)
	require.Empty(t, again.actions, "a plan applied is stable at the same instant")
	return pl.actions
}

func (s *secret) state(t *testing.T) bundleState {
	t.Helper()
	st := decode(s.data, s.ann)
	require.NotNil(t, st.signer)
	require.NotNil(t, st.leaf)
	return st
}

func TestInitialSecret(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	data, err := initial(now, testPolicy)
	require.NoError(t, err)
	s := secret{data: data}
	st := s.state(t)
	require.Len(t, st.bundle, 1)
	assert.Nil(t, st.next)
	require.NoError(t, st.leaf.CheckSignatureFrom(st.signer.Cert()))
	assert.ElementsMatch(t, []string{"cozy-health-aggregator", "cozy-health-aggregator.cozy-health.svc"}, st.leaf.DNSNames)
	require.Len(t, st.leaf.IPAddresses, 1)
	assert.Equal(t, "127.0.0.1", st.leaf.IPAddresses[0].String())
	assert.Equal(t, now.Add(30*time.Hour), st.leaf.NotAfter)
	assert.Equal(t, now.Add(300*time.Hour), st.signer.Cert().NotAfter)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, st.leaf.ExtKeyUsage)
	assert.Empty(t, s.step(t, now.Add(time.Hour), never))
	assert.Equal(t, now.Add(20*time.Hour), wake(now, testPolicy, s.data, s.ann), "the next thing to do is the serving renewal")
}

func TestServingRenewedInItsLastThird(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	data, err := initial(now, testPolicy)
	require.NoError(t, err)
	s := secret{data: data}
	first := s.state(t).leaf
	assert.Empty(t, s.step(t, now.Add(19*time.Hour), never))
	acts := s.step(t, now.Add(20*time.Hour), never)
	require.Len(t, acts, 1)
	assert.Contains(t, acts[0], "serving certificate issued (in its last third)")
	st := s.state(t)
	assert.NotEqual(t, first.SerialNumber, st.leaf.SerialNumber)
	assert.Equal(t, now.Add(50*time.Hour), st.leaf.NotAfter)
	assert.Len(t, st.bundle, 1, "the CA is untouched")
}

func TestCARotatesWithOverlap(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	data, err := initial(t0, testPolicy)
	require.NoError(t, err)
	s := secret{data: data}
	ca1 := s.state(t).signer.Cert()

	// Into the CA's last third (200 h): a next CA is published beside it;
	// the serving certificate is renewed as usual, still by CA 1.
	at := t0.Add(200*time.Hour + time.Minute)
	acts := s.step(t, at, always)
	assert.Contains(t, acts[0], "next CA")
	st := s.state(t)
	require.NotNil(t, st.next)
	require.Len(t, st.bundle, 2)
	assert.True(t, st.signer.Cert().Equal(ca1))
	assert.Equal(t, at, st.nextSince)
	require.NoError(t, st.leaf.CheckSignatureFrom(ca1))
	ca2 := st.next.Cert()
	assert.Equal(t, at.Add(10*time.Hour), wake(at, testPolicy, s.data, s.ann), "the switch is the next thing")

	// Before the overlap has run, or while the ConfigMap does not carry
	// both CAs yet, CA 1 keeps signing.
	assert.Empty(t, s.step(t, at.Add(9*time.Hour), always))
	assert.Empty(t, s.step(t, at.Add(11*time.Hour), never))
	assert.Equal(t, at.Add(11*time.Hour+2*time.Second), wake(at.Add(11*time.Hour), testPolicy, s.data, s.ann), "a pending switch is looked at again shortly")

	// Overlap done and published: CA 2 signs; the serving certificate
	// follows; CA 1 stays trusted until it expires.
	acts = s.step(t, at.Add(11*time.Hour), always)
	assert.Contains(t, acts[0], "switched to CA")
	st = s.state(t)
	assert.Nil(t, st.next)
	assert.True(t, st.signer.Cert().Equal(ca2))
	require.NoError(t, st.leaf.CheckSignatureFrom(ca2))
	require.Len(t, st.bundle, 2)
	assert.NotContains(t, s.ann, AnnotationNextCAPublishedAt)
	assert.NotContains(t, s.data, KeyNextCAKey)

	// CA 1 expires: it leaves the bundle.
	acts = s.step(t, t0.Add(300*time.Hour), never)
	assert.Contains(t, acts, `expired CA "`+ca1.Subject.CommonName+`" left the bundle`)
	st = s.state(t)
	require.Len(t, st.bundle, 1)
	assert.True(t, st.bundle[0].Equal(ca2))
}

// A serving certificate capped by its CA's expiry is not reissued over and
// over while the next CA waits for its overlap.
func TestCappedServingWaitsForTheSwitch(t *testing.T) {
	p := testPolicy
	p.caOverlap = 99 * time.Hour // the switch is held back; CA 1 has 100 h left at rotation
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	data, err := initial(t0, p)
	require.NoError(t, err)
	issued := 0
	for h := 0; h <= 299; h++ {
		pl, err := maintain(t0.Add(time.Duration(h)*time.Hour), p, data, nil, never)
		require.NoError(t, err)
		if pl.servingIssued {
			issued++
		}
		data = pl.data
	}
	// Renewals every 20 h while uncapped, then one capped certificate
	// that lives until CA 1 expires.
	t.Logf("%d serving certificates issued in 300 h", issued)
	assert.LessOrEqual(t, issued, 16)
	st := decode(data, nil)
	assert.Equal(t, t0.Add(300*time.Hour), st.leaf.NotAfter)
}

// TestCANameConstraints: the CA the aggregator mints can vouch only for
// the serving names; a certificate it signs for anything else does not
// verify, and a CA of an older release (no constraints) is replaced with
// the usual overlap.
func TestCANameConstraints(t *testing.T) {
	now := time.Now()
	data, err := initial(now, testPolicy)
	require.NoError(t, err)
	st := decode(data, nil)
	ca := st.signer.Cert()
	assert.True(t, ca.PermittedDNSDomainsCritical)
	assert.ElementsMatch(t, []string{"cozy-health-aggregator", "cozy-health-aggregator.cozy-health.svc"}, ca.PermittedDNSDomains)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	verify := func(host string) error {
		pemCert, _, err := st.signer.Issue(pkix.Name{CommonName: host}, []string{host}, x509.ExtKeyUsageServerAuth, time.Hour)
		require.NoError(t, err)
		c, err := tlsutil.ParseCertificates(pemCert)
		require.NoError(t, err)
		_, err = c[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: host})
		return err
	}
	require.NoError(t, verify("cozy-health-aggregator.cozy-health.svc"))
	require.NoError(t, verify("127.0.0.1"))
	var cie x509.CertificateInvalidError
	require.ErrorAs(t, verify("kubernetes.default.svc"), &cie)
	assert.Equal(t, x509.CANotAuthorizedForThisName, cie.Reason)
	require.Error(t, verify("10.0.0.1"))

	// An unconstrained CA (an older release's): a constrained next CA is
	// published beside it, and signs after the overlap.
	old, err := tlsutil.NewCAValid("old", now.Add(-time.Hour), now.Add(testPolicy.caValidity))
	require.NoError(t, err)
	oldKey, err := old.KeyPEM()
	require.NoError(t, err)
	cert, key, err := old.IssueValid(pkix.Name{CommonName: testPolicy.hosts[0]}, testPolicy.hosts, x509.ExtKeyUsageServerAuth, now.Add(-time.Hour), now.Add(testPolicy.certValidity))
	require.NoError(t, err)
	s := &secret{data: map[string][]byte{KeyCert: cert, KeyKey: key, KeyCA: old.CertPEM, KeyCAKey: oldKey}}
	acts := s.step(t, now, never)
	require.Len(t, acts, 1)
	assert.Contains(t, acts[0], "next CA")
	acts = s.step(t, now.Add(testPolicy.caOverlap), always)
	assert.Contains(t, acts[0], "switched to CA")
	assert.True(t, tlsutil.Constrained(s.state(t).signer.Cert()))
}

func TestSANChangeAndDamageReissue(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	data, err := initial(now, testPolicy)
	require.NoError(t, err)
	// Names within the CA's constraints (one dropped, one under a
	// permitted name): the same CA signs again.
	p := testPolicy
	p.hosts = []string{"cozy-health-aggregator", "x.cozy-health-aggregator.cozy-health.svc"}
	pl, err := maintain(now, p, data, nil, never)
	require.NoError(t, err)
	assert.Equal(t, []string{"serving certificate issued (subject alternative names changed), valid until 2026-12-02T06:00:00Z"}, pl.actions)
	// A name outside them: a new CA, constrained to the new names, at once.
	p.hosts = append(append([]string{}, testPolicy.hosts...), "cozy-health-aggregator-headless.cozy-health.svc")
	pl, err = maintain(now, p, data, nil, never)
	require.NoError(t, err)
	require.Len(t, pl.actions, 2)
	assert.Contains(t, pl.actions[0], "outside the signing CA's name constraints")
	st0 := decode(pl.data, pl.annotations)
	assert.True(t, tlsutil.Permits(st0.signer.Cert(), p.hosts))

	// A ca.key that no longer parses: a new CA signs; the old CA stays in
	// the bundle (agents trust it) until it expires.
	damaged := map[string][]byte{}
	for k, v := range data {
		damaged[k] = v
	}
	damaged[KeyCAKey] = []byte("garbage")
	pl, err = maintain(now, testPolicy, damaged, nil, never)
	require.NoError(t, err)
	assert.Contains(t, pl.actions[0], "no usable signing CA")
	st := decode(pl.data, pl.annotations)
	assert.Len(t, st.bundle, 2)
	require.NoError(t, st.leaf.CheckSignatureFrom(st.signer.Cert()))
	old, err := tlsutil.ParseCertificates(data[KeyCA])
	require.NoError(t, err)
	assert.False(t, st.signer.Cert().Equal(old[0]))
}
