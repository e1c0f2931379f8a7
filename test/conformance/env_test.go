// Package conformance runs the official client SDKs (Go and Node) against a
// live llmgate gateway in front of the vLLM simulator and scripted upstreams
// of both backend dialects. A field an SDK needs that the gateway leaves out,
// a tool call mangled across turns, or an error that does not surface as the
// SDK's typed error fails these tests.
package conformance

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/dialect"
	"llmgate/internal/gateway"
	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/sim"
	"llmgate/internal/testenv"
)

const masterKey = "sk-lg-conformance-master"

// simModel is the simulator's served model: fast steps so the suite stays
// quick, short natural answers.
var simModel = sim.ModelConfig{Name: "sim-model", MaxNumSeqs: 16, MaxModelLen: 8192,
	PrefillBase: time.Millisecond, PrefillPerToken: time.Microsecond,
	DecodeBase: time.Millisecond, DecodePerSeq: 100 * time.Microsecond, MeanOutputTokens: 12, EmbeddingDim: 8}

// backendKind names the three upstreams every client is tested against.
type backendKind struct {
	prefix  string // model name prefix in the gateway config
	dialect dialect.Dialect
	scripts bool // scripted upstream: tools, reasoning, cuts and errors
}

var (
	simBackend       = backendKind{"sim", dialect.OpenAI, false}
	openaiBackend    = backendKind{"oa", dialect.OpenAI, true}
	anthropicBackend = backendKind{"an", dialect.Anthropic, true}
	scriptedBackends = []backendKind{openaiBackend, anthropicBackend}
	allBackends      = []backendKind{simBackend, openaiBackend, anthropicBackend}
)

// model returns the gateway model name of a scenario on this backend.
func (b backendKind) model(scenario string) string {
	if !b.scripts {
		return "sim"
	}
	return b.prefix + "-" + scenario
}

// simMaxParallelToolCalls lets a forced tool call from the simulator hold
// up to this many calls when the client allows parallel calls.
const simMaxParallelToolCalls = 3

var scenarios = []string{"text", "tool", "tools2", "reason", "cut", "errmid", "ratelimit", "image"}

// The tool scenarios: one call, and two parallel calls.
var (
	toolScenarios = []string{"tool", "tools2"}
	toolCities    = map[string]string{"tool": "Paris", "tools2": "Paris,Tokyo"}
	toolAnswers   = map[string]string{"tool": toolAnswer, "tools2": tools2Answer}
	weatherResult = map[string]string{"Paris": toolResult, "Tokyo": toolResult2}
)

// env is a live gateway with its upstreams and a virtual key.
type env struct {
	gw        *gateway.Gateway
	oa        *openaiFake
	an        *anthropicFake
	key       string // virtual key allowed every model
	narrowKey string // virtual key allowed only "sim"
	root      string // http://host:port
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{oa: newOpenAIFake(t), an: newAnthropicFake(t)}
	simAddr, stop, err := sim.Listen(context.Background(), "127.0.0.1:0", sim.Config{Models: []sim.ModelConfig{simModel}, APIKey: upstreamKey, Seed: 7,
		MaxParallelToolCalls: simMaxParallelToolCalls})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	var sb strings.Builder
	fmt.Fprintf(&sb, "backends:\n")
	fmt.Fprintf(&sb, "  sim: {url: http://%s/v1, api_key: %s}\n", simAddr, upstreamKey)
	fmt.Fprintf(&sb, "  oa: {url: %s/v1, api_key: %s}\n", e.oa.URL, upstreamKey)
	fmt.Fprintf(&sb, "  an: {url: %s, api_key: %s, dialect: anthropic}\n", e.an.URL, upstreamKey)
	fmt.Fprintf(&sb, "models:\n  sim: {backend: sim, upstream_model: %s}\n", simModel.Name)
	for _, b := range scriptedBackends {
		for _, s := range scenarios {
			fmt.Fprintf(&sb, "  %s: {backend: %s, upstream_model: %s}\n", b.model(s), b.prefix, s)
		}
	}
	fmt.Fprintf(&sb, "  %s: {backend: an, upstream_model: %s}\n", anthropicBackend.model(forcedScenario), forcedScenario)
	cfg, err := config.Load(strings.NewReader(sb.String()), "conformance.yaml")
	if err != nil {
		t.Fatalf("config: %v\n%s", err, sb.String())
	}
	cfg.Database = filepath.Join(t.TempDir(), "llmgate.db")
	cfg.Listen = "127.0.0.1:0"
	gw, err := gateway.Start(context.Background(), gateway.Options{Config: cfg, MasterKey: masterKey,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Close(ctx)
	})
	e.gw = gw
	e.root = "http://" + gw.Addr
	_, e.key, err = gateway.CreateKey(context.Background(), gw.Store, keys.Key{Name: "conformance"})
	if err != nil {
		t.Fatal(err)
	}
	_, e.narrowKey, err = gateway.CreateKey(context.Background(), gw.Store, keys.Key{Name: "narrow", Models: []string{"sim"}})
	if err != nil {
		t.Fatal(err)
	}
	// Keys reach the verifier through its store poll; reload now rather
	// than wait for it.
	if err := gw.Verifier.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitKey(t, e.key)
	e.waitKey(t, e.narrowKey)
	return e
}

// waitKey waits until the gateway's verifier knows a new key.
func (e *env) waitKey(t *testing.T, secret string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() bool { _, err := e.gw.Verifier.Verify(secret); return err == nil },
		"the gateway picks up a new key")
}

// testCtx returns a context bounded so that a hung stream fails the test
// instead of hanging CI.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
