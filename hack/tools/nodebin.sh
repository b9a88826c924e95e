# kubelet, kube-controller-manager, kube-scheduler and kube-proxy v1.37.2 from
# the nested module test/nodebin (with the CRI sandbox binary pause), and
# CoreDNS from test/nodebin/coredns, for the real node
# (test/harness/realnode). test/nodebin pins the same k8s.io/kubernetes
# version and staging replaces as test/controlplane, so most packages come
# from the Go build cache the testbin build filled.
# A manifest of hack/tooldir.sh.
key_files=(test/nodebin/go.mod test/nodebin/go.sum test/nodebin/coredns/go.mod test/nodebin/coredns/go.sum test/nodebin/coredns/main.go test/nodebin/pause/main.go)
bins=(kubelet kube-controller-manager kube-scheduler kube-proxy coredns pause)
first_time="first time: ~4 min of CPU after testbin filled the Go build cache"

build() {
	cd test/nodebin
	# NODEBIN_GOFLAGS: extra go build flags (-p 1 on a busy machine).
	# shellcheck disable=SC2086
	CGO_ENABLED=0 go build ${NODEBIN_GOFLAGS:-} -trimpath -ldflags "$(k8s_ldflags v1.37.2)" -o "$1/" \
		k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kube-proxy
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/pause" ./pause
	cd coredns
	# shellcheck disable=SC2086
	CGO_ENABLED=0 go build ${NODEBIN_GOFLAGS:-} -trimpath -ldflags "-s -w" -o "$1/coredns" .
}
