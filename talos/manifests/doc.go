// Package manifests holds the Talos machine-config patches an operator
// applies before installing the chart: Talos API access with the read-only
// os:reader role for the agent's namespace (talos-api-access-patch.yaml) and etcd's
// plain-HTTP metrics listener on the loopback (etcd-metrics-patch.yaml). Its test
// checks them against Talos' own role list and against what the chart
// renders (the talos.dev ServiceAccount, the agent's etcd metrics URL).
package manifests
