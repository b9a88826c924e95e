package adapters

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/test/harness"
)

// TestRBACRules: the chart's file is what RBACRules generates (make
// generate), and it grants get, list and watch on every source of every
// adapter of All, so an adapter's RBAC is never written by hand.
func TestRBACRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(harness.RepoRoot(), RBACFile))
	require.NoError(t, err)
	assert.Equal(t, RBACRules(), string(b), "run make generate")

	var rules []rbacv1.PolicyRule
	require.NoError(t, yaml.UnmarshalStrict(b, &rules))
	granted := map[[2]string]bool{}
	for _, r := range rules {
		assert.Equal(t, []string{"get", "list", "watch"}, r.Verbs)
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				granted[[2]string{g, res}] = true
			}
		}
	}
	for _, a := range All() {
		for _, s := range a.Sources() {
			assert.True(t, granted[[2]string{s.GVR.Group, s.GVR.Resource}], "%s: %s", a.Name(), s.GVR)
		}
	}
}
