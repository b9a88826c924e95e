package app

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drainserver"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
)

// newDrain builds the drain pre-check on the shared Node informer; New
// mounts it on the --http-addr mux (authorized by the returned Authorizer
// with --drain-auth=delegated, nil with none) and on the --listen gRPC
// server (always delegated: see drainserver.NewGRPCServer), Run keeps its
// snapshot warm. log is New's (the Service adds its component field).
func (a *App) newDrain(nodes coreinformers.NodeInformer, log *zap.Logger) (*drainserver.Service, *drainserver.Authorizer, error) {
	var auth *drainserver.Authorizer
	switch a.cfg.DrainAuth {
	case config.DrainAuthNone:
	case config.DrainAuthDelegated:
		auth = drainserver.NewAuthorizerFrom(a.authz)
	default:
		// Config.Validate refuses it first; a Config built in code may not
		// have been validated.
		return nil, nil, fmt.Errorf("--drain-auth: want %s or %s, got %q", config.DrainAuthNone, config.DrainAuthDelegated, a.cfg.DrainAuth)
	}
	source, nodeChanges, err := drainSource(a.state, nodes, a.rollup.Grace, log.With(zap.String("component", "drain")))
	if err != nil {
		return nil, nil, err
	}
	// A check answers from a snapshot holding every report the state had
	// accepted, and every cordon and role change the informer had
	// delivered, when it arrived.
	st := a.state
	dcfg := drainserver.Config{Auditor: a.claims, Generation: func() uint64 { return st.Generation() + nodeChanges.Load() }}
	if a.linstor != nil {
		dcfg.Linstor = func() (linstorapi.Placement, string) { return a.linstor.Placement(a.clock.Now()) }
	}
	svc, err := drainserver.NewService(dcfg, source, a.clock, log, a.reg)
	if err != nil {
		return nil, nil, err
	}
	return svc, auth, nil
}

// drainSource reads the state and the Kubernetes Nodes' cordons and roles
// from the Node informer's cache. The first read waits (up to 10 s) for the cache
// to fill; a cache that never fills reads every node as "not a Kubernetes
// Node": gone, so quorum projections err on blocked, never on safe. The
// counter counts the changes of what it reads from the cache (a Node added
// or deleted, cordoned or uncordoned, its role changed), each counted once
// the cache holds it: with the state's generation, drainserver.Config.Generation.
func drainSource(st *state.State, nodes coreinformers.NodeInformer, grace func(time.Duration) time.Duration, log *zap.Logger) (drainserver.Source, *atomic.Uint64, error) {
	informer, lister := nodes.Informer(), nodes.Lister()
	changes := new(atomic.Uint64)
	bump := func(any) { changes.Add(1) }
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    bump,
		DeleteFunc: bump,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if !ok1 || !ok2 || o.Spec.Unschedulable != n.Spec.Unschedulable || state.RoleOf(o.Labels) != state.RoleOf(n.Labels) {
				changes.Add(1)
			}
		},
	}); err != nil {
		return nil, nil, fmt.Errorf("drain: node informer handler: %w", err)
	}
	var synced sync.Once
	return func(now time.Time) map[string]drain.NodeInfo {
		synced.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
				log.Error("node informer not synced; drain checks read no Kubernetes Nodes until it is")
			}
		})
		list, err := lister.List(labels.Everything())
		if err != nil {
			log.Error("list nodes", zap.Error(err))
		}
		kn := make(map[string]drain.KubeNode, len(list))
		for _, n := range list {
			kn[n.Name] = drain.KubeNode{Cordoned: n.Spec.Unschedulable, Role: state.RoleOf(n.Labels)}
		}
		return drain.StateNodes(st, now, kn, grace)
	}, changes, nil
}
