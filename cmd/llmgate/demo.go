package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/keys"
	"llmgate/internal/sim"
)

// demoModels are simulated in demo mode, each as its own engine, as if each
// ran on its own GPU server. Prices are USD per million tokens, from hosted
// providers' list prices for these models (Together AI's Qwen2.5 Turbo
// endpoints, Groq's Qwen3 32B), so that usage shows cost and budgets move.
var demoModels = []demoModel{
	{Name: "qwen2.5-7b-instruct", InputPrice: 0.30, OutputPrice: 0.30},
	{Name: "qwen2.5-32b-instruct", InputPrice: 0.80, OutputPrice: 0.80},
	{Name: "qwen3-32b", InputPrice: 0.29, OutputPrice: 0.59},
}

// demoModel is one model of the demo and its price.
type demoModel struct {
	Name                    string
	InputPrice, OutputPrice float64
}

// demoModelNames lists the demo's model names.
func demoModelNames() []string {
	var out []string
	for _, m := range demoModels {
		out = append(out, m.Name)
	}
	return out
}

// demoTargetsFile is the bench targets file the demo writes in its data
// directory: each model direct and through the gateway.
const demoTargetsFile = "bench-targets.yaml"

// demo is a running demo: simulated engines behind a gateway with a fresh
// database, a demo key and a master key.
type demo struct {
	g      *gateway.Gateway
	key    string // the demo's virtual key
	master string
	dir    string // data directory
	temp   bool   // dir is removed at close
	stops  []func()
	// engines are the simulated engines' base URLs, in demoModels order.
	engines []string
	// targets is the bench targets file written for this demo.
	targets string
}

// runDemo starts the demo, prints how to use it and serves until ctx ends.
func runDemo(ctx context.Context, f serveFlags, out io.Writer) error {
	lg := newLogger(out, f.logJSON)
	defer lg.Close()
	d, err := startDemo(ctx, f, lg.Logger)
	if err != nil {
		return err
	}
	defer d.removeData()
	printDemo(out, d, selfInvocation())
	return waitAndClose(ctx, d.g, lg.Logger, d.stopEngines)
}

// startDemo starts simulated engines in-process and a gateway in front of
// them, and creates the demo key.
func startDemo(ctx context.Context, f serveFlags, log *slog.Logger) (d *demo, err error) {
	d = &demo{dir: f.dataDir}
	defer func() {
		if err != nil {
			d.stopEngines()
			d.removeData()
		}
	}()
	if d.dir == "" {
		dir, err := os.MkdirTemp("", "llmgate-demo-")
		if err != nil {
			return nil, err
		}
		d.dir, d.temp = dir, true
	} else if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return nil, err
	}
	cfg := &config.Config{Listen: config.DefaultListen, Database: filepath.Join(d.dir, "llmgate.db"),
		Backends: map[string]*config.Backend{}, Models: map[string]*config.Model{}, Source: "demo"}
	if f.listen != "" {
		cfg.Listen = f.listen
	}
	// One script serves all three engines: its in-order turns are handed
	// out across them.
	var script *sim.Script
	if f.simScript != "" {
		sc, err := sim.LoadScript(f.simScript)
		if err != nil {
			return nil, err
		}
		script = sc
		log.Info("demo chat answers are scripted", "script", f.simScript, "turns", len(sc.Turns()), "unmatched", sc.OnUnmatched())
	}
	for _, dm := range demoModels {
		name := dm.Name
		mc, _ := sim.PresetFor(name)
		addr, stop, err := sim.Listen(ctx, "127.0.0.1:0", sim.Config{Models: []sim.ModelConfig{mc}, Script: script})
		if err != nil {
			return nil, fmt.Errorf("start simulated %s: %w", name, err)
		}
		d.stops = append(d.stops, stop)
		backend := "sim-" + name
		d.engines = append(d.engines, "http://"+addr+"/v1")
		cfg.Backends[backend] = &config.Backend{URL: "http://" + addr + "/v1"}
		m := &config.Model{Backend: backend, InputPrice: dm.InputPrice, OutputPrice: dm.OutputPrice}
		if mc.Reasoning { // a client's thinking request reaches it as Qwen3 takes it
			m.Reasoning = &config.Reasoning{Preset: "qwen3"}
		}
		cfg.Models[name] = m
	}
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		return nil, err
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d.master = strings.TrimSpace(os.Getenv("LLMGATE_MASTER_KEY"))
	if d.master == "" {
		if d.master, err = keys.Generate(); err != nil {
			return nil, err
		}
	}
	d.g, err = gateway.Start(ctx, gateway.Options{Config: cfg, Logger: log, MasterKey: d.master, Notice: io.Discard})
	if err != nil {
		return nil, err
	}
	_, d.key, err = gateway.CreateKey(ctx, d.g.Store, keys.Key{Name: "demo"})
	if err == nil {
		err = d.g.Verifier.Reload(ctx)
	}
	if err == nil {
		err = d.writeTargets()
	}
	if err != nil {
		d.g.Close(context.Background())
		return nil, err
	}
	return d, nil
}

// writeTargets writes the bench targets file: every model straight at its
// simulated engine and through the gateway, paired, so that bench shows
// what the gateway adds.
func (d *demo) writeTargets() error {
	var b strings.Builder
	b.WriteString("# llmgate bench targets for this demo: each model straight at its simulated\n" +
		"# engine and through the gateway (direct: pairs them, so bench prints what the\n" +
		"# gateway adds). Written by llmgate serve --demo.\ntargets:\n")
	for i, m := range demoModels {
		fmt.Fprintf(&b, "  - name: %s-direct\n    base_url: %s\n    model: %s\n", m.Name, d.engines[i], m.Name)
		fmt.Fprintf(&b, "  - name: %s-gateway\n    base_url: %s\n    api_key: %s\n    model: %s\n    direct: %s-direct\n",
			m.Name, d.g.URL(), d.key, m.Name, m.Name)
	}
	d.targets = filepath.Join(d.dir, demoTargetsFile)
	return os.WriteFile(d.targets, []byte(b.String()), 0o600)
}

// engineLines lists each simulated engine's base URL and the model's price.
func (d *demo) engineLines() string {
	var b strings.Builder
	for i, m := range demoModels {
		fmt.Fprintf(&b, "    %-22s %s   ($%.2f in, $%.2f out per 1M tokens)\n", m.Name, d.engines[i], m.InputPrice, m.OutputPrice)
	}
	return b.String()
}

// stopEngines stops the simulated engines.
func (d *demo) stopEngines() {
	for _, stop := range d.stops {
		stop()
	}
}

// removeData removes a temporary data directory.
func (d *demo) removeData() {
	if d.temp {
		os.RemoveAll(d.dir)
	}
}

// printDemo prints the demo banner. Every command in it is exact for this
// demo (its URL, keys and database) and runs as printed from the shell
// that started it: self is how that shell runs llmgate (selfInvocation).
func printDemo(w io.Writer, d *demo, self string) {
	base := d.g.URL()
	root := strings.TrimSuffix(base, "/v1")
	where := d.dir
	if d.temp {
		where += " (temporary; use --data DIR to keep it)"
	}
	terminal := "From another terminal"
	if strings.HasPrefix(self, "go run ") {
		terminal += " in this directory"
	}
	fmt.Fprintf(w, `
  llmgate demo: three simulated engines (vLLM-like continuous batching, no GPU)
  behind one gateway.

    Base URL    %[1]s
    Console     %[2]s/ui/   (sign in with the master key or the API key)
    API key     %[3]s
    Master key  %[4]s   (admin: keys, usage, the console)
    Models      %[5]s
    Data        %[6]s

  Simulated engines (to benchmark them directly; no key):

%[9]s
  Try it:

    curl %[1]s/chat/completions \
      -H "Authorization: Bearer %[3]s" -H "Content-Type: application/json" \
      -d '{"model": "qwen2.5-7b-instruct", "messages": [{"role": "user", "content": "Hello!"}]}'

    # Python (pip install openai)
    from openai import OpenAI
    client = OpenAI(base_url="%[1]s", api_key="%[3]s")
    r = client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "Hello!"}])
    print(r.choices[0].message.content, r.usage)

    // Node (npm install openai)
    import OpenAI from "openai";
    const client = new OpenAI({ baseURL: "%[1]s", apiKey: "%[3]s" });
    const r = await client.chat.completions.create({ model: "qwen2.5-32b-instruct", messages: [{ role: "user", content: "Hello!" }] });
    console.log(r.choices[0].message.content, r.usage);

  %[7]s:

    # A key of your own (it works on its first request)
    %[8]s keys create --url %[2]s --master-key %[4]s --name my-app

    # Usage so far
    %[8]s usage --url %[2]s --master-key %[4]s

    # Benchmark the three models, direct and through the gateway, 3 runs:
    # P50/P95/P99 per cell and what the gateway adds (targets: %[10]s)
    %[8]s bench --config %[10]s \
      --concurrency 1,4,8,16 --runs 3 --num-requests 32 --out bench-demo
`, base, root, d.key, d.master, strings.Join(demoModelNames(), ", "), where, terminal, self, d.engineLines(), shellQuote(d.targets))
	if !d.temp {
		fmt.Fprintf(w, `
    # After the demo stops, its usage stays in its database
    %s usage --database %s
`, self, shellQuote(filepath.Join(d.dir, "llmgate.db")))
	}
	fmt.Fprint(w, "\n  Press Ctrl-C to stop.\n\n")
}
