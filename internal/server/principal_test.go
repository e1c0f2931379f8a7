package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/policy"
	"llmgate/internal/relay"
	"llmgate/internal/router"
	"llmgate/internal/server"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

type recLedger struct {
	mu   sync.Mutex
	recs []usage.Record
}

func (l *recLedger) Add(r usage.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}

func (l *recLedger) wait(t *testing.T, n int) []usage.Record {
	t.Helper()
	var recs []usage.Record
	if _, ok := testenv.Poll(5*time.Second, func() bool {
		l.mu.Lock()
		recs = append([]usage.Record(nil), l.recs...)
		l.mu.Unlock()
		return len(recs) >= n
	}); !ok {
		t.Fatalf("ledger has %d records, want %d", len(recs), n)
	}
	return recs
}

// limitOne admits one request per key, then refuses with a 429.
type limitOne struct {
	mu   sync.Mutex
	seen map[string]int
}

type noTicket struct{}

func (noTicket) Done(*usage.Record) {}

func (a *limitOne) Admit(_ context.Context, req policy.AdmitRequest) (policy.Ticket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen[req.Principal.KeyID()]++
	if a.seen[req.Principal.KeyID()] > 1 {
		return nil, apierror.New(http.StatusTooManyRequests, apierror.KindRateLimit, "rate_limit_exceeded", "key "+req.Principal.KeyID()+" is over its limit")
	}
	return noTicket{}, nil
}

func TestWithPrincipal_RequestIsServedAsThatKeyWithoutHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"alpha","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	defer up.Close()
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  up: {url: %s}\nmodels:\n  alpha: {backend: up}\n  beta: {backend: up}\n", up.URL)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	key := &keys.Key{ID: "key_pg", Name: "pg", Hash: keys.Hash(good), Models: []string{"alpha"}}
	v, err := keys.NewVerifier(context.Background(), &memStore{keys: []*keys.Key{key}}, keys.HashBytes(master), nil)
	if err != nil {
		t.Fatal(err)
	}
	led := &recLedger{}
	adm := &limitOne{seen: map[string]int{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := server.New(server.Options{Tables: router.NewCurrent(router.New(cfg)), Verifier: v, Logger: log,
		Relay: relay.New(relay.Options{Ledger: led, Admission: adm, Logger: log})})

	call := func(ctx context.Context, model string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	as := keys.WithPrincipal(context.Background(), keys.Principal{Key: key})

	// No credential header at all: served as the attached key.
	if w := call(as, "alpha"); w.Code != http.StatusOK {
		t.Fatalf("as the key: %d %s", w.Code, w.Body)
	}
	if recs := led.wait(t, 1); recs[0].KeyID != "key_pg" || recs[0].Model != "alpha" || recs[0].Status != 200 {
		t.Fatalf("ledger record %+v, want key_pg, alpha, 200", recs[0])
	}
	// The key's model allow-list applies.
	if w := call(as, "beta"); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), `may not use model \"beta\"`) {
		t.Fatalf("a model outside the allow-list: %d %s, want 403", w.Code, w.Body)
	}
	// So do its limits: the second admitted request is refused.
	if w := call(as, "alpha"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("over the key's limit: %d %s, want 429", w.Code, w.Body)
	}
	if adm.seen["key_pg"] != 2 {
		t.Errorf("admission saw key_pg %d times, want 2", adm.seen["key_pg"])
	}
	// Without the context value a request needs a credential, and an empty
	// principal grants nothing.
	if w := call(context.Background(), "alpha"); w.Code != http.StatusUnauthorized {
		t.Fatalf("no credential: %d, want 401", w.Code)
	}
	if w := call(keys.WithPrincipal(context.Background(), keys.Principal{}), "alpha"); w.Code != http.StatusUnauthorized {
		t.Fatalf("empty principal: %d, want 401", w.Code)
	}
	// A master principal is the master key (no allow-list).
	if w := call(keys.WithPrincipal(context.Background(), keys.Principal{Master: true}), "beta"); w.Code != http.StatusOK {
		t.Fatalf("as master: %d %s", w.Code, w.Body)
	}
	if recs := led.wait(t, 2); recs[len(recs)-1].KeyID != "master" {
		t.Errorf("last record %+v, want key master", recs[len(recs)-1])
	}
}
