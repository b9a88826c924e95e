package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/guard"
	"github.com/cozystack/cozy-health/aggregator/internal/servingcert"
	"github.com/cozystack/cozy-health/pkg/logging"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// guardServer is the drain guard (--guard-addr): the validating webhook on
// pods/eviction over TLS with the serving certificate, and the loop that
// keeps the webhook configuration's caBundle equal to the published CA.
type guardServer struct {
	srv  *http.Server
	lis  net.Listener
	sync func(ctx context.Context)
}

// budgetPeriod is how often every node's drain verdict is computed for
// cozy_health_drain_verdict (a snapshot is shared with the checks).
const budgetPeriod = 5 * time.Second

// caSyncPeriod is how often a replica compares the webhook
// configuration's caBundle with the published CA bundle.
const caSyncPeriod = 30 * time.Second

// newGuard builds the guard when --guard-addr is set; nil otherwise. It
// opens its listener last, so a failure leaves nothing open.
func (a *App) newGuard(rc *rest.Config, nodes coreinformers.NodeInformer) (*guardServer, error) {
	if a.cfg.GuardAddr == "" {
		return nil, nil
	}
	log := logging.Component(a.base, "guard")
	// Evictions come in bursts (a drain evicts every pod at once and
	// retries each every 5 s): their pod reads have a client and a rate
	// limiter of their own.
	pods, err := kubernetes.NewForConfig(ownClient(rc, 50, 100, "guard"))
	if err != nil {
		return nil, fmt.Errorf("guard client: %w", err)
	}
	svc := a.drain
	g, err := guard.New(guard.Config{ExemptNamespaces: a.cfg.GuardExemptNamespaces, UnknownFor: a.cfg.GuardUnknownFor},
		func(node string, intent drain.Intent) (drain.Result, error) {
			return svc.CheckIntent(node, "guard", intent)
		},
		a.clock, log, a.reg)
	if err != nil {
		return nil, err
	}
	if err := g.TrackCordons(nodes.Informer()); err != nil {
		return nil, err
	}
	lister := nodes.Lister()
	lookup := func(ctx context.Context, ns, name string) (*corev1.Pod, *corev1.Node, error) {
		pod, err := pods.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
		}
		if pod.Spec.NodeName == "" {
			return pod, nil, nil
		}
		node, err := lister.Get(pod.Spec.NodeName)
		if apierrors.IsNotFound(err) {
			return pod, nil, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("get node %s: %w", pod.Spec.NodeName, err)
		}
		return pod, node, nil
	}
	mux := http.NewServeMux()
	guard.NewHandler(g, lookup, func() bool { return a.ready.Load() && a.nodesSynced() }).Mount(mux)
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if a.certs != nil {
		tc.GetCertificate = tlsutil.RefuseExpired(a.certs.GetCertificate, time.Now)
	} else if tc, err = tlsutil.ServerConfig(a.cfg.TLSCert, a.cfg.TLSKey); err != nil {
		return nil, fmt.Errorf("--guard-addr: %w", err)
	}
	gs := &guardServer{srv: newHTTPServer(mux, a.cfg.HTTPLimits, log)}
	if a.cfg.GuardWebhook != "" && a.certs != nil {
		gs.sync = func(ctx context.Context) {
			syncCABundle(ctx, a.kube, a.cfg.TLSNamespace, a.cfg.TLSCAConfigMap, a.cfg.GuardWebhook, log)
		}
	}
	lis, err := net.Listen("tcp", a.cfg.GuardAddr)
	if err != nil {
		return nil, fmt.Errorf("listen --guard-addr %s: %w", a.cfg.GuardAddr, err)
	}
	gs.lis = tls.NewListener(lis, tc)
	return gs, nil
}

// GuardAddr is the bound drain guard address (--guard-addr); empty without
// a guard.
func (a *App) GuardAddr() string {
	if a.guard == nil {
		return ""
	}
	return a.guard.lis.Addr().String()
}

// run serves until ctx ends, then shuts the server down.
func (gs *guardServer) run(ctx context.Context) error {
	if gs.sync != nil {
		go func() {
			t := time.NewTicker(caSyncPeriod)
			defer t.Stop()
			for {
				gs.sync(ctx)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gs.srv.Shutdown(sctx)
	}()
	return serveHTTP(gs.srv, gs.lis)
}

// syncCABundle sets every webhook's caBundle in the named
// ValidatingWebhookConfiguration to the CA bundle published in the
// ConfigMap (servingcert.KeyCA), when they differ. A configuration or
// ConfigMap that does not exist yet is waited for (the next period).
func syncCABundle(ctx context.Context, kube kubernetes.Interface, ns, configMap, name string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, configMap, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			log.Warn("read the CA bundle for the guard's webhook", zap.Error(err))
		}
		return
	}
	bundle := []byte(cm.Data[servingcert.KeyCA])
	if len(bundle) == 0 {
		return
	}
	vwcs := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	vwc, err := vwcs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			log.Warn("read the guard's webhook configuration", zap.String("name", name), zap.Error(err))
		}
		return
	}
	changed := false
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, bundle) {
			vwc.Webhooks[i].ClientConfig.CABundle = bundle
			changed = true
		}
	}
	if !changed {
		return
	}
	if _, err := vwcs.Update(ctx, vwc, metav1.UpdateOptions{FieldManager: servingcert.FieldManager}); err != nil {
		if !apierrors.IsConflict(err) {
			log.Warn("update the guard's webhook caBundle", zap.String("name", name), zap.Error(err))
		}
		return
	}
	log.Info("set the guard's webhook caBundle to the published CA", zap.String("name", name))
}
