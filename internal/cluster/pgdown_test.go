package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/testenv"
)

// PostgreSQL goes away under a running gateway: a virtual key continuing a
// stored conversation, reading a stored response, or presenting a key the
// gateway has not loaded gets a 503 in its dialect's envelope that says to
// retry - and none of the database's words (the dial error names the
// user, the database and the address); the log has them.
func TestPostgresDown_AVirtualKeyReadsNoneOfTheDatabasesWords(t *testing.T) {
	pg := testenv.Postgres(t)
	u, _ := url.Parse(pg)
	px := newProxy(t, u.Host)
	u.Host = px.addr
	up := newUpstream(t, 0, 5)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  up: {url: %q}\nmodels:\n  m: {backend: up}\n", up.URL+"/v1")), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database, cfg.Listen, cfg.SpoolDir = u.String(), "127.0.0.1:0", filepath.Join(t.TempDir(), "spool")
	logs := &testenv.SyncBuffer{}
	g, err := gateway.Start(context.Background(), gateway.Options{Config: cfg, MasterKey: master,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), LedgerOptions: ledger.Options{Interval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Restore() // the ledger flushes its spool before the gateway closes
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	_, secret, err := gateway.CreateKey(context.Background(), g.Store, keys.Key{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Verifier.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	do := func(method, path, body string, hdr ...string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+g.Addr+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	st, _, body := do("POST", "/v1/responses", `{"model":"m","input":"first"}`, "Authorization", "Bearer "+secret)
	var first struct{ ID string }
	_ = json.Unmarshal([]byte(body), &first)
	if st != 200 || first.ID == "" {
		t.Fatalf("first turn: %d %s", st, body)
	}

	px.Cut()
	words := []string{"user=", "database=", u.Path[1:], px.addr, "dial", "refused", "postgres"}
	for _, c := range []struct {
		what, method, path, body string
		hdr                      []string
		anthropic                bool
	}{
		{"continue a conversation", "POST", "/v1/responses", `{"model":"m","previous_response_id":"` + first.ID + `","input":"second"}`, []string{"Authorization", "Bearer " + secret}, false},
		{"read a stored response", "GET", "/v1/responses/" + first.ID, "", []string{"Authorization", "Bearer " + secret}, false},
		{"a key not loaded yet (OpenAI)", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, []string{"Authorization", "Bearer sk-lg-not-loaded-yet-0123456789"}, false},
		{"a key not loaded yet (Anthropic)", "POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, []string{"x-api-key", "sk-lg-not-loaded-yet-0123456789", "anthropic-version", "2023-06-01"}, true},
	} {
		st, h, body := do(c.method, c.path, c.body, c.hdr...)
		id := h.Get("X-Request-Id")
		envelope := strings.HasPrefix(body, `{"error":{`)
		if c.anthropic {
			envelope = strings.HasPrefix(body, `{"type":"error","error":{"type":"overloaded_error"`)
		}
		if st != http.StatusServiceUnavailable || !envelope || !strings.Contains(body, "retry") || id == "" || !strings.Contains(body, id) {
			t.Fatalf("%s with PostgreSQL down: %d %s, want a 503 in the dialect's envelope that says to retry and names request %q", c.what, st, body, id)
		}
		for _, w := range words {
			if strings.Contains(strings.ToLower(body), strings.ToLower(w)) {
				t.Fatalf("%s with PostgreSQL down: the client reads the database's %q: %s", c.what, w, body)
			}
		}
	}
	// A loaded key still gets answers: keys are verified from memory, and
	// usage waits in the spool.
	if st, _, body := do("POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer "+secret); st != 200 {
		t.Fatalf("chat with PostgreSQL down: %d %s", st, body)
	}
	if !strings.Contains(logs.String(), "dial") {
		t.Fatalf("the log lacks the database's error:\n%s", logs)
	}
}
