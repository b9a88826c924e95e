package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/cozystack/cozy-health/cmd/kubectl-health/internal/view"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
)

func renderTree(w io.Writer, items []healthv1alpha1.Health, now time.Time) error {
	return view.Tree(w, items, now)
}

func newNodesCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "One line per node: its worst state and every component's state on it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			items, err := o.list(cmd.Context())
			if err != nil {
				return err
			}
			return view.Nodes(o.io.Out, items, o.now())
		},
	}
}

func newNodeCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "node NAME",
		Short: "One node across components, with the conditions pinned to it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			items, err := o.list(cmd.Context())
			if err != nil {
				return err
			}
			found, err := view.Node(o.io.Out, args[0], items, o.now())
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("%w: %s", errNodeNotFound, args[0])
			}
			return nil
		},
	}
}

// watchTree prints the tree, then again whenever it changes: on every
// Health event and when an object goes stale with time (checked each
// second). Output is printed only when it differs from the last print.
func (o *options) watchTree(ctx context.Context) error {
	cs, err := o.healthClient()
	if err != nil {
		return err
	}
	ns, _, err := o.scope()
	if err != nil {
		return err
	}
	l, err := cs.HealthV1alpha1().Healths(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list Health objects: %w", err)
	}
	objs := map[string]healthv1alpha1.Health{}
	for _, h := range l.Items {
		objs[h.Namespace+"/"+h.Name] = h
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, l.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return cs.HealthV1alpha1().Healths(ns).Watch(ctx, opts)
		},
	})
	if err != nil {
		return fmt.Errorf("watch Health objects: %w", err)
	}
	defer rw.Stop()
	var last string
	print := func() error {
		items := make([]healthv1alpha1.Health, 0, len(objs))
		for _, h := range objs {
			items = append(items, h)
		}
		var b bytes.Buffer
		if err := view.Tree(&b, items, o.now()); err != nil {
			return err
		}
		if b.String() == last {
			return nil
		}
		last = b.String()
		_, err := fmt.Fprintf(o.io.Out, "--- %s\n%s", o.now().UTC().Format(time.RFC3339), last)
		return err
	}
	if err := print(); err != nil {
		return err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return nil
			}
			h, isHealth := ev.Object.(*healthv1alpha1.Health)
			if !isHealth {
				if ev.Type == watch.Error {
					return fmt.Errorf("watch Health objects: %v", ev.Object)
				}
				continue
			}
			switch ev.Type {
			case watch.Deleted:
				delete(objs, h.Namespace+"/"+h.Name)
			case watch.Added, watch.Modified:
				objs[h.Namespace+"/"+h.Name] = *h
			}
		}
		if err := print(); err != nil {
			return err
		}
	}
}
