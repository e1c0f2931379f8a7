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
	json    bool
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
(its health path, else GET <base>/models) and exits with status 1 when any fails.

'llmgate models presets' lists the provider and engine presets.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
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
	fl.BoolVar(&f.json, "json", false, "Print JSON")
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
	url, _ := f.resolveURL(nil)
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
		return fmt.Errorf("cannot reach the gateway at %s: %w (is llmgate serve running? set --url, or use -c to read a config file)", base, err)
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
	if f.json {
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

// modelsFromConfig prints what a config file routes each model to, and
// with --probe whether each backend answers now.
func modelsFromConfig(ctx context.Context, w io.Writer, f modelsFlags) error {
	cfg, err := loadConfig(f.config)
	if err != nil {
		return err
	}
	probes := map[string]string{}
	if f.probe {
		for name, b := range cfg.Backends {
			probes[name] = probeBackend(ctx, b, f.timeout)
		}
	}
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
			mo.Deployments = append(mo.Deployments, depOut{Backend: d.Backend, UpstreamModel: d.UpstreamModel, Weight: d.Weight,
				Priority: d.Priority, BaseURL: b.BaseURL, Preset: p, Probe: probes[d.Backend]})
		}
		out = append(out, mo)
	}
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		return probeFailures(probes)
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
	return probeFailures(probes)
}

// probeFailures is an error naming the backends whose probe failed, so
// that `models --probe` exits non-zero when any did.
func probeFailures(probes map[string]string) error {
	var failed []string
	for name, p := range probes {
		if strings.HasPrefix(p, probeFailed) {
			failed = append(failed, name)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	sort.Strings(failed)
	return fmt.Errorf("%d of %d backend probes failed: %s (see the PROBE column)", len(failed), len(probes), strings.Join(failed, ", "))
}

// probeFailed starts the PROBE column of a backend that did not answer.
const probeFailed = "FAIL: "

// probeBackend checks one backend once: its configured health path, else
// GET <base>/models.
func probeBackend(ctx context.Context, cb *config.Backend, timeout time.Duration) string {
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
		return probeFailed + truncateNote(err.Error())
	}
	return fmt.Sprintf("ok (%dms)", time.Since(start).Milliseconds())
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
