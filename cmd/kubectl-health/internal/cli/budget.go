package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cozystack/cozy-health/pkg/drainapi"
)

func newBudgetCmd(o *options) *cobra.Command {
	d := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "The disruption budget: every node's drain verdict and what losing it next would break",
		Long: `budget prints one row per node, sorted by name: its drain verdict (for a reboot) and what
losing it next would break: the quorums (etcd, ovn-central NB/SB, a DRBD resource's replicas) that
would lose their majority and the LINSTOR resources that would lose their last up-to-date copy;
for an unknown verdict, the rules that could not decide.

It reads GET /v1/drain-budget of any aggregator replica: every replica computes every node's
verdict every 5 s (the same evaluation as the metric cozy_health_drain_verdict), so the answer
costs no evaluation. Reached like drain-check: through the Kubernetes API service proxy, or
--aggregator-url. Exit code: 0 when answered, 2 on any error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.budget(cmd.Context(), d)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&d.output, "output", "o", "", "output format: empty for text, or json")
	f.StringVar(&d.aggregatorURL, "aggregator-url", "", "the aggregator's HTTP base URL (e.g. http://127.0.0.1:8080); default: the Kubernetes API service proxy")
	f.StringVar(&d.aggregatorTok, "aggregator-token", "", "bearer token sent to --aggregator-url (for an aggregator with delegated auth)")
	f.StringVar(&d.namespace, "aggregator-namespace", "cozy-health", "namespace of the aggregator's Service")
	f.StringVar(&d.service, "aggregator-service", "cozy-health-aggregator", "name of the aggregator's Service")
	f.StringVar(&d.port, "aggregator-port", "http", "name (or number) of the Service port serving the aggregator's HTTP API")
	f.DurationVar(&d.requestTimeout, "timeout", 30*time.Second, "how long to wait for the answer")
	return cmd
}

func (o *options) budget(ctx context.Context, d *drainOptions) error {
	if d.output != "" && d.output != "json" {
		return fmt.Errorf("--output: want json or nothing, got %q", d.output)
	}
	ctx, cancel := context.WithTimeout(ctx, d.requestTimeout)
	defer cancel()
	var (
		body []byte
		code int
		err  error
		via  string
	)
	if d.aggregatorURL != "" {
		via = d.aggregatorURL
		body, code, err = getDirectPath(ctx, d, drainapi.BudgetPath, nil)
	} else {
		via = fmt.Sprintf("service %s/%s port %s through the Kubernetes API", d.namespace, d.service, d.port)
		body, code, err = o.getProxiedPath(ctx, d, drainapi.BudgetPath, nil)
	}
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("disruption budget via %s: HTTP %d: %s", via, code, errorText(body))
	}
	var b drainapi.Budget
	if err := json.Unmarshal(body, &b); err != nil {
		return fmt.Errorf("decode disruption budget: %w", err)
	}
	o.exit = ExitOK
	if d.output == "json" {
		var out bytes.Buffer
		if err := json.Indent(&out, bytes.TrimSpace(body), "", "  "); err != nil {
			return fmt.Errorf("format disruption budget: %w", err)
		}
		out.WriteByte('\n')
		_, err := o.io.Out.Write(out.Bytes())
		return err
	}
	return printBudget(o.io.Out, &b)
}

// breaks names what one blocked reason says would break: the quorum or
// the resource, not the whole message.
func breaks(r drainapi.Reason) string {
	name := ""
	if r.ResourceRef != nil {
		name = r.ResourceRef.Name
	}
	switch r.Rule {
	case "etcd-quorum":
		return "etcd quorum"
	case "ovn-central-quorum":
		return strings.TrimSpace("ovn-central " + name + " quorum")
	case "linstor-last-replica":
		return strings.TrimSpace(name + " last copy")
	case "linstor-quorum":
		return strings.TrimSpace(name + " quorum")
	}
	if name != "" {
		return r.Rule + " " + name
	}
	return r.Rule
}

// maxListed bounds the items one row names; the rest are counted.
const maxListed = 8

func list(items []string) string {
	if len(items) > maxListed {
		return strings.Join(items[:maxListed], ", ") + fmt.Sprintf(" and %d more", len(items)-maxListed)
	}
	return strings.Join(items, ", ")
}

func printBudget(w io.Writer, b *drainapi.Budget) error {
	var safe, blocked, unknown int
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVERDICT\tLOSING IT NEXT WOULD BREAK")
	for _, n := range b.Nodes {
		what := "-"
		switch n.Verdict {
		case drainapi.Safe:
			safe++
		case drainapi.Blocked:
			blocked++
			var items []string
			seen := map[string]bool{}
			for _, r := range n.Breaks {
				if s := breaks(r); !seen[s] {
					seen[s] = true
					items = append(items, s)
				}
			}
			what = list(items)
		default:
			unknown++
			var rules []string
			seen := map[string]bool{}
			for _, r := range n.Undetermined {
				if !seen[r.Rule] {
					seen[r.Rule] = true
					rules = append(rules, r.Rule)
				}
			}
			what = "not known (" + list(rules) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n.Node, n.Verdict, what)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d node(s): %d safe, %d blocked, %d unknown; evaluated at %s.\n",
		len(b.Nodes), safe, blocked, unknown, b.EvaluatedAt.UTC().Format(time.RFC3339))
	return err
}
