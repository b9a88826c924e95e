package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	// timeoutSet: --timeout was given (else --wait waits defaultWaitTimeout).
	timeoutSet bool
	wait       bool
	interval   time.Duration
	// intent is --intent, parsed (drainapi.IntentReboot by default).
	intentFlag string
	intent     drainapi.Intent
}

const (
	// defaultWaitTimeout bounds --wait without --timeout.
	defaultWaitTimeout = 10 * time.Minute
	// perRequestTimeout bounds one question of --wait.
	perRequestTimeout = 30 * time.Second
)

func newDrainCheckCmd(o *options) *cobra.Command {
	d := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain-check NODE [--intent reboot|decommission] [--wait [--timeout 10m]]",
		Short: "Can NODE be drained now? Exit 0 safe, 1 blocked, 2 unknown or error; --wait blocks until safe",
		Long: `drain-check asks the cozy-health aggregator whether NODE can be drained now and prints the
verdict with every reason. Exit code: 0 safe, 1 blocked, 2 unknown or any error.

--intent says why NODE is drained (default reboot): a reboot returns the node (its replicas resync,
its etcd and OVN members return); a decommission does not, so it also needs the node's etcd and
ovn-central members already removed and every LINSTOR resource it holds re-placeable on other
satellites.

By default the request goes through the Kubernetes API service proxy with your kubeconfig
(GET /api/v1/namespaces/NS/services/SVC:PORT/proxy/v1/drain-check?node=NODE), which needs
"get" on services/proxy for that Service. --aggregator-url talks to the aggregator directly.

--wait asks again every --interval until NODE is safe (exit 0) or --timeout (default 10m with
--wait) passes, then exits with the last answer's code: 1 blocked, 2 unknown, or 2 when no answer
came (the aggregator or the API unreachable the whole time). A rolling reboot gates each node on it:

  kubectl health drain-check --wait CP1 && talosctl -n CP1 reboot --drain`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d.timeoutSet = cmd.Flags().Changed("timeout")
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
	f.DurationVar(&d.requestTimeout, "timeout", 30*time.Second, "how long to wait for the answer; with --wait, for a safe answer (default 10m then)")
	f.BoolVar(&d.wait, "wait", false, "ask again until NODE is safe (exit 0) or --timeout passes (exit 1 blocked, 2 unknown)")
	f.DurationVar(&d.interval, "interval", 5*time.Second, "with --wait, time between questions")
	f.StringVar(&d.intentFlag, "intent", string(drainapi.IntentReboot), "why NODE is drained: reboot (it comes back) or decommission (it does not)")
	return cmd
}

func (o *options) drainCheck(ctx context.Context, d *drainOptions, node string) error {
	if d.output != "" && d.output != "json" {
		return fmt.Errorf("--output: want json or nothing, got %q", d.output)
	}
	intent, err := drainapi.ParseIntent(d.intentFlag)
	if err != nil {
		return fmt.Errorf("--intent: %w", err)
	}
	d.intent = intent
	if d.wait {
		return o.drainWait(ctx, d, node)
	}
	res, body, err := o.askDrain(ctx, d, node, d.requestTimeout)
	if err != nil {
		return err
	}
	return o.printVerdict(d, res, body)
}

// drainWait asks again every --interval until NODE is safe (exit 0) or
// --timeout passes: then the last answer's code (1 blocked, 2 unknown), or
// 2 with the last error when no answer came. An answer that cannot change
// by waiting (bad flags, no such node, no permission) ends the wait at once.
func (o *options) drainWait(ctx context.Context, d *drainOptions, node string) error {
	if d.interval <= 0 {
		return fmt.Errorf("--interval: want a positive duration, got %s", d.interval)
	}
	timeout := d.requestTimeout
	if !d.timeoutSet {
		timeout = defaultWaitTimeout
	}
	start := time.Now()
	deadline := start.Add(timeout)
	var (
		last     *drainapi.Result
		lastBody []byte
		lastErr  error
		said     string
	)
	for {
		per := min(time.Until(deadline), perRequestTimeout)
		res, body, err := o.askDrain(ctx, d, node, max(per, time.Second))
		switch {
		case err == nil && res.Verdict == drainapi.Safe:
			fmt.Fprintf(o.io.Err, "drain-check %s: safe after %s\n", node, time.Since(start).Round(time.Second))
			return o.printVerdict(d, res, body)
		case err == nil:
			last, lastBody, lastErr = res, body, nil
		case errors.As(err, new(permanentError)) || ctx.Err() != nil:
			return err
		default:
			lastErr = err
		}
		now := fmt.Sprintf("drain-check %s: %s", node, waitSummary(res, err))
		if now != said {
			fmt.Fprintf(o.io.Err, "%s; waiting up to %s more\n", now, time.Until(deadline).Round(time.Second))
			said = now
		}
		if time.Until(deadline) <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain check of %s: %w", node, ctx.Err())
		case <-time.After(min(d.interval, time.Until(deadline))):
		}
	}
	if lastErr != nil || last == nil {
		return fmt.Errorf("drain check of %s: not safe within %s, and the last attempt failed: %w", node, timeout, lastErr)
	}
	fmt.Fprintf(o.io.Err, "drain-check %s: not safe within %s\n", node, timeout)
	return o.printVerdict(d, last, lastBody)
}

// waitSummary is one line for the progress of --wait.
func waitSummary(res *drainapi.Result, err error) string {
	if err != nil {
		return "no answer (" + err.Error() + ")"
	}
	var rs []string
	for _, r := range res.Reasons {
		if r.Verdict != drainapi.Safe {
			rs = append(rs, r.Rule+": "+r.Message)
		}
	}
	return string(res.Verdict) + " (" + strings.Join(rs, "; ") + ")"
}

// permanentError is an answer waiting cannot change (a 4xx: no such
// node, no permission).
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// askDrain asks the aggregator once, within timeout.
func (o *options) askDrain(ctx context.Context, d *drainOptions, node string, timeout time.Duration) (*drainapi.Result, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
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
		return nil, nil, err
	}
	if code != http.StatusOK {
		hint := ""
		if code == http.StatusUnauthorized && d.aggregatorURL == "" {
			hint = " (the aggregator authenticates drain checks itself, and the service proxy does not pass your token: use --aggregator-url with --aggregator-token)"
		}
		err := fmt.Errorf("drain check of %s via %s: HTTP %d: %s%s", node, via, code, errorText(body), hint)
		if code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests {
			err = permanentError{err}
		}
		return nil, nil, err
	}
	var res drainapi.Result
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, nil, fmt.Errorf("decode drain check answer: %w", err)
	}
	if d.intent != drainapi.IntentReboot && res.Intent != d.intent {
		// An aggregator that predates intents ignores the parameter and
		// judges a reboot: never pass that off as the answer asked for.
		return nil, nil, permanentError{fmt.Errorf("drain check of %s via %s: asked for intent %s, answered for %q: the aggregator does not judge intents (upgrade it)", node, via, d.intent, res.Intent)}
	}
	switch res.Verdict {
	case drainapi.Safe, drainapi.Blocked, drainapi.Unknown:
	default:
		return nil, nil, fmt.Errorf("drain check answer has verdict %q, want safe, blocked or unknown", res.Verdict)
	}
	return &res, body, nil
}

// printVerdict prints an answer and sets the exit code from its verdict.
func (o *options) printVerdict(d *drainOptions, res *drainapi.Result, body []byte) error {
	switch res.Verdict {
	case drainapi.Safe:
		o.exit = ExitOK
	case drainapi.Blocked:
		o.exit = ExitBlocked
	default:
		o.exit = ExitUnknown
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
	return printDrain(o.io.Out, res)
}

// drainQuery is the drain check's query for node.
func drainQuery(d *drainOptions, node string) url.Values {
	q := url.Values{"node": {node}}
	if d.intent != "" && d.intent != drainapi.IntentReboot {
		q.Set("intent", string(d.intent))
	}
	return q
}

// getDirect asks the aggregator at --aggregator-url.
func getDirect(ctx context.Context, d *drainOptions, node string) ([]byte, int, error) {
	return getDirectPath(ctx, d, drainapi.Path, drainQuery(d, node))
}

// getDirectPath GETs path?q of the aggregator at --aggregator-url.
func getDirectPath(ctx context.Context, d *drainOptions, path string, q url.Values) ([]byte, int, error) {
	u, err := url.Parse(d.aggregatorURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, 0, fmt.Errorf("--aggregator-url: want http(s)://host[:port], got %q", d.aggregatorURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("build request: %w", err)
	}
	if d.aggregatorTok != "" {
		req.Header.Set("Authorization", "Bearer "+d.aggregatorTok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("ask aggregator: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("read aggregator answer: %w", err)
	}
	return body, resp.StatusCode, nil
}

// getProxied asks the aggregator through the Kubernetes API service proxy.
func (o *options) getProxied(ctx context.Context, d *drainOptions, node string) ([]byte, int, error) {
	return o.getProxiedPath(ctx, d, drainapi.Path, drainQuery(d, node))
}

// getProxiedPath GETs path?q of the aggregator through the Kubernetes API
// service proxy.
func (o *options) getProxiedPath(ctx context.Context, d *drainOptions, path string, q url.Values) ([]byte, int, error) {
	cs, err := o.kubeClient()
	if err != nil {
		return nil, 0, err
	}
	var code int
	req := cs.CoreV1().RESTClient().Get().
		Namespace(d.namespace).Resource("services").Name(net.JoinHostPort(d.service, d.port)).
		SubResource("proxy").Suffix(strings.Split(strings.TrimPrefix(path, "/"), "/")...)
	for k, vs := range q {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	body, err := req.Do(ctx).StatusCode(&code).Raw()
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
	head := fmt.Sprintf("Node %s: %s", r.Node, strings.ToUpper(string(r.Verdict)))
	if r.Intent != "" && r.Intent != drainapi.IntentReboot {
		head += " (" + string(r.Intent) + ")"
	}
	fmt.Fprintln(w, head)
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
