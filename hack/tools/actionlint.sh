# rhysd/actionlint from the nested module test/actionlint (v1.7.12): `make
# lint` checks .github/workflows/* with it (shellcheck on run: scripts when
# shellcheck is on PATH, as actionlint itself decides).
# A manifest of hack/tooldir.sh.
key_files=(test/actionlint/go.mod test/actionlint/go.sum)
bins=(actionlint)
first_time="first time takes under a minute on 2 cores"

build() {
	cd test/actionlint
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/actionlint" \
		github.com/rhysd/actionlint/cmd/actionlint
}
