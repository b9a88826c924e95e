package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/config"
)

// TestNodeAddresses: the addresses an agent may connect from are its
// Node's InternalIPs (not its ExternalIPs or host name) and the addresses
// in the configured annotations (kube-ovn's ovn0 address, dual-stack comma
// lists); a Node not in the cache has none (not checked).
func TestNodeAddresses(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, idx.Add(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{
			"ovn.kubernetes.io/ip_address": "100.64.0.3,fd00:100:64::3", "network.cilium.io/ipv4-cilium-host": "10.244.1.1", "other": "1.2.3.4",
		}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "192.168.1.11"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.11"},
			{Type: corev1.NodeHostName, Address: "node-1"},
		}},
	}))
	get := nodeAddresses(corelisters.NewNodeLister(idx), config.DefaultAgentPeerAnnotations)
	assert.Equal(t, []string{"192.168.1.11", "100.64.0.3", "fd00:100:64::3", "10.244.1.1"}, get("node-1"))
	assert.Empty(t, get("node-2"))
}
