// Package sources groups real-shaped stand-ins for the node-local sources the
// agent reads (the Talos machine API, Cilium's agent and cilium-health
// unix-socket APIs, kube-ovn's OVS/OVN sockets: OVSDB JSON-RPC, unixctl and
// ovn-central's raft cluster/status, kube-ovn-pinger metrics, LINSTOR's REST
// API, drbdsetup), each speaking the source's real protocol with its real
// payload shapes and a settable state, for tests, benchmarks and the local
// lab. Each package says where its shapes come from.
package sources
