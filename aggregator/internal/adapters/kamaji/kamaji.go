// Package kamaji judges Kamaji tenant control planes
// (kamaji.clastix.io/v1alpha1 TenantControlPlane), the DataStore each one
// uses and, where Cozystack runs that datastore as an etcd-operator
// EtcdCluster (etcd.aenix.io/v1alpha1) in a namespace, that etcd's own
// health. Facts land in the control-plane object of the TCP's scope.
//
// Per TenantControlPlane, each condition pinned to the object it is about:
//
//   - ControlPlane (the TCP): status.kubernetesResources.version.status —
//     Ready and Sleeping are Healthy, NotReady is Down, WriteLimited is
//     Degraded, Provisioning, Upgrading, Migrating and
//     CertificateAuthorityRotating are Unknown (no verdict while Kamaji
//     moves it), no status is Unknown;
//   - Deployment (the TCP): the control plane Deployment's readyReplicas
//     against its replicas: none ready Down, some Degraded, all Healthy;
//     a deployment status without a name (Kamaji has not reconciled the
//     Deployment yet: the Go struct marshals it empty) is Unknown NoStatus;
//   - DataStore (the DataStore named by status.storage.dataStoreName, else
//     spec.dataStore): missing Down (DataStoreMissing); otherwise judged
//     from status.ready, which upstream sets from its
//     kamaji.clastix.io/DataStoreValidation condition: the configuration
//     is valid (certificates available or correctly referenced), not that
//     the datastore is reachable. ready true Healthy (DataStoreReady),
//     false Degraded (DataStoreNotReady, with the validation message), and
//     absent Unknown (FieldAbsent): Kamaji before 26.3.2-edge (v1.0.0)
//     has no such field and the apiserver prunes it. The message names the
//     driver and endpoints. Whether the datastore serves is read from the
//     control plane itself (its ControlPlane and Deployment conditions:
//     Kamaji reports NotReady and WriteLimited there);
//   - DataStoreEtcd (the EtcdCluster serving an etcd DataStore, found from
//     the namespace of its endpoints' service names): Ready=True Healthy,
//     Ready=False Degraded (its reason: StatefulSetNotReady,
//     WaitingForFirstQuorum), Error=True Down (Splitbrain).
package kamaji

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Sources.
var (
	TenantControlPlanes = adapterkit.Source{
		GVR:  schema.GroupVersionResource{Group: "kamaji.clastix.io", Version: "v1alpha1", Resource: "tenantcontrolplanes"},
		Kind: "TenantControlPlane", Project: projectTCP,
	}
	DataStores = adapterkit.Source{
		GVR:  schema.GroupVersionResource{Group: "kamaji.clastix.io", Version: "v1alpha1", Resource: "datastores"},
		Kind: "DataStore", Project: projectDataStore,
	}
	EtcdClusters = adapterkit.Source{
		GVR:  schema.GroupVersionResource{Group: "etcd.aenix.io", Version: "v1alpha1", Resource: "etcdclusters"},
		Kind: "EtcdCluster", Optional: true, Project: projectEtcd,
	}
)

// Condition types and reasons.
const (
	TypeControlPlane  = "ControlPlane"
	TypeDeployment    = "Deployment"
	TypeDataStore     = "DataStore"
	TypeDataStoreEtcd = "DataStoreEtcd"

	ReasonNoStatus          = "NoStatus"
	ReasonReplicasReady     = "ReplicasReady"
	ReasonReplicasNotReady  = "ReplicasNotReady"
	ReasonNoReplicasReady   = "NoReplicasReady"
	ReasonDataStoreReady    = "DataStoreReady"
	ReasonDataStoreNotReady = "DataStoreNotReady"
	ReasonDataStoreMissing  = "DataStoreMissing"
	ReasonNoDataStore       = "NoDataStore"
	ReasonFieldAbsent       = "FieldAbsent"
)

// Adapter is the Kamaji adapter.
type Adapter struct{}

var _ adapterkit.Adapter = Adapter{}

// New returns the adapter.
func New() Adapter { return Adapter{} }

// Name implements adapterkit.Adapter.
func (Adapter) Name() string { return "kamaji" }

// Component implements adapterkit.Adapter.
func (Adapter) Component() string { return adapterkit.ComponentControlPlane }

// Sources implements adapterkit.Adapter.
func (Adapter) Sources() []adapterkit.Source {
	return []adapterkit.Source{TenantControlPlanes, DataStores, EtcdClusters}
}

type tcp struct {
	version, versionStatus, endpoint string
	dataStore, driver                string
	hasDeployment                    bool
	replicas, ready                  int64
}

type dataStore struct {
	driver    string
	endpoints []string
	// ready is status.ready; readySet says whether the field is there at
	// all (Kamaji v1.0.0's CRD has no such field).
	ready, readySet bool
	message         string
}

type etcd struct {
	ready, errCond *adapterkit.Cond
}

func projectTCP(u *unstructured.Unstructured) any {
	t := &tcp{
		version:       adapterkit.String(u, "status", "kubernetesResources", "version", "version"),
		versionStatus: adapterkit.String(u, "status", "kubernetesResources", "version", "status"),
		endpoint:      adapterkit.String(u, "status", "controlPlaneEndpoint"),
		dataStore:     adapterkit.String(u, "status", "storage", "dataStoreName"),
		driver:        adapterkit.String(u, "status", "storage", "driver"),
	}
	if t.dataStore == "" {
		t.dataStore = adapterkit.String(u, "spec", "dataStore")
	}
	// Kamaji's status struct always marshals deployment (a non-pointer
	// field): before Kamaji has reconciled the Deployment its name,
	// namespace and selector are empty and it has no replicas. Only a
	// name says Kamaji has reported one (internal/resources
	// k8s_deployment_resource.go sets Name with the replica counts).
	if adapterkit.String(u, "status", "kubernetesResources", "deployment", "name") != "" {
		t.hasDeployment = true
		t.replicas = adapterkit.Int(u, "status", "kubernetesResources", "deployment", "replicas")
		t.ready = adapterkit.Int(u, "status", "kubernetesResources", "deployment", "readyReplicas")
	}
	return t
}

func projectDataStore(u *unstructured.Unstructured) any {
	d := &dataStore{driver: adapterkit.String(u, "spec", "driver")}
	d.endpoints, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "endpoints")
	d.ready, d.readySet = adapterkit.Bool(u, "status", "ready")
	for _, c := range adapterkit.Conditions(u) {
		if c.Status == "False" && c.Message != "" {
			d.message = c.Message
		}
	}
	return d
}

func projectEtcd(u *unstructured.Unstructured) any {
	conds := adapterkit.Conditions(u)
	e := &etcd{ready: adapterkit.Find(conds, "Ready")}
	if c := adapterkit.Find(conds, "Error"); c != nil && c.Status == "True" {
		e.errCond = c
	}
	return e
}

// Judge implements adapterkit.Adapter.
func (Adapter) Judge(in *adapterkit.Input) []adapterkit.Finding {
	var out []adapterkit.Finding
	// Control planes sharing a DataStore share its conditions.
	seen := map[string]bool{}
	for _, o := range in.List(TenantControlPlanes.GVR) {
		t, ok := o.Data.(*tcp)
		if !ok {
			continue
		}
		scope, _ := in.Scope(o.Namespace)
		add := func(c status.Condition) {
			if c.Type == TypeDataStore || c.Type == TypeDataStoreEtcd {
				k := scope + "\x00" + c.Type + "\x00" + c.ResourceKey()
				if seen[k] {
					return
				}
				seen[k] = true
			}
			c.Message = status.Truncate(c.Message)
			out = append(out, adapterkit.Finding{Namespace: scope, Component: adapterkit.ComponentControlPlane, Condition: c})
		}
		ref := adapterkit.Ref(TenantControlPlanes, o.Namespace, o.Name)
		add(controlPlane(t, ref))
		if t.versionStatus != "Sleeping" {
			add(deployment(t, ref))
		}
		for _, c := range storage(in, t) {
			add(c)
		}
	}
	return out
}

func controlPlane(t *tcp, ref *report.ResourceRef) status.Condition {
	c := status.Condition{Type: TypeControlPlane, Resource: ref, Reason: t.versionStatus}
	switch t.versionStatus {
	case "Ready", "Sleeping":
		c.Severity = report.StatusHealthy
	case "NotReady":
		c.Severity = report.StatusDown
	case "WriteLimited":
		c.Severity = report.StatusDegraded
	case "":
		c.Severity, c.Reason = report.StatusUnknown, ReasonNoStatus
		c.Message = "Kamaji has not reported the control plane's version status"
		return c
	default: // Provisioning, Upgrading, Migrating, CertificateAuthorityRotating, Unknown
		c.Severity = report.StatusUnknown
	}
	c.Message = fmt.Sprintf("Kubernetes %s %s", orDash(t.version), t.versionStatus)
	if t.endpoint != "" {
		c.Message += ", endpoint " + t.endpoint
	}
	return c
}

func deployment(t *tcp, ref *report.ResourceRef) status.Condition {
	c := status.Condition{Type: TypeDeployment, Resource: ref}
	switch {
	case !t.hasDeployment:
		c.Severity, c.Reason, c.Message = report.StatusUnknown, ReasonNoStatus, "Kamaji has not reported the control plane Deployment"
	case t.replicas > 0 && t.ready == 0:
		c.Severity, c.Reason = report.StatusDown, ReasonNoReplicasReady
	case t.ready < t.replicas:
		c.Severity, c.Reason = report.StatusDegraded, ReasonReplicasNotReady
	default:
		c.Severity, c.Reason = report.StatusHealthy, ReasonReplicasReady
	}
	if t.hasDeployment {
		c.Message = fmt.Sprintf("%d of %d control plane replicas ready", t.ready, t.replicas)
	}
	return c
}

func storage(in *adapterkit.Input, t *tcp) []status.Condition {
	if t.dataStore == "" {
		return []status.Condition{{Type: TypeDataStore, Severity: report.StatusUnknown, Reason: ReasonNoDataStore,
			Message: "the control plane names no DataStore yet (status.storage.dataStoreName)"}}
	}
	ref := adapterkit.Ref(DataStores, "", t.dataStore)
	o := in.Get(DataStores.GVR, "", t.dataStore)
	if o == nil {
		return []status.Condition{{Type: TypeDataStore, Resource: ref, Severity: report.StatusDown, Reason: ReasonDataStoreMissing,
			Message: fmt.Sprintf("DataStore %s does not exist", t.dataStore)}}
	}
	d, _ := o.Data.(*dataStore)
	desc := fmt.Sprintf("driver %s, endpoints %s", orDash(d.driver), orDash(strings.Join(d.endpoints, ",")))
	c := status.Condition{Type: TypeDataStore, Resource: ref}
	switch {
	case !d.readySet:
		c.Severity, c.Reason = report.StatusUnknown, ReasonFieldAbsent
		c.Message = "no status.ready (Kamaji before 26.3.2-edge has no such field): configuration validity unknown; " + desc
	case d.ready:
		c.Severity, c.Reason = report.StatusHealthy, ReasonDataStoreReady
		c.Message = "configuration valid (status.ready; not a reachability check: see the ControlPlane condition); " + desc
	default:
		c.Severity, c.Reason = report.StatusDegraded, ReasonDataStoreNotReady
		c.Message = "configuration not valid (status.ready false: certificates missing or wrongly referenced)"
		if d.message != "" {
			c.Message += ": " + d.message
		}
		c.Message += "; " + desc
	}
	out := []status.Condition{c}
	if d.driver == "etcd" && in.Has(EtcdClusters.GVR) {
		if ec, ok := etcdOf(in, d); ok {
			out = append(out, ec)
		}
	}
	return out
}

// etcdOf finds the EtcdCluster behind an etcd DataStore: the namespace is
// the label before "svc" in its endpoints' host names
// (etcd.tenant-foo.svc:2379, etcd-0.etcd-headless.tenant-foo.svc...), the
// cluster the one there whose name prefixes the host.
func etcdOf(in *adapterkit.Input, d *dataStore) (status.Condition, bool) {
	for _, ep := range d.endpoints {
		host := ep
		if i := strings.LastIndexByte(host, ':'); i > 0 {
			host = host[:i]
		}
		labels := strings.Split(host, ".")
		ns := ""
		for i := 1; i < len(labels); i++ {
			if labels[i] == "svc" {
				ns = labels[i-1]
				break
			}
		}
		if ns == "" {
			continue
		}
		for _, o := range in.List(EtcdClusters.GVR) {
			if o.Namespace != ns || !strings.HasPrefix(labels[0], o.Name) {
				continue
			}
			e, _ := o.Data.(*etcd)
			c := status.Condition{Type: TypeDataStoreEtcd, Resource: adapterkit.Ref(EtcdClusters, o.Namespace, o.Name)}
			switch {
			case e.errCond != nil:
				c.Severity, c.Reason, c.Message = report.StatusDown, e.errCond.Reason, e.errCond.Message
			case e.ready == nil:
				c.Severity, c.Reason, c.Message = report.StatusUnknown, ReasonNoStatus, "etcd-operator has not reported the cluster's readiness"
			case e.ready.Status == "True":
				c.Severity, c.Reason, c.Message = report.StatusHealthy, e.ready.Reason, e.ready.Message
			default:
				c.Severity, c.Reason, c.Message = report.StatusDegraded, e.ready.Reason, e.ready.Message
			}
			return c, true
		}
	}
	return status.Condition{}, false
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
