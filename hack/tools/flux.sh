# Flux's source-controller and helm-controller from the nested modules
# test/flux/{sourcecontroller,helmcontroller} (one each: their replace
# directives differ), and under crds/ the CRDs they serve, from the same
# module versions. The Flux test (test/flux) runs them against the harness
# apiserver.
# A manifest of hack/tooldir.sh.
key_files=(test/flux/sourcecontroller/go.mod test/flux/sourcecontroller/go.sum test/flux/helmcontroller/go.mod test/flux/helmcontroller/go.sum)
bins=(source-controller helm-controller)
first_time="first time takes several minutes on 2 cores"

build() {
	local c src
	mkdir -p "$1/crds"
	for c in source helm; do
		(cd "test/flux/${c}controller" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/${c}-controller" "github.com/fluxcd/${c}-controller")
		src="$(cd "test/flux/${c}controller" && go list -m -f '{{.Dir}}' "github.com/fluxcd/${c}-controller")"
		cp "${src}"/config/crd/bases/*.yaml "$1/crds/"
	done
	chmod -R u+w "$1"
}
