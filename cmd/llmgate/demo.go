package main

import (
	"context"
	"fmt"
	"io"
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

// runDemo starts simulated engines in-process, a gateway in front of them
// with a fresh database, creates a demo key and prints how to use it.
func runDemo(ctx context.Context, f serveFlags, out io.Writer) error {
	dir := f.dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "llmgate-demo-")
		if err != nil {
			return err
		}
		dir = d
		defer os.RemoveAll(d)
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg := &config.Config{Listen: config.DefaultListen, Database: filepath.Join(dir, "llmgate.db"),
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
			return err
		}
		script = sc
		fmt.Fprintf(out, "llmgate demo: chat answers scripted by %s (%d turns; unmatched requests: %s)\n",
			f.simScript, len(sc.Turns()), sc.OnUnmatched())
	}
	for _, name := range demoModels {
		mc, _ := sim.PresetFor(name)
		addr, stop, err := sim.Listen(ctx, "127.0.0.1:0", sim.Config{Models: []sim.ModelConfig{mc}, Script: script})
		if err != nil {
			return fmt.Errorf("start simulated %s: %w", name, err)
		}
		defer stop()
		backend := "sim-" + name
		cfg.Backends[backend] = &config.Backend{URL: "http://" + addr + "/v1"}
		cfg.Models[name] = &config.Model{Backend: backend}
	}
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		return err
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	lg := newLogger(out, f.logJSON)
	defer lg.Close()
	log := lg.Logger
	master := strings.TrimSpace(os.Getenv("LLMGATE_MASTER_KEY"))
	if master == "" {
		m, err := keys.Generate()
		if err != nil {
			return err
		}
		master = m
	}
	g, err := gateway.Start(ctx, gateway.Options{Config: cfg, Logger: log, MasterKey: master, Notice: io.Discard})
	if err != nil {
		return err
	}
	_, demoKey, err := gateway.CreateKey(ctx, g.Store, keys.Key{Name: "demo"})
	if err != nil {
		g.Close(context.Background())
		return err
	}
	if err := g.Verifier.Reload(ctx); err != nil {
		g.Close(context.Background())
		return err
	}
	printDemo(out, g.URL(), demoKey, master, dir, f.dataDir == "")
	return waitAndClose(ctx, g, log)
}

func printDemo(w io.Writer, base, key, master, dir string, temp bool) {
	where := dir
	if temp {
		where += " (temporary; use --data DIR to keep it)"
	}
	fmt.Fprintf(w, `
  llmgate demo: three simulated engines (vLLM-like continuous batching, no GPU)
  behind one gateway.

    Base URL    %[1]s
    Console     %[7]s/ui/   (sign in with the master key or the API key)
    API key     %[2]s
    Master key  %[3]s   (admin; 'llmgate keys', 'llmgate usage')
    Models      %[4]s
    Data        %[5]s

  Try it:

    curl %[1]s/chat/completions \
      -H "Authorization: Bearer %[2]s" -H "Content-Type: application/json" \
      -d '{"model": "qwen2.5-7b-instruct", "messages": [{"role": "user", "content": "Hello!"}]}'

    # Python (pip install openai)
    from openai import OpenAI
    client = OpenAI(base_url="%[1]s", api_key="%[2]s")
    r = client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "Hello!"}])
    print(r.choices[0].message.content, r.usage)

    // Node (npm install openai)
    import OpenAI from "openai";
    const client = new OpenAI({ baseURL: "%[1]s", apiKey: "%[2]s" });
    const r = await client.chat.completions.create({ model: "qwen2.5-32b-instruct", messages: [{ role: "user", content: "Hello!" }] });
    console.log(r.choices[0].message.content, r.usage);

    # Benchmark all three models at concurrency 1, 4, 8 and 16
    llmgate bench --base-url %[1]s --api-key %[2]s \
      --model qwen2.5-7b-instruct --model qwen2.5-32b-instruct --model qwen3-32b \
      --concurrency 1,4,8,16 --num-requests 64

    # Usage so far (another terminal)
    llmgate usage --database %[6]s

  Press Ctrl-C to stop.

`, base, key, master, strings.Join(demoModels, ", "), where, filepath.Join(dir, "llmgate.db"), strings.TrimSuffix(base, "/v1"))
}
