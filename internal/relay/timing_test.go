package relay_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/relay"
	"llmgate/internal/router"
	"llmgate/internal/servertiming"
)

// serverTiming reads the answer's Server-Timing metrics by name.
func serverTiming(h http.Header) map[string]time.Duration {
	got := map[string]time.Duration{}
	for _, name := range []string{"gateway", "backend", "wait"} {
		if d, ok := servertiming.Get(h, name); ok {
			got[name] = d
		}
	}
	return got
}

// The answer's head says how the request's time divided: the backends'
// share covers what they took, the pause before a retry is a wait, and
// the three together never exceed what the client measured.
func TestServerTiming_SplitsTheTimeBeforeTheHead(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		model                string
		stream               bool
		backendMin, waitMin  time.Duration // at least
		noBackend, wantsWait bool
	}{
		{model: "oa-ok"},
		{model: "oa-ok", stream: true},
		// The first deployment answers 200 with an error, the retry (after
		// a back-off of at least retry_backoff, 1ms) waits firstTokenDelay.
		{model: "oa-fto", backendMin: firstTokenDelay, waitMin: time.Millisecond, wantsWait: true},
		{model: "oa-fto", stream: true, backendMin: firstTokenDelay, waitMin: time.Millisecond, wantsWait: true},
		{model: "an-fto", backendMin: firstTokenDelay, waitMin: time.Millisecond, wantsWait: true},
		// Refused by the admission: no backend was asked.
		{model: "oa-refused", noBackend: true},
	} {
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`, tc.model, tc.stream)
		start := time.Now()
		a := h.send(t, "/v1/chat/completions", body, false)
		elapsed := time.Since(start)
		name := fmt.Sprintf("%s stream=%v", tc.model, tc.stream)
		st := a.header.Get("Server-Timing")
		if st == "" {
			t.Fatalf("%s: no Server-Timing header (status %d)", name, a.status)
		}
		got := serverTiming(a.header)
		if _, ok := got["gateway"]; !ok {
			t.Errorf("%s: Server-Timing %q has no gateway entry", name, st)
		}
		if _, ok := got["backend"]; ok == tc.noBackend {
			t.Errorf("%s: Server-Timing %q: backend entry present = %v, want %v", name, st, ok, !tc.noBackend)
		}
		if _, ok := got["wait"]; ok != tc.wantsWait {
			t.Errorf("%s: Server-Timing %q: wait entry present = %v, want %v", name, st, ok, tc.wantsWait)
		}
		if got["backend"] < tc.backendMin || got["wait"] < tc.waitMin {
			t.Errorf("%s: Server-Timing %q: want backend >= %s and wait >= %s", name, st, tc.backendMin, tc.waitMin)
		}
		if sum := got["gateway"] + got["backend"] + got["wait"]; sum > elapsed {
			t.Errorf("%s: Server-Timing %q adds up to %s, more than the client's %s", name, st, sum, elapsed)
		}
	}
}

// Waiting for a local engine to start is waiting, not the gateway's work.
func TestServerTiming_AnEngineStartIsAWait(t *testing.T) {
	up := newFakeBackend(t, false)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  eng: {url: %s/v1}\nmodels:\n  m: {backend: eng, upstream_model: ok-a}\n", up.URL)), "engine.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const start = 100 * time.Millisecond
	engines := &fakeLeaser{backends: []string{"eng"}, onLease: func(ctx context.Context, _, _ string) error {
		select { // the engine takes a while to start
		case <-time.After(start):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	table := router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Leaser: engines})
	t.Cleanup(table.Close)
	rl := relay.New(relay.Options{Ledger: &recLedger{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(serveRelay(rl, table, "engine-wait"))
	t.Cleanup(srv.Close)
	for _, stream := range []bool{false, true} {
		sent := time.Now()
		code, h, body := post(t, srv.URL+"/v1/chat/completions", fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream))
		elapsed := time.Since(sent)
		if code != http.StatusOK {
			t.Fatalf("stream=%v: %d %s", stream, code, body)
		}
		st := h.Get("Server-Timing")
		got := serverTiming(h)
		if got["wait"] < start || got["backend"] == 0 || got["gateway"]+got["backend"]+got["wait"] > elapsed {
			t.Errorf("stream=%v: Server-Timing %q after %s; want a wait of at least %s, a backend share, and no more than the client measured", stream, st, elapsed, start)
		}
		if got["gateway"] >= start {
			t.Errorf("stream=%v: Server-Timing %q counts the engine's start as the gateway's own time", stream, st)
		}
	}
}
