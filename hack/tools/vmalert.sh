# VictoriaMetrics's vmalert and victoria-metrics (single-node) from the nested
# module test/vmalert: the alert evaluation test (test/monitoring) evaluates
# the shipped rules with them as Cozystack's VictoriaMetrics does.
# A manifest of hack/tooldir.sh.
key_files=(test/vmalert/go.mod test/vmalert/go.sum)
bins=(vmalert victoria-metrics)
first_time="first time takes a few minutes on 2 cores"

build() {
	cd test/vmalert
	local app
	for app in vmalert victoria-metrics; do
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/${app}" \
			"github.com/VictoriaMetrics/VictoriaMetrics/app/${app}"
	done
}
