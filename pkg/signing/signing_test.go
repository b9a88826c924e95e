package signing

import (
	"crypto/ed25519"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

func TestKeyIDIsHexOfSHA256Prefix(t *testing.T) {
	// SHA-256 of 32 zero bytes is 66687aadf862bd776c8fc18b8e9f8e20...
	assert.Equal(t, "66687aadf862bd77", KeyID(make(ed25519.PublicKey, 32)))
	s, err := Generate()
	require.NoError(t, err)
	assert.Len(t, s.KeyID(), KeyIDLen)
	assert.Equal(t, KeyID(s.PublicKey()), s.KeyID())
}

func TestSignReportVerifiesOverExactBytes(t *testing.T) {
	s, err := Generate()
	require.NoError(t, err)
	r := &report.NodeReport{NodeName: "cp1", AgentInstanceID: "i", Sequence: 3, SentAt: time.Unix(1700000000, 0), Interval: 5 * time.Second,
		Observations: []report.Observation{{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: report.StatusHealthy}}}
	sr, err := s.SignReport(r)
	require.NoError(t, err)
	assert.Equal(t, s.KeyID(), sr.GetKeyId())
	require.NoError(t, Verify(s.PublicKey(), sr.GetPayload(), sr.GetSignature()))

	var p pb.NodeReport
	require.NoError(t, proto.Unmarshal(sr.GetPayload(), &p))
	got, err := wire.ReportFromProto(&p)
	require.NoError(t, err)
	assert.Equal(t, "cp1", got.NodeName)
	assert.Equal(t, uint64(3), got.Sequence)

	for i := range sr.GetPayload() {
		tampered := append([]byte(nil), sr.GetPayload()...)
		tampered[i] ^= 0x01
		require.ErrorIs(t, Verify(s.PublicKey(), tampered, sr.GetSignature()), ErrBadSignature, "byte %d", i)
	}
	other, err := Generate()
	require.NoError(t, err)
	assert.ErrorIs(t, Verify(other.PublicKey(), sr.GetPayload(), sr.GetSignature()), ErrBadSignature)
	assert.ErrorIs(t, Verify(s.PublicKey(), sr.GetPayload(), nil), ErrMissingSignature)
	assert.ErrorIs(t, Verify(s.PublicKey(), sr.GetPayload(), sr.GetSignature()[:63]), ErrBadSignature)
	assert.ErrorIs(t, Verify(s.PublicKey()[:31], sr.GetPayload(), sr.GetSignature()), ErrBadPublicKey)
}

func TestDevKeyFiles(t *testing.T) {
	dir := t.TempDir()
	privPath, err := WriteDevKeyPair(dir, "cp1")
	require.NoError(t, err)
	_, err = WriteDevKeyPair(dir, "cp2")
	require.NoError(t, err)
	s, err := LoadKeyFile(privPath)
	require.NoError(t, err)
	keys, err := LoadDevKeysDir(dir)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	dk, ok := keys[s.KeyID()]
	require.True(t, ok)
	assert.Equal(t, "cp1", dk.Node)
	assert.Equal(t, s.PublicKey(), dk.PublicKey)

	_, err = WriteDevKeyPair(dir, "../escape")
	assert.Error(t, err)
	_, err = LoadKeyFile(filepath.Join(dir, "cp1.pub"))
	assert.ErrorContains(t, err, "no PEM PRIVATE KEY")
	_, err = LoadKeyFile(filepath.Join(dir, "missing.key"))
	assert.Error(t, err)
}
