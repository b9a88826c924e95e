//go:build tools

// Package controlplane pins the real Kubernetes control-plane binaries that the
// test harness runs: kube-apiserver, kubectl and etcd, built from the Go module
// proxy at the versions in this module's go.mod.
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
