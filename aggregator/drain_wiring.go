package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/app"
	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// drainWiring builds the drain Service once, on the first hook called.
type drainWiring struct {
	ctx context.Context
	cfg config.Config
	rc  *rest.Config

	once sync.Once
	svc  *drain.Service
	auth *drain.Authorizer
	err  error
}

// drainHooks mounts the drain pre-check on the aggregator: GET
// /v1/drain-check on the --http-addr mux and DrainService on the gRPC
// server. ctx bounds its Node informer and snapshot refresher; rc nil means
// --kubeconfig / in-cluster.
func drainHooks(ctx context.Context, cfg config.Config, rc *rest.Config) app.Hooks {
	w := &drainWiring{ctx: ctx, cfg: cfg, rc: rc}
	return app.Hooks{
		HTTP: func(mux *http.ServeMux, d app.Deps) error {
			if err := w.build(d); err != nil {
				return err
			}
			drain.NewHandler(w.svc, w.auth).Mount(mux)
			return nil
		},
		GRPC: func(g *grpc.Server, d app.Deps) error {
			if err := w.build(d); err != nil {
				return err
			}
			pb.RegisterDrainServiceServer(g, drain.NewGRPCServer(w.svc, w.auth))
			return nil
		},
	}
}

func (w *drainWiring) build(d app.Deps) error {
	w.once.Do(func() { w.err = w.doBuild(d) })
	return w.err
}

func (w *drainWiring) doBuild(d app.Deps) error {
	log := d.Log.With(zap.String("component", "drain"))
	rc := w.rc
	if rc == nil {
		var err error
		if rc, err = app.RestConfig(w.cfg.Kubeconfig); err != nil {
			return err
		}
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("drain: kubernetes client: %w", err)
	}
	switch w.cfg.DrainAuth {
	case config.DrainAuthNone:
	case config.DrainAuthDelegated:
		w.auth = drain.NewAuthorizer(kube, 10*time.Second)
	default:
		// Config.Validate refuses it first; a Config built in code may not
		// have been validated.
		return fmt.Errorf("--drain-auth: want %s or %s, got %q", config.DrainAuthNone, config.DrainAuthDelegated, w.cfg.DrainAuth)
	}

	factory := informers.NewSharedInformerFactory(kube, 10*time.Minute)
	nodes := factory.Core().V1().Nodes()
	informer, lister := nodes.Informer(), nodes.Lister()
	factory.Start(w.ctx.Done())
	go func() { <-w.ctx.Done(); factory.Shutdown() }()

	grace := rollup.Config{HeartbeatGrace: w.cfg.HeartbeatGrace, DefaultInterval: w.cfg.ReportInterval}.Grace
	var synced sync.Once
	source := func(now time.Time) map[string]drain.NodeInfo {
		synced.Do(func() {
			sctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
			defer cancel()
			if !cache.WaitForCacheSync(sctx.Done(), informer.HasSynced) {
				// Every node then reads "not a Kubernetes Node": gone, so
				// quorum projections err on blocked, never on safe.
				log.Error("node informer not synced; drain checks read no Kubernetes Nodes until it is")
			}
		})
		list, err := lister.List(labels.Everything())
		if err != nil {
			log.Error("list nodes", zap.Error(err))
		}
		kn := make(map[string]drain.KubeNode, len(list))
		for _, n := range list {
			kn[n.Name] = drain.KubeNode{Cordoned: n.Spec.Unschedulable}
		}
		return d.State.DrainNodes(now, kn, grace)
	}
	svc, err := drain.NewService(drain.Config{}, source, nil, log, d.Registerer)
	if err != nil {
		return err
	}
	w.svc = svc
	go svc.Run(w.ctx)
	log.Info("drain check mounted", zap.String("path", drain.Path), zap.String("auth", w.cfg.DrainAuth))
	return nil
}
