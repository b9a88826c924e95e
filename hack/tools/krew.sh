# krew's validate-krew-manifest (krew-index's manifest check) and kubectl-krew
# from the nested module test/krew (sigs.k8s.io/krew v0.4.3): hack/krew and
# the signing test (test/signing) validate the release's plugin manifest and
# install every platform from its archive with them.
# A manifest of hack/tooldir.sh.
key_files=(test/krew/go.mod test/krew/go.sum)
bins=(validate-krew-manifest kubectl-krew)
first_time="first time takes about a minute on 2 cores"

build() {
	cd test/krew
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/validate-krew-manifest" sigs.k8s.io/krew/cmd/validate-krew-manifest
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=v0.4.3" -o "$1/kubectl-krew" sigs.k8s.io/krew/cmd/krew
}
