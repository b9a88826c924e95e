package harness

import "testing"

// SkipShort skips t under `go test -short` (`make test-unit`, the inner
// loop without an apiserver): t needs real processes — the test control
// plane, an etcd cluster, a kubelet node or the built binaries. `make test`
// runs without -short, so nothing is skipped there.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the test control plane or the built binaries; make test runs it")
	}
}
