package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/config"
	"llmgate/internal/discover"
	"llmgate/internal/gateway"
	"llmgate/internal/gctune"
	"llmgate/internal/logging"
	"llmgate/internal/redact"
)

type serveFlags struct {
	config   string
	listen   string
	database string
	demo     bool
	dataDir  string
	logJSON  bool
	// simScript scripts the demo's simulated engines (see sim.LoadScript).
	simScript string
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: one OpenAI-compatible endpoint in front of every backend",
		Long: `Run the gateway. With -c/--config (or LLMGATE_CONFIG) it serves the models of
that file. Without a config it probes local engines on 127.0.0.1 ports 8000
(vLLM), 30000 (SGLang), 8080 (llama.cpp) and 11434 (Ollama), adds cloud
backends whose keys are set (OPENAI_API_KEY, DEEPSEEK_API_KEY,
DASHSCOPE_API_KEY), and prints what it found.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), f, cmd.ErrOrStderr()) },
	}
	cmd.Flags().StringVarP(&f.config, "config", "c", "", "Config file; when not given, $LLMGATE_CONFIG; with neither, discover backends")
	cmd.Flags().StringVar(&f.listen, "listen", "", "Listen address, overriding the config's; when neither gives one, "+config.DefaultListen)
	cmd.Flags().StringVar(&f.database, "database", "", "Database: a SQLite file or a postgres:// URL, overriding the config's; when neither gives one, "+config.DefaultDatabase)
	cmd.Flags().BoolVar(&f.demo, "demo", false, "Start simulated engines and a demo key: try everything without a GPU")
	cmd.Flags().StringVar(&f.dataDir, "data", "", "Demo data directory; when not given, a new temporary directory, removed at exit")
	cmd.Flags().StringVar(&f.simScript, "sim-script", "", "Demo: answer chat requests with the canned turns of this YAML or JSON file (see llmgate sim --help)")
	cmd.Flags().BoolVar(&f.logJSON, "log-json", false, "Log as JSON")
	return cmd
}

// loadConfig reads the config named by path or LLMGATE_CONFIG. It returns
// nil, nil when neither is set.
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		path = os.Getenv("LLMGATE_CONFIG")
	}
	if path == "" {
		return nil, nil
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open config: %w", err)
	}
	defer fh.Close()
	return config.Load(fh, path)
}

// newLogger returns the gateway's logger: buffered, so the access line of
// every request costs no write on the request path (see internal/logging).
// The caller must Close it to write what is buffered.
func newLogger(w io.Writer, json bool) *logging.Logger {
	return logging.New(w, json, 0)
}

func runServe(ctx context.Context, f serveFlags, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A floor under the GC's heap goal (unless GOGC or GOMEMLIMIT is set):
	// ~5 % of the CPU under load for a few tens of MB (internal/gctune).
	defer gctune.Start(0).Stop()
	if f.demo {
		return runDemo(ctx, f, out)
	}
	cfg, err := loadConfig(f.config)
	if err != nil {
		return err
	}
	lg := newLogger(out, f.logJSON || (cfg != nil && cfg.LogFormat == "json"))
	defer lg.Close()
	log := lg.Logger
	zero := cfg == nil
	if !zero {
		gateway.LogWarnings(log, cfg)
	}
	var local, found []discover.Found
	var refused []discover.Refused
	if zero {
		local, refused = discover.Probe(ctx, "127.0.0.1", discover.DefaultPorts, probeTimeout, os.LookupEnv)
		if cfg, found, err = zeroConfig(local, f); err != nil {
			return err
		}
	} else {
		f.override(cfg)
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	logBackends(log, cfg)
	warnProxy(log)
	g, err := gateway.Start(ctx, gateway.Options{Config: cfg, Logger: log, Notice: out})
	if err != nil {
		return err
	}
	if zero {
		printDiscovery(out, g.URL(), cfg, found, refused, selfInvocation())
	}
	log.Info("llmgate listening", "url", g.URL(), "models", len(cfg.Models), "database", redact.Secrets(cfg.Database))
	if zero {
		probe := func(ctx context.Context) []discover.Found {
			now, _ := discover.Probe(ctx, "127.0.0.1", discover.DefaultPorts, probeTimeout, os.LookupEnv)
			return now
		}
		go watchLocalEngines(ctx, g, f, local, log, rediscoverEvery, probe)
	} else {
		watchConfig(ctx, g, f, cfg, log)
	}
	return waitAndClose(ctx, g, log)
}

// probeTimeout bounds one zero-config probe of a local port.
const probeTimeout = 700 * time.Millisecond

// rediscoverEvery is how often a gateway started without a config probes
// the local ports again, so that an engine started (or done loading its
// model) after the gateway joins without a restart.
const rediscoverEvery = 10 * time.Second

// override applies the command line's --listen and --database.
func (f serveFlags) override(cfg *config.Config) {
	if f.listen != "" {
		cfg.Listen = f.listen
	}
	if f.database != "" {
		cfg.Database = f.database
	}
}

// zeroConfig is the configuration of a start without a config file: the
// local engines found, the cloud keys set, the environment and the
// command line's overrides, validated.
func zeroConfig(local []discover.Found, f serveFlags) (*config.Config, []discover.Found, error) {
	cfg, found := discover.Build(local, os.LookupEnv, discover.DefaultClouds)
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		return nil, nil, err
	}
	cfg.ApplyDefaults()
	f.override(cfg)
	return cfg, found, cfg.Validate()
}

// watchLocalEngines probes the local ports every interval and applies what
// changed to the running gateway (discover.Merge): engines and models new
// since are added, a model an answering engine no longer lists is
// dropped. An engine that does not answer keeps its models (it may be
// restarting): its requests fail as a stopped backend's do.
func watchLocalEngines(ctx context.Context, g *gateway.Gateway, f serveFlags, known []discover.Found, log *slog.Logger,
	interval time.Duration, probe func(context.Context) []discover.Found) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		merged, added, removed := discover.Merge(known, probe(ctx))
		if len(added) == 0 && len(removed) == 0 {
			continue
		}
		cfg, _, err := zeroConfig(merged, f)
		if err != nil {
			log.Error("a local engine was found but the configuration with it is not valid; not added", "err", err)
			continue
		}
		g.UseConfig(cfg)
		known = merged
		for _, a := range added {
			if len(a.Models) == 0 {
				// Merge reports an engine whose models are the same but
				// whose key variable changed.
				log.Info("a local engine's API key variable changed: its requests carry the new key", "backend", a.Backend, "url", a.URL)
				continue
			}
			log.Info("local engine found: its models are served now", "backend", a.Backend, "url", a.URL, "models", strings.Join(discover.ServedAs(cfg, a), ", "))
		}
		for _, r := range removed {
			log.Warn("a local engine no longer lists these models: not served any more", "backend", r.Backend, "url", r.URL, "models", strings.Join(r.Models, ", "))
		}
	}
}

// waitAndClose waits for ctx to end, then closes the gateway and runs
// after (for what must outlive the requests in flight).
func waitAndClose(ctx context.Context, g *gateway.Gateway, log *slog.Logger, after ...func()) error {
	<-ctx.Done()
	log.Info("shutting down: finishing requests in flight and flushing the usage ledger")
	sctx, cancel := context.WithTimeout(context.Background(), g.Config.ShutdownWait())
	defer cancel()
	err := g.Close(sctx)
	for _, f := range after {
		f()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func logBackends(log *slog.Logger, cfg *config.Config) {
	names := make([]string, 0, len(cfg.Backends))
	for n := range cfg.Backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b := cfg.Backends[n]
		attrs := []any{"backend", n, "base_url", redact.Secrets(b.BaseURL), "dialect", b.Dialect, "api_key", b.APIKey != ""}
		if strings.TrimRight(b.URL, "/") != b.BaseURL {
			attrs = append(attrs, "configured_url", redact.Secrets(b.URL))
		}
		if b.CAFile != "" {
			attrs = append(attrs, "ca_file", b.CAFile)
		}
		if b.ClientCertFile != "" {
			attrs = append(attrs, "client_cert_file", b.ClientCertFile)
		}
		log.Info("backend", attrs...)
		if b.TLSSkipVerify {
			log.Warn("backend certificates are NOT checked (tls_skip_verify): anyone on the network path can read its API key; use ca_file instead", "backend", n)
		}
	}
}

// warnProxy says when proxy variables are set, since a stray HTTP_PROXY is
// a classic cause of "backend unreachable". Loopback backends bypass it.
func warnProxy(log *slog.Logger) {
	for _, v := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"} {
		if val := os.Getenv(v); val != "" {
			log.Warn("proxy variable set: requests to non-loopback backends go through it (NO_PROXY excludes hosts)", "var", v)
		}
	}
}

func printDiscovery(w io.Writer, url string, cfg *config.Config, found []discover.Found, refused []discover.Refused, self string) {
	for _, r := range refused {
		fmt.Fprintf(w, "\n  %s (%s's port) not added: %s.", r.Addr, r.Engine, r.Reason)
	}
	if len(refused) > 0 {
		fmt.Fprintln(w)
	}
	if len(found) == 0 {
		nothing := "nothing answered GET /v1/models"
		if len(refused) > 0 {
			nothing = "nothing else answered GET /v1/models with a model list"
		}
		fmt.Fprintf(w, `
  No backends found: %[2]s on 127.0.0.1 ports 8000, 30000,
  8080 or 11434, and none of OPENAI_API_KEY, DEEPSEEK_API_KEY, DASHSCOPE_API_KEY is set.
  The gateway runs anyway, and serves an engine started on one of those ports
  within 10 s (the ports are probed again). Or set a cloud key and restart, or
  write a config file:

      backends:
        local-vllm: {url: http://127.0.0.1:8000/v1}
      models:
        my-model: {backend: local-vllm}

  and run '%[1]s serve -c llmgate.yaml'. To try llmgate without a GPU: '%[1]s serve --demo'.

`, self, nothing)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\n  BACKEND\tURL\tFOUND BY\tMODELS")
	for _, f := range found {
		names := discover.ServedAs(cfg, f)
		for i, m := range f.Models {
			if names[i] != m {
				names[i] += " (" + m + ")"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Backend, f.URL, f.Source, strings.Join(names, ", "))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n  Base URL: %s\n  API key:  the master key (LLMGATE_MASTER_KEY, or the one printed at first start),\n            or a key from '%s keys create'\n\n", url, self)
}
