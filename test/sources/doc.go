// Package sources groups real-shaped stand-ins for the node-local sources the
// agent reads (the Talos machine API, Cilium's unix-socket API,
// kube-ovn-pinger metrics, LINSTOR's REST API, drbdsetup), each speaking the
// source's real protocol with its real payload shapes and a settable state,
// for tests, benchmarks and the local lab.
package sources
