// Package monitoring checks what cozy-health ships for the cluster's
// monitoring stack (deploy/charts/cozy-health/files): the alert rules
// (promtool check rules and promtool test rules, built from the Go module
// proxy by hack/promtool.sh), the Grafana dashboard (every panel query
// parses as PromQL and as MetricsQL), and that every series and label the
// rules and the dashboard read exists in a real scrape of the lab's
// aggregators and agents.
package monitoring
