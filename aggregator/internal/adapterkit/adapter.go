// Package adapterkit is what every cluster adapter is built from and run
// by. The adapters themselves are small packages (listed in one table,
// aggregator/internal/adapters) that judge facts living in the
// Kubernetes API — Flux HelmReleases, CNPG / Cozystack / velero backups,
// Kamaji tenant control planes, Cozystack WorkloadMonitors — and turn them
// into conditions of Health objects in the namespace each fact belongs to.
//
// An Adapter only names the resources it reads (Sources) and judges a
// snapshot of them (Judge, a pure function of the objects and the time).
// The Manager owns everything around it, as the agent's runner does for
// checks:
//
//   - Every replica watches with informers (dynamic, on the objects' own
//     group/version), keeping only what Judge reads (Source.Project) so a
//     watched object costs a few hundred bytes; the leader's writer writes.
//   - An adapter whose required APIs are not served is not applicable: it
//     publishes nothing. The Manager watches CustomResourceDefinitions, so an
//     API installed after the start is picked up at once and a removed one
//     stops its informers (the adapter's objects are then withdrawn).
//   - An informer that has not synced within SyncTimeout makes its adapter's
//     component Unknown (condition Source, reason SourceNotSynced) in the
//     platform namespace and in every scope it published before — never
//     Healthy, never silently absent.
//   - Judge runs under its own deadline with panic recovery; a Judge that
//     fails is Unknown for its adapter only (reason JudgeFailed).
//   - Scopes: a Cozystack tenant namespace (tenant-*, carrying Cozystack's
//     tenant.cozystack.io/<tenant> labels) is its own scope; every other
//     namespace, and cluster-scoped objects, belong to the platform
//     namespace (cozy-system).
//   - Health objects are written for every (scope, component) with at least
//     one condition and withdrawn (deleted by the leader) when their last
//     fact goes away.
package adapterkit

import (
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Components the adapters write.
const (
	// ComponentPlatform holds the platform's releases and workloads, in the
	// platform namespace.
	ComponentPlatform = "platform"
	// ComponentApps holds a tenant's releases and workloads, in its
	// namespace.
	ComponentApps = "apps"
	// ComponentBackups holds the backups of a scope.
	ComponentBackups = "backups"
	// ComponentControlPlane holds a tenant's Kamaji control planes.
	ComponentControlPlane = "control-plane"
)

// Condition type and reasons the Manager itself writes.
const (
	TypeSource             = "Source"
	ReasonSourceNotSynced  = "SourceNotSynced"
	ReasonJudgeFailed      = "JudgeFailed"
	ReasonWatchFailing     = "WatchFailing"
	tenantLabelPrefix      = "tenant.cozystack.io/"
	tenantNamespacePrefix  = "tenant-"
	crdKind                = "CustomResourceDefinition"
	maxConditionsPerObject = 1000
)

// Adapter judges one cluster source. Implementations are small, pure and
// listed in aggregator/internal/adapters.
type Adapter interface {
	// Name is the adapter's name in logs and metrics (helmrelease, cnpg...).
	Name() string
	// Component is the component its facts land in within the platform
	// namespace (where SourceNotSynced and JudgeFailed are reported).
	Component() string
	// Sources are the resources it reads. The adapter is applicable when
	// every source that is not Optional is served.
	Sources() []Source
	// Judge turns the current objects into findings. It must not keep in
	// or modify the objects.
	Judge(in *Input) []Finding
}

// Source is one watched resource.
type Source struct {
	GVR schema.GroupVersionResource
	// Kind is the resource's kind (for messages and resourceRefs).
	Kind string
	// Optional sources refine the judgement when served (the barman-cloud
	// ObjectStore for CNPG); the adapter runs without them.
	Optional bool
	// Project keeps what Judge reads of an object (its Data); the rest of
	// the object is dropped before it is cached.
	Project func(u *unstructured.Unstructured) any
}

// CRDName is the name of the CustomResourceDefinition serving s.
func (s Source) CRDName() string { return s.GVR.Resource + "." + s.GVR.Group }

// QualifiedKind is Kind.group, as kubectl names a resource type
// unambiguously (Cluster.postgresql.cnpg.io); resourceRefs carry it.
func (s Source) QualifiedKind() string { return s.Kind + "." + s.GVR.Group }

// Object is a watched object as cached: its identity and the adapter's
// projection of it. Data is never modified once cached.
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Data any
}

// DeepCopyObject is a shallow copy: Data is immutable.
func (o *Object) DeepCopyObject() runtime.Object {
	c := *o
	return &c
}

var _ runtime.Object = (*Object)(nil)

// CachedObject builds the cached form of u: name, namespace, generation,
// creation time, and project(u). (rollup.Compact is another thing: it
// shapes a status for writing.)
func CachedObject(u *unstructured.Unstructured, project func(u *unstructured.Unstructured) any) *Object {
	o := &Object{}
	o.Name = u.GetName()
	o.Namespace = u.GetNamespace()
	o.Generation = u.GetGeneration()
	o.CreationTimestamp = u.GetCreationTimestamp()
	o.ResourceVersion = u.GetResourceVersion()
	if project != nil {
		o.Data = project(u)
	}
	return o
}

// Finding is one condition of one Health object.
type Finding struct {
	// Namespace is the scope (Input.Scope of the fact's namespace).
	Namespace string
	Component string
	Condition status.Condition
}

// Input is what Judge reads: the cached objects, the time and the scopes.
type Input struct {
	Now      time.Time
	platform string
	stores   map[schema.GroupVersionResource]cache.Store
	tenants  func(namespace string) bool
	maxAge   func(scope string) time.Duration
}

// NewInput builds an Input (tests build one from literal objects with
// StoreOf).
func NewInput(now time.Time, platform string, stores map[schema.GroupVersionResource]cache.Store, tenants func(string) bool, maxAge func(string) time.Duration) *Input {
	if tenants == nil {
		tenants = func(ns string) bool { return strings.HasPrefix(ns, tenantNamespacePrefix) }
	}
	if maxAge == nil {
		maxAge = func(string) time.Duration { return 0 }
	}
	return &Input{Now: now, platform: platform, stores: stores, tenants: tenants, maxAge: maxAge}
}

// StoreOf is a store holding objs (for tests and benchmarks).
func StoreOf(objs ...*Object) cache.Store {
	s := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, o := range objs {
		_ = s.Add(o)
	}
	return s
}

// Has says whether gvr is served and watched.
func (in *Input) Has(gvr schema.GroupVersionResource) bool { return in.stores[gvr] != nil }

// List is every cached object of gvr, sorted by namespace and name.
func (in *Input) List(gvr schema.GroupVersionResource) []*Object {
	s := in.stores[gvr]
	if s == nil {
		return nil
	}
	items := s.List()
	out := make([]*Object, 0, len(items))
	for _, it := range items {
		if o, ok := it.(*Object); ok {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Get is one cached object, or nil.
func (in *Input) Get(gvr schema.GroupVersionResource, namespace, name string) *Object {
	s := in.stores[gvr]
	if s == nil {
		return nil
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	it, ok, _ := s.GetByKey(key)
	if !ok {
		return nil
	}
	o, _ := it.(*Object)
	return o
}

// Scope is the namespace a fact about an object in namespace belongs to:
// the tenant namespace itself, else the platform namespace.
func (in *Input) Scope(namespace string) (scope string, tenant bool) {
	if namespace != "" && in.tenants(namespace) {
		return namespace, true
	}
	return in.platform, false
}

// AppsScope is where a release or workload in namespace lands: a tenant's
// apps object in its own namespace, else the platform object in the
// platform namespace (platform keeps meaning Cozystack itself).
func (in *Input) AppsScope(namespace string) (scope, component string) {
	scope, tenant := in.Scope(namespace)
	if tenant {
		return scope, ComponentApps
	}
	return scope, ComponentPlatform
}

// MaxAge is the backup SLA configured for scope (0: none, derive it from
// the schedule).
func (in *Input) MaxAge(scope string) time.Duration { return in.maxAge(scope) }

// IsTenantNamespace says whether a namespace is a Cozystack tenant's: named
// tenant-<path> and labelled by the tenant chart with the
// tenant.cozystack.io/<ancestor> labels (every tenant namespace carries
// tenant.cozystack.io/tenant-root and its own name).
func IsTenantNamespace(name string, labels map[string]string) bool {
	if !strings.HasPrefix(name, tenantNamespacePrefix) {
		return false
	}
	for k := range labels {
		if strings.HasPrefix(k, tenantLabelPrefix) {
			return true
		}
	}
	return false
}

// Ref pins a condition to an object of a source.
func Ref(s Source, namespace, name string) *report.ResourceRef {
	return &report.ResourceRef{Kind: s.QualifiedKind(), Namespace: namespace, Name: name}
}

// Key names an object as namespace/name (name alone when cluster-scoped).
func Key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Plural is "n thing" or "n things".
func Plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
