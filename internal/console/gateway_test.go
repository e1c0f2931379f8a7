package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/ledger"
	"llmgate/internal/testenv"
	"llmgate/internal/testenv/testdb"
	"llmgate/internal/usage"
)

// TestPlayground_ThroughTheGatewayRunsAsTheSessionKeyWithoutItsSecret signs
// in to a real gateway's console and uses the playground: the request is
// served as the signed-in key (allow-list, rate limit, ledger) although the
// console never kept the key's secret.
func TestPlayground_ThroughTheGatewayRunsAsTheSessionKeyWithoutItsSecret(t *testing.T) {
	const master = "sk-lg-console-gw-master"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); strings.Contains(got, "sk-lg-") {
			t.Errorf("the backend received an llmgate key: %q", got)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"alpha","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	defer up.Close()
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  up: {url: %s}\nmodels:\n  alpha: {backend: up}\n  beta: {backend: up}\n", up.URL)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = testdb.SQLite(t, t.TempDir(), "gw.db")
	cfg.Listen = "127.0.0.1:0"
	t.Setenv("LLMGATE_CONSOLE", "on")
	g, err := gateway.Start(context.Background(), gateway.Options{Config: cfg, MasterKey: master,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	base := "http://" + g.Addr
	type browser struct{ cookie, csrf string }
	do := func(b *browser, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", base)
		if b.cookie != "" {
			req.AddCookie(&http.Cookie{Name: "llmgate_session", Value: b.cookie})
			req.Header.Set("X-CSRF-Token", b.csrf)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		for _, ck := range resp.Cookies() {
			if ck.Name == "llmgate_session" {
				b.cookie = ck.Value
			}
		}
		var m struct{ CSRF string }
		if json.Unmarshal(out, &m) == nil && m.CSRF != "" {
			b.csrf = m.CSRF
		}
		return resp.StatusCode, string(out)
	}
	admin := &browser{}
	if st, body := do(admin, "/ui/api/login", `{"key":"`+master+`"}`); st != 200 {
		t.Fatalf("admin sign-in: %d %s", st, body)
	}
	st, body := do(admin, "/ui/api/keys", `{"name":"pg","models":["alpha"],"rpm":1}`)
	var created struct {
		Key    struct{ ID string }
		Secret string
	}
	if err := json.Unmarshal([]byte(body), &created); st != http.StatusCreated || err != nil || created.Secret == "" {
		t.Fatalf("create key: %d %s", st, body)
	}
	user := &browser{}
	if st, body := do(user, "/ui/api/login", `{"key":"`+created.Secret+`"}`); st != 200 {
		t.Fatalf("user sign-in: %d %s", st, body)
	}
	chat := func(model string) (int, string) {
		return do(user, "/ui/api/chat", `{"model":"`+model+`","messages":[{"role":"user","content":"ping"}]}`)
	}
	if st, body := chat("alpha"); st != 200 || !strings.Contains(body, "pong") {
		t.Fatalf("playground as the key: %d %s", st, body)
	}
	if st, body := chat("beta"); st != http.StatusForbidden || !strings.Contains(body, "may not use model") {
		t.Fatalf("playground, model outside the key's allow-list: %d %s, want 403", st, body)
	}
	if st, body := chat("alpha"); st != http.StatusTooManyRequests {
		t.Fatalf("playground over the key's 1 rpm: %d %s, want 429", st, body)
	}
	var recs []usage.Record
	if _, ok := testenv.Poll(5*time.Second, func() (ok bool) {
		var err error
		if recs, err = g.Store.Recent(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.KeyID == created.Key.ID && r.Model == "alpha" && r.Status == 200 && r.PromptTokens == 3 {
				ok = true
			}
			if r.KeyID == "master" {
				t.Fatalf("a playground request was recorded as the master key: %+v", r)
			}
		}
		return ok
	}); !ok {
		t.Fatalf("no ledger record of key %s for the playground request; have %+v", created.Key.ID, recs)
	}
}
