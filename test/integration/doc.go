// Package integration tests the Health API on a real kube-apiserver + etcd
// from test/harness: CRD validation, the status subresource with server-side
// apply, printer columns through kubectl, and tenant RBAC.
package integration
