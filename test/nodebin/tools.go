//go:build tools

// Package nodebin pins the real Kubernetes node binaries that the test harness
// runs for a real node: kubelet, kube-controller-manager, kube-scheduler and
// kube-proxy, built from the Go module proxy at the same k8s.io/kubernetes
// version and staging replaces as test/controlplane, so the two builds share
// the Go build cache. It is a module of its own so that changing it never
// invalidates the control-plane binaries' cache key.
package nodebin

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
