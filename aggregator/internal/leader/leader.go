// Package leader decides, with a coordination.k8s.io Lease and client-go's
// leaderelection, which aggregator replica writes Health objects. Every
// replica campaigns for as long as it runs; a replica that loses the Lease
// (its apiserver unreachable past the renew deadline) stops writing and
// campaigns again.
package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Config names the Lease and tunes the election.
type Config struct {
	Namespace, Name, Identity                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Callbacks are called as leadership comes and goes. OnStartedLeading runs
// in its own goroutine; its ctx is cancelled when leadership ends.
type Callbacks struct {
	OnStartedLeading func(ctx context.Context)
	OnStoppedLeading func()
	OnNewLeader      func(identity string)
}

// Run campaigns until ctx is cancelled. On cancel, a held Lease is released
// so another replica takes over within its retry period instead of waiting
// for the lease to expire.
func Run(ctx context.Context, cfg Config, client kubernetes.Interface, cb Callbacks, log *zap.Logger) error {
	if cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return errors.New("leader election: namespace, name and identity are required")
	}
	log = log.With(zap.String("component", "leader"), zap.String("identity", cfg.Identity))
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metaOf(cfg),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	lec := leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("started leading")
				if cb.OnStartedLeading != nil {
					cb.OnStartedLeading(ctx)
				}
			},
			OnStoppedLeading: func() {
				log.Info("stopped leading")
				if cb.OnStoppedLeading != nil {
					cb.OnStoppedLeading()
				}
			},
			OnNewLeader: func(id string) {
				log.Info("leader observed", zap.String("leader", id))
				if cb.OnNewLeader != nil {
					cb.OnNewLeader(id)
				}
			},
		},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(lec)
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx)
	}
	return nil
}
