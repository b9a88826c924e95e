// Package cli is the `kubectl health` plugin: its commands, flags and exit
// codes. Run is the whole program; main only exits with its code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/version"
)

// Exit codes.
const (
	// ExitOK: success; for drain-check, the node is safe to drain.
	ExitOK = 0
	// ExitBlocked: drain-check found a certain blocker.
	ExitBlocked = 1
	// ExitUnknown: drain-check could not decide, or any error.
	ExitUnknown = 2
)

// IO is where the plugin reads the clock and writes.
type IO struct {
	Out, Err io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// options are the flags shared by every command.
type options struct {
	io            IO
	kube          *genericclioptions.ConfigFlags
	allNamespaces bool
	watch         bool
	// exit is the code Run returns when the command itself succeeded.
	exit int
}

func (o *options) now() time.Time {
	if o.io.Now != nil {
		return o.io.Now()
	}
	return time.Now()
}

// Run runs the plugin with args (without the program name) and returns its
// exit code.
func Run(ctx context.Context, args []string, streams IO) int {
	o := &options{io: streams, kube: genericclioptions.NewConfigFlags(true)}
	root := newRoot(o)
	root.SetArgs(args)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(streams.Err, "error:", err)
		return ExitUnknown
	}
	return o.exit
}

// Root is the plugin's command tree with its flags bound, to be read, not
// run: the flags reference (docs/reference/flags.md) is generated from it.
func Root() *cobra.Command {
	return newRoot(&options{io: IO{Out: io.Discard, Err: io.Discard}, kube: genericclioptions.NewConfigFlags(true)})
}

func newRoot(o *options) *cobra.Command {
	root := &cobra.Command{
		Use: "kubectl-health",
		// Shown in usage as the way it is invoked: kubectl health ...
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl health"},
		Short:       "Show cozy-health's Health objects and answer the node-drain pre-check",
		Long: `kubectl health shows every Health object as a tree, problems first: namespace > component >
the nodes and conditions that are not healthy. An object past its status.freshUntil is shown as
Unknown (stale), whatever it last said: stale data is never green.

Commands:
  kubectl health                  every Health object (-n NS to restrict, -A all namespaces, -w to watch)
  kubectl health nodes            one line per node across components
  kubectl health node NAME        one node across components, with its conditions
  kubectl health drain-check NODE can NODE be drained now? exit 0 safe, 1 blocked, 2 unknown or error
                                  (--wait: ask again until safe or --timeout; --intent decommission)
  kubectl health budget           every node's drain verdict and what losing it next would break`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.watch {
				return o.watchTree(cmd.Context())
			}
			items, err := o.list(cmd.Context())
			if err != nil {
				return err
			}
			return renderTree(o.io.Out, items, o.now())
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	o.kube.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Health objects of every namespace (the default when -n is not given)")
	root.Flags().BoolVarP(&o.watch, "watch", "w", false, "keep watching and print the tree again whenever it changes")
	root.AddCommand(newNodesCmd(o), newNodeCmd(o), newDrainCheckCmd(o), newBudgetCmd(o))
	return root
}

func (o *options) restConfig() (*rest.Config, error) {
	cfg, err := o.kube.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	return cfg, nil
}

func (o *options) healthClient() (versioned.Interface, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create health client: %w", err)
	}
	return cs, nil
}

func (o *options) kubeClient() (kubernetes.Interface, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create kubernetes client: %w", err)
	}
	return cs, nil
}

// scope is the namespace to list: the -n namespace, or every namespace
// ("") unless -n is given. A user who may not list cluster-wide falls back
// to the kubeconfig context's namespace (see list).
func (o *options) scope() (ns string, explicit bool, err error) {
	ns, explicit, err = o.kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", false, fmt.Errorf("read namespace from kubeconfig: %w", err)
	}
	if o.allNamespaces || !explicit {
		return "", false, nil
	}
	return ns, true, nil
}

// list returns the Health objects in scope.
func (o *options) list(ctx context.Context) ([]healthv1alpha1.Health, error) {
	cs, err := o.healthClient()
	if err != nil {
		return nil, err
	}
	ns, explicit, err := o.scope()
	if err != nil {
		return nil, err
	}
	l, err := cs.HealthV1alpha1().Healths(ns).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) && ns == "" && !o.allNamespaces && !explicit {
		// Tenants may read only their own namespace: use the context's.
		ctxNS, _, nsErr := o.kube.ToRawKubeConfigLoader().Namespace()
		if nsErr == nil && ctxNS != "" {
			fmt.Fprintf(o.io.Err, "cannot list Health objects in every namespace; showing namespace %s\n", ctxNS)
			l, err = cs.HealthV1alpha1().Healths(ctxNS).List(ctx, metav1.ListOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list Health objects: %w", err)
	}
	return l.Items, nil
}

var errNodeNotFound = errors.New("node not found")
