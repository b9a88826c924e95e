package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cozystack/cozy-health/pkg/drainapi"
)

// drainOptions are drain-check's flags.
type drainOptions struct {
	output         string
	aggregatorURL  string
	aggregatorTok  string
	namespace      string
	service        string
	port           string
	requestTimeout time.Duration
}

func newDrainCheckCmd(o *options) *cobra.Command {
	d := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain-check NODE",
		Short: "Can NODE be drained now? Exit 0 safe, 1 blocked, 2 unknown or error",
		Long: `drain-check asks the cozy-health aggregator whether NODE can be drained now and prints the
verdict with every reason. Exit code: 0 safe, 1 blocked, 2 unknown or any error.

By default the request goes through the Kubernetes API service proxy with your kubeconfig
(GET /api/v1/namespaces/NS/services/SVC:PORT/proxy/v1/drain-check?node=NODE), which needs
"get" on services/proxy for that Service. --aggregator-url talks to the aggregator directly.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.drainCheck(cmd.Context(), d, args[0])
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

func (o *options) drainCheck(ctx context.Context, d *drainOptions, node string) error {
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
		body, code, err = getDirect(ctx, d, node)
	} else {
		via = fmt.Sprintf("service %s/%s port %s through the Kubernetes API", d.namespace, d.service, d.port)
		body, code, err = o.getProxied(ctx, d, node)
	}
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		hint := ""
		if code == http.StatusUnauthorized && d.aggregatorURL == "" {
			hint = " (the aggregator authenticates drain checks itself, and the service proxy does not pass your token: use --aggregator-url with --aggregator-token)"
		}
		return fmt.Errorf("drain check of %s via %s: HTTP %d: %s%s", node, via, code, errorText(body), hint)
	}
	var res drainapi.Result
	if err := json.Unmarshal(body, &res); err != nil {
		return fmt.Errorf("decode drain check answer: %w", err)
	}
	switch res.Verdict {
	case drainapi.Safe:
		o.exit = ExitOK
	case drainapi.Blocked:
		o.exit = ExitBlocked
	case drainapi.Unknown:
		o.exit = ExitUnknown
	default:
		return fmt.Errorf("drain check answer has verdict %q, want safe, blocked or unknown", res.Verdict)
	}
	if d.output == "json" {
		var out bytes.Buffer
		if err := json.Indent(&out, bytes.TrimSpace(body), "", "  "); err != nil {
			return fmt.Errorf("format drain check answer: %w", err)
		}
		out.WriteByte('\n')
		_, err := o.io.Out.Write(out.Bytes())
		return err
	}
	return printDrain(o.io.Out, &res)
}

// getDirect asks the aggregator at --aggregator-url.
func getDirect(ctx context.Context, d *drainOptions, node string) ([]byte, int, error) {
	u, err := url.Parse(d.aggregatorURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, 0, fmt.Errorf("--aggregator-url: want http(s)://host[:port], got %q", d.aggregatorURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + drainapi.Path
	u.RawQuery = url.Values{"node": {node}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("build drain check request: %w", err)
	}
	if d.aggregatorTok != "" {
		req.Header.Set("Authorization", "Bearer "+d.aggregatorTok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("ask aggregator: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("read drain check answer: %w", err)
	}
	return body, resp.StatusCode, nil
}

// getProxied asks the aggregator through the Kubernetes API service proxy.
func (o *options) getProxied(ctx context.Context, d *drainOptions, node string) ([]byte, int, error) {
	cs, err := o.kubeClient()
	if err != nil {
		return nil, 0, err
	}
	var code int
	body, err := cs.CoreV1().RESTClient().Get().
		Namespace(d.namespace).Resource("services").Name(net.JoinHostPort(d.service, d.port)).
		SubResource("proxy").Suffix("v1", "drain-check").Param("node", node).
		Do(ctx).StatusCode(&code).Raw()
	if err != nil && code == 0 {
		return nil, 0, fmt.Errorf("ask aggregator through the Kubernetes API: %w", err)
	}
	return body, code, nil
}

// errorText is the "error" of an aggregator error body, else the body.
func errorText(body []byte) string {
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"` // a Kubernetes Status
	}
	if json.Unmarshal(body, &e) == nil {
		if e.Error != "" {
			return e.Error
		}
		if e.Message != "" {
			return e.Message
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}

func printDrain(w io.Writer, r *drainapi.Result) error {
	fmt.Fprintf(w, "Node %s: %s\n", r.Node, strings.ToUpper(string(r.Verdict)))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERDICT\tRULE\tREASON")
	for _, rs := range r.Reasons {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", rs.Verdict, rs.Rule, rs.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "Evaluated at %s from the aggregator's state of %s.\n", r.EvaluatedAt.UTC().Format(time.RFC3339), r.SnapshotAt.UTC().Format(time.RFC3339))
	return err
}
