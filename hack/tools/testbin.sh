# kube-apiserver, kubectl and etcd v1.37.2 from the nested module
# test/controlplane, for the control-plane harness (test/harness).
# A manifest of hack/tooldir.sh.
key_files=(test/controlplane/go.mod test/controlplane/go.sum test/controlplane/cmd/etcd/main.go)
bins=(kube-apiserver kubectl etcd)
first_time="first time takes ~10 min on 2 cores"

build() {
	cd test/controlplane
	CGO_ENABLED=0 go build -trimpath -ldflags "$(k8s_ldflags v1.37.2)" -o "$1/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kubectl \
		./cmd/etcd
}
