// Package monitoring checks what cozy-health ships for the cluster's
// monitoring stack (deploy/charts/cozy-health/files): the alert rules
// (promtool check rules and promtool test rules, built from the Go module
// proxy by `make promtool`), the Grafana dashboard (every panel query
// parses as PromQL and as MetricsQL), that every series and label the
// rules and the dashboard read exists in a real scrape of the lab's
// aggregators and agents, and that the rules the chart renders fire and
// resolve on the real evaluators (Debian's prometheus and
// prometheus-alertmanager; vmalert and victoria-metrics single, built by
// `make vmalert`) for every fault of the lab's fault matrix, with the
// time from fault to firing and from repair to resolved measured. The
// fault matrix is one table (faultmatrix_test.go) both lab tests read; the
// rules file is the one source of the alert names, and the tables of
// docs/reference/alerts.md, the runbook's sections and the promtool unit tests are compared
// with these two as sets (TestAlertTables).
package monitoring
