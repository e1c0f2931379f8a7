package doctor

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/keys"
	"llmgate/internal/sim"
	"llmgate/internal/testenv/testdb"
)

// TestRun_HealthyLLMGatePassesEveryCheck runs the doctor against a real
// gateway in front of the simulator: every check must pass, with no
// warnings (chat, streaming with usage, Anthropic Messages, Responses).
func TestRun_HealthyLLMGatePassesEveryCheck(t *testing.T) {
	ctx := context.Background()
	mc, _ := sim.PresetFor("qwen2.5-7b-instruct")
	mc.PrefillBase, mc.PrefillPerToken, mc.DecodeBase, mc.DecodePerSeq = 0, 0, 200_000, 0 // 0.2 ms steps: fast test
	simAddr, stop, err := sim.Listen(ctx, "127.0.0.1:0", sim.Config{Models: []sim.ModelConfig{mc}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cfg := &config.Config{Listen: "127.0.0.1:0", Database: testdb.SQLite(t, t.TempDir(), "d.db"),
		Backends: map[string]*config.Backend{"sim": {URL: "http://" + simAddr}},
		Models:   map[string]*config.Model{"qwen2.5-7b-instruct": {Backend: "sim"}}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	g, err := gateway.Start(ctx, gateway.Options{Config: cfg, MasterKey: "sk-lg-doctor-master", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	_, secret, err := gateway.CreateKey(ctx, g.Store, keys.Key{Name: "doctor"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Verifier.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	r := Run(ctx, Options{BaseURL: g.URL(), APIKey: secret, SkipClients: true, RequireAnthropic: true,
		LookupEnv: func(string) (string, bool) { return "", false }})
	var out bytes.Buffer
	_ = r.WriteText(&out)
	if !r.OK || r.Failed != 0 || r.Warnings != 0 {
		t.Fatalf("a healthy llmgate should pass every check:\n%s", out.String())
	}
	for _, id := range []string{"auth", "models", "chat", "stream", "anthropic", "responses", "perf"} {
		if c := r.Check(id); c == nil || c.Status != StatusPass {
			t.Errorf("check %q did not pass:\n%s", id, out.String())
		}
	}
	// The gateway said how the streamed request's time divided.
	if m := r.Metrics; m == nil || m.Timing == nil || m.Timing.GatewayMS <= 0 || m.Timing.BackendMS <= 0 {
		t.Errorf("no Server-Timing figures from the gateway: %+v", m)
	} else if !strings.Contains(r.Check("perf").Detail, "the gateway says: ") {
		t.Errorf("the perf line does not say what the gateway said: %s", r.Check("perf").Detail)
	}
}
