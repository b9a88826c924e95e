# Prometheus's promtool from the nested module test/promtool, for the alert
# rules' unit tests (test/monitoring). The service-discovery plugins are left
# out (build tag remove_all_sd): the rule tests need none, and without them
# the build pulls in no cloud SDKs.
# A manifest of hack/tooldir.sh.
key_files=(test/promtool/go.mod test/promtool/go.sum)
bins=(promtool)
first_time="first time takes a few minutes on 2 cores"

build() {
	cd test/promtool
	CGO_ENABLED=0 go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$1/promtool" \
		github.com/prometheus/prometheus/cmd/promtool
}
