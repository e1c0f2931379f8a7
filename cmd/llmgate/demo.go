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
// ran on its own GPU server.
var demoModels = []string{"qwen2.5-7b-instruct", "qwen2.5-32b-instruct", "qwen3-32b"}

// demo is a running demo: simulated engines behind a gateway with a fresh
// database, a demo key and a master key.
type demo struct {
	g      *gateway.Gateway
	key    string // the demo's virtual key
	master string
	dir    string // data directory
	temp   bool   // dir is removed at close
	stops  []func()
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
	for _, name := range demoModels {
		mc, _ := sim.PresetFor(name)
		addr, stop, err := sim.Listen(ctx, "127.0.0.1:0", sim.Config{Models: []sim.ModelConfig{mc}, Script: script})
		if err != nil {
			return nil, fmt.Errorf("start simulated %s: %w", name, err)
		}
		d.stops = append(d.stops, stop)
		backend := "sim-" + name
		cfg.Backends[backend] = &config.Backend{URL: "http://" + addr + "/v1"}
		m := &config.Model{Backend: backend}
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
	if err != nil {
		d.g.Close(context.Background())
		return nil, err
	}
	return d, nil
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

    # Benchmark all three models at concurrency 1, 4, 8 and 16
    %[8]s bench --base-url %[1]s --api-key %[3]s \
      --model qwen2.5-7b-instruct --model qwen2.5-32b-instruct --model qwen3-32b \
      --concurrency 1,4,8,16 --num-requests 64
`, base, root, d.key, d.master, strings.Join(demoModels, ", "), where, terminal, self)
	if !d.temp {
		fmt.Fprintf(w, `
    # After the demo stops, its usage stays in its database
    %s usage --database %s
`, self, shellQuote(filepath.Join(d.dir, "llmgate.db")))
	}
	fmt.Fprint(w, "\n  Press Ctrl-C to stop.\n\n")
}
