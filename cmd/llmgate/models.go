package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/config"
	"llmgate/internal/dialect"
	"llmgate/internal/preset"
	"llmgate/internal/provider"
	"llmgate/internal/router"
	"llmgate/internal/server"
)

type modelsFlags struct {
	gatewayFlags
	apiKey  string
	config  string
	probe   bool
	format  formatFlag
	timeout time.Duration
}

func newModelsCmd() *cobra.Command {
	var f modelsFlags
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List models with their deployments and health (from a running gateway or a config file)",
		Long: `List every public model with its deployments: backend, upstream model, weight,
priority, and health.

Against a running gateway (--url, else $LLMGATE_URL, else ` + defaultGatewayURL + `) it reads
GET /v1/models?health=1 with the master key (--master-key or $LLMGATE_MASTER_KEY) or a
virtual key (--api-key or $LLMGATE_API_KEY): breaker state, requests in flight, recent
latency, active health checks.

With -c/--config (or $LLMGATE_CONFIG when --url is not given) it reads the file
instead and shows what each model routes to; --probe checks every backend once
(its health path, else the engine's) and reads its model list with the backend's
api_key, as a request would: a refused key (401/403) or an upstream_model the list
does not name fails the deployment, and the command exits with status 1.

'llmgate models presets' lists the provider and engine presets.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if err := f.format.check(); err != nil {
				return err
			}
			if f.config == "" && !cmd.Flags().Changed("url") {
				f.config = os.Getenv("LLMGATE_CONFIG")
			}
			if f.config != "" {
				return modelsFromConfig(ctx, cmd.OutOrStdout(), f)
			}
			return modelsFromGateway(ctx, cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	f.gatewayFlags.register(fl, "$LLMGATE_URL, else "+defaultGatewayURL)
	fl.StringVar(&f.apiKey, "api-key", "", "A virtual API key, used without --master-key; when not given, $LLMGATE_API_KEY")
	deprecatedAlias(fl, &f.masterKey, "key", "master-key")
	fl.StringVarP(&f.config, "config", "c", "", "Read this config file instead of asking a gateway")
	fl.BoolVar(&f.probe, "probe", false, "With --config: check every backend once; exit status 1 when any fails")
	f.format.register(fl, "json")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Second, "Time-out for the gateway request or each probe")
	cmd.AddCommand(newModelsPresetsCmd())
	return cmd
}

// modelsFromGateway prints the health a running gateway reports.
func modelsFromGateway(ctx context.Context, w io.Writer, f modelsFlags) error {
	key := f.key()
	if key == "" {
		key = strings.TrimSpace(f.apiKey)
	}
	if key == "" {
		key = strings.TrimSpace(os.Getenv("LLMGATE_API_KEY"))
	}
	url, explicit := f.resolveURL(nil)
	base := strings.TrimSuffix(strings.TrimRight(url, "/"), "/v1")
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models?health=1", nil)
	if err != nil {
		return fmt.Errorf("--url %q: %w", url, err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return unreachable(base, explicit, err, "set --url, or use -c to read a config file")
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		msg := e.Error.Message
		if msg == "" {
			msg = strings.TrimSpace(string(body))
		}
		if resp.StatusCode == http.StatusUnauthorized && key == "" {
			msg += " (pass --master-key or set LLMGATE_MASTER_KEY)"
		}
		return fmt.Errorf("gateway answered %d: %s", resp.StatusCode, msg)
	}
	var list server.ModelsHealth
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("%s does not look like llmgate (GET /v1/models?health=1 gave no health): %w", base, err)
	}
	if f.format.json() {
		_, err := w.Write(body)
		return err
	}
	printHealth(w, list.Data)
	return nil
}

func printHealth(w io.Writer, models []router.ModelHealth) {
	if len(models) == 0 {
		fmt.Fprintln(w, "no models")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tDEPLOYMENT\tWEIGHT\tPRIO\tSTATUS\tIN FLIGHT\tLATENCY\tENGINE\tNOTE")
	for _, m := range models {
		name := m.Model
		if len(m.Fallbacks) > 0 {
			name += " → " + strings.Join(m.Fallbacks, ", ")
		}
		for i, d := range m.Deployments {
			if i > 0 {
				name = ""
			}
			st := d.Status
			if d.RetryInS > 0 {
				st += fmt.Sprintf(" %.0fs", d.RetryInS)
			}
			lat := "-"
			if d.LatencyMS > 0 {
				lat = fmt.Sprintf("%.0fms", d.LatencyMS)
			}
			note := ""
			switch {
			case d.HealthCheck != "" && d.HealthCheck != "ok":
				note = "check: " + d.HealthCheck
			case d.Breaker.LastError != "" && d.Status != "healthy":
				note = "last error: " + d.Breaker.LastError
			case d.NoTokenizer != "":
				note = "prompts estimated, no tokenizer: " + d.NoTokenizer
			}
			fmt.Fprintf(tw, "%s\t%s/%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\n", name, d.Backend, d.UpstreamModel, d.Weight, d.Priority, st, d.Outstanding, lat, engineColumn(d), truncateNote(note))
		}
	}
	tw.Flush()
}

// engineColumn says what the deployment's engine told the gateway: which
// engine, its context length, and whether prompts are counted by its own
// tokenizer ("-" until it was asked).
func engineColumn(d router.DeploymentHealth) string {
	var parts []string
	if d.Engine != "" {
		parts = append(parts, d.Engine)
	}
	if d.ContextLength > 0 {
		parts = append(parts, fmt.Sprintf("ctx %d", d.ContextLength))
	}
	switch {
	case d.Tokenizer != "":
		parts = append(parts, "tokenizer")
	case d.NoTokenizer != "":
		parts = append(parts, "no tokenizer")
	}
	if l := d.EngineLoad; l != nil {
		switch {
		case l.Fresh && l.KVCacheUsage != nil:
			parts = append(parts, fmt.Sprintf("waiting %g, running %g, kv %.0f%%", l.Waiting, l.Running, 100**l.KVCacheUsage))
		case l.Fresh:
			parts = append(parts, fmt.Sprintf("waiting %g, running %g", l.Waiting, l.Running))
		default:
			parts = append(parts, "no fresh /metrics: balanced on in-flight")
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func truncateNote(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// depOut and modelOut are a config's routes as models prints them.
type depOut struct {
	Backend       string `json:"backend"`
	UpstreamModel string `json:"upstream_model"`
	Weight        int    `json:"weight"`
	Priority      int    `json:"priority"`
	BaseURL       string `json:"base_url"`
	Preset        string `json:"preset,omitempty"`
	Probe         string `json:"probe,omitempty"`
}

type modelOut struct {
	Model       string   `json:"model"`
	Balancing   string   `json:"balancing"`
	Fallbacks   []string `json:"fallbacks,omitempty"`
	Deployments []depOut `json:"deployments"`
}

// modelsFromConfig prints what a config file routes each model to, and
// with --probe whether each backend answers now.
func modelsFromConfig(ctx context.Context, w io.Writer, f modelsFlags) error {
	cfg, err := loadConfig(f.config)
	if err != nil {
		return err
	}
	probes := map[string]backendProbe{}
	if f.probe {
		for name, b := range cfg.Backends {
			probes[name] = probeBackend(ctx, b, f.timeout)
		}
	}
	names := make([]string, 0, len(cfg.Models))
	for n := range cfg.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []modelOut
	for _, n := range names {
		m := cfg.Models[n]
		mo := modelOut{Model: n, Balancing: m.Balancing, Fallbacks: m.Fallbacks}
		for _, d := range m.Deployments {
			b := cfg.Backends[d.Backend]
			p := b.Provider
			if b.Engine != "" {
				p = "engine " + b.Engine
			}
			var probe string
			if f.probe {
				probe = probes[d.Backend].forModel(d.UpstreamModel)
			}
			mo.Deployments = append(mo.Deployments, depOut{Backend: d.Backend, UpstreamModel: d.UpstreamModel, Weight: d.Weight,
				Priority: d.Priority, BaseURL: b.BaseURL, Preset: p, Probe: probe})
		}
		out = append(out, mo)
	}
	if f.format.json() {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		return probeFailures(out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "MODEL\tDEPLOYMENT\tWEIGHT\tPRIO\tBASE URL\tPRESET"
	if f.probe {
		head += "\tPROBE"
	}
	fmt.Fprintln(tw, head)
	for _, m := range out {
		name := m.Model
		if len(m.Fallbacks) > 0 {
			name += " → " + strings.Join(m.Fallbacks, ", ")
		}
		if m.Balancing != config.BalanceLeastOutstanding && len(m.Deployments) > 1 {
			name += " (" + m.Balancing + ")"
		}
		for i, d := range m.Deployments {
			if i > 0 {
				name = ""
			}
			line := fmt.Sprintf("%s\t%s/%s\t%d\t%d\t%s\t%s", name, d.Backend, d.UpstreamModel, d.Weight, d.Priority, d.BaseURL, orDash(d.Preset))
			if f.probe {
				line += "\t" + d.Probe
			}
			fmt.Fprintln(tw, line)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return probeFailures(out)
}

// probeFailures is an error naming the deployments whose probe failed,
// so that `models --probe` exits non-zero when any did.
func probeFailures(models []modelOut) error {
	var failed []string
	n := 0
	for _, m := range models {
		for _, d := range m.Deployments {
			if d.Probe == "" {
				continue
			}
			n++
			if strings.HasPrefix(d.Probe, probeFailed) {
				failed = append(failed, d.Backend+"/"+d.UpstreamModel)
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	sort.Strings(failed)
	return fmt.Errorf("%d of %d deployment probes failed: %s (see the PROBE column)", len(failed), n, strings.Join(failed, ", "))
}

// probeFailed starts the PROBE column of a deployment that will not work.
const probeFailed = "FAIL: "

// backendProbe is what one probe of a backend found: a failure, or the
// models its model list names (nil when it offers none).
type backendProbe struct {
	fail   string
	took   time.Duration
	models map[string]bool
	listed []string
}

// forModel is the PROBE column of a deployment of upstream on the backend.
func (p backendProbe) forModel(upstream string) string {
	if p.fail != "" {
		return probeFailed + truncateNote(p.fail)
	}
	if p.models != nil && !p.models[upstream] {
		// Not cut at 100 characters: the names are the point.
		return probeFailed + fmt.Sprintf("upstream_model %q is not served here (the model list has %s)", upstream, listSample(p.listed))
	}
	if p.models == nil {
		return fmt.Sprintf("ok (%dms; no model list to check upstream_model)", p.took.Milliseconds())
	}
	return fmt.Sprintf("ok (%dms)", p.took.Milliseconds())
}

func listSample(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + fmt.Sprintf(" and %d more", len(ids)-5)
	}
	return strings.Join(ids, ", ")
}

// probeBackend checks one backend once: its configured health path (else
// the engine's), then its model list with the backend's credentials, the
// way a request would be sent. A health path answers without a key on
// most engines, so the model list is what finds a wrong api_key (401 or
// 403), and, per deployment, an upstream_model the backend does not serve.
func probeBackend(ctx context.Context, cb *config.Backend, timeout time.Duration) backendProbe {
	b := provider.NewBackend(cb)
	defer b.Close()
	url := b.HealthURL()
	if on, _, _, _ := b.HealthCheck(); !on {
		if e, ok := preset.LookupEngine(cb.Engine); ok { // the engine's cheap liveness path
			if u, err := neturl.Parse(b.BaseURL); err == nil {
				u.Path = e.HealthPath
				url = u.String()
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	if err := b.Probe(ctx, url); err != nil {
		return backendProbe{fail: err.Error()}
	}
	p := backendProbe{}
	path := "/models"
	if b.Dialect == dialect.Anthropic {
		path = "/v1/models"
	}
	req, err := b.NewRequest(ctx, path, nil, "")
	if err != nil {
		return backendProbe{fail: err.Error()}
	}
	resp, err := b.Do(req)
	if err != nil {
		return backendProbe{fail: "GET " + path + ": " + err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	p.took = time.Since(start)
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		msg := errorText(body)
		return backendProbe{fail: fmt.Sprintf("the backend refused its api_key: GET %s answered %d (%s)", path, resp.StatusCode, msg)}
	case resp.StatusCode/100 != 2:
		return p // no model list here: upstream models cannot be checked
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil || len(list.Data) == 0 {
		return p
	}
	p.models = map[string]bool{}
	for _, m := range list.Data {
		p.models[m.ID] = true
		p.listed = append(p.listed, m.ID)
	}
	sort.Strings(p.listed)
	return p
}

// errorText is the message of an error body, or the body itself.
func errorText(body []byte) string {
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return truncateNote(e.Error.Message)
	}
	return truncateNote(strings.TrimSpace(string(body)))
}

func newModelsPresetsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "presets",
		Short: "List the provider and engine presets (provider: / engine: in a backend)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PROVIDER\tBASE URL\tDIALECT\tKEY FROM\tNOTES")
			for _, p := range preset.Providers() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.BaseURL, p.Dialect, p.APIKeyEnv, p.Notes)
			}
			tw.Flush()
			fmt.Fprintln(w)
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ENGINE\tDEFAULT URL\tHEALTH\tSTREAM USAGE\tNOTES")
			for _, e := range preset.Engines() {
				usage := "yes"
				if !e.StreamUsage {
					usage = "not always (estimated)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.LocalURL(), e.HealthPath, usage, e.Notes)
			}
			return tw.Flush()
		},
	}
}
