// Package manifests holds the Talos machine-config patch and the Talos
// ServiceAccount manifest that give the agent read-only (os:reader) access
// to the Talos API; its test checks the roles against Talos' own role list.
package manifests
