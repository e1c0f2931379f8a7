package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/relay"
	"llmgate/internal/respstore"
	"llmgate/internal/router"
	"llmgate/internal/server"
	"llmgate/internal/store"
)

// downResponses is a response store whose database is unreachable.
type downResponses struct{ puts int }

// errDown is what pgx says when PostgreSQL is down: the user, the
// database and the address, none of which a client may read.
var errDown = errors.New("failed to connect to `user=llmgate database=llmgate_prod`: 10.0.0.5:5432 (db.internal): dial error: dial tcp 10.0.0.5:5432: connect: connection refused")

// dbWords are the parts of errDown that must stay in the log.
var dbWords = []string{"llmgate_prod", "user=", "10.0.0.5", "db.internal", "connection refused", "dial"}

// wantDatabaseDown checks a 503 that says what to do in the dialect's
// envelope, names the request id, and holds none of the database's words,
// which the log has under that id.
func wantDatabaseDown(t *testing.T, what string, code int, header http.Header, body string, logs string, wantCode string, anthropic bool) {
	t.Helper()
	if code != http.StatusServiceUnavailable || header.Get("Retry-After") == "" {
		t.Fatalf("%s: %d %s, want a 503 %s", what, code, body, wantCode)
	}
	if anthropic {
		if !strings.HasPrefix(body, `{"type":"error","error":{"type":"overloaded_error"`) {
			t.Fatalf("%s: %s, want Anthropic's error envelope", what, body)
		}
	} else if !strings.HasPrefix(body, `{"error":{`) || !strings.Contains(body, `"code":"`+wantCode+`"`) {
		t.Fatalf("%s: %s, want OpenAI's error envelope with code %s", what, body, wantCode)
	}
	for _, w := range dbWords {
		if strings.Contains(body, w) {
			t.Fatalf("%s: the client reads the database's %q: %s", what, w, body)
		}
	}
	id := header.Get("X-Request-Id")
	if id == "" || !strings.Contains(body, "retry") || !strings.Contains(body, "request "+id) {
		t.Fatalf("%s: %s, want a message that says to retry and names request %q", what, body, id)
	}
	if !strings.Contains(logs, "request_id="+id) || !strings.Contains(logs, "llmgate_prod") {
		t.Fatalf("%s: the log does not hold the cause under request %s:\n%s", what, id, logs)
	}
}

func (d *downResponses) PutResponse(context.Context, store.StoredResponse) error {
	d.puts++
	return errDown
}
func (d *downResponses) GetResponse(context.Context, string, string, time.Time) (*store.StoredResponse, error) {
	return nil, errDown
}
func (d *downResponses) ResponseChain(context.Context, string, string, time.Time) ([]store.StoredResponse, error) {
	return nil, errDown
}
func (d *downResponses) DeleteResponse(context.Context, string, string) (bool, error) {
	return false, errDown
}
func (d *downResponses) PurgeResponses(context.Context, time.Time) (int64, error) { return 0, errDown }

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// With the response store down, a new response is still answered (and
// the failure logged); continuing, reading or deleting one gets a 503 that
// says what to do instead, never a 500, and never the database's words:
// those are in the log under the request id the message names.
func TestResponses_StoreDown(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"alpha","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	defer up.Close()
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  up: {url: %s}\nmodels:\n  alpha: {backend: up}\n", up.URL)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v, err := keys.NewVerifier(context.Background(), &memStore{}, keys.HashBytes(master), nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	st := &downResponses{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	responses := respstore.New(st, 0, log)
	s := server.New(server.Options{Tables: router.NewCurrent(router.New(cfg)), Verifier: v, Logger: log, Responses: responses,
		Relay: relay.New(relay.Options{Ledger: &recLedger{}, Responses: responses, Logger: log})})
	do := func(method, path, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+master)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	if w := do("POST", "/v1/responses", `{"model":"alpha","input":"hi"}`); w.Code != 200 || !strings.Contains(w.Body.String(), `"output_text"`) {
		t.Fatalf("new response with the store down: %d %s, want the answer", w.Code, w.Body)
	}
	if st.puts != 1 || !strings.Contains(logs.String(), "could not store a response") {
		t.Fatalf("store attempts %d, log %q: want one attempt, logged", st.puts, logs.String())
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/responses", `{"model":"alpha","previous_response_id":"resp_x","input":"hi"}`},
		{"GET", "/v1/responses/resp_x", ""},
		{"DELETE", "/v1/responses/resp_x", ""},
	} {
		w := do(c.method, c.path, c.body)
		wantDatabaseDown(t, c.method+" "+c.path+" with the store down", w.Code, w.Header(), w.Body.String(), logs.String(), "response_store_unavailable", false)
	}
}

// downKeys is a key store whose database goes away after the gateway
// loaded its keys.
type downKeys struct {
	memStore
	down bool
}

func (d *downKeys) KeysVersion(ctx context.Context) (int64, error) {
	if d.down {
		return 0, errDown
	}
	return d.memStore.KeysVersion(ctx)
}

// A key the gateway has not loaded is looked up in the database (it may
// have been created a moment ago on another replica). With the database
// down the client learns its key could not be checked - a 503 in its
// dialect's envelope that says to retry - and not the dial error, which
// is in the log; loaded keys keep working from memory.
func TestAuth_UnknownKeyWithTheDatabaseDownIsA503WithoutTheDatabasesWords(t *testing.T) {
	st := &downKeys{memStore: memStore{keys: []*keys.Key{{ID: "key_good", Name: "good", Hash: keys.Hash(good)}}}}
	logs := &syncBuf{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	v, err := keys.NewVerifier(context.Background(), st, keys.HashBytes(master), log)
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Options{Verifier: v, Logger: log, AccessLog: func(e server.AccessEntry) {
		log.Info("access", "request_id", e.RequestID, "status", e.Status, "code", e.Code)
	}})
	st.down = true
	for _, c := range []struct {
		path, body string
		hdr        []string
		anthropic  bool
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[]}`, []string{"Authorization", "Bearer sk-lg-made-on-another-replica-0123"}, false},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[]}`, []string{"x-api-key", "sk-lg-made-on-another-replica-0123", "anthropic-version", "2023-06-01"}, true},
	} {
		r := httptest.NewRequest("POST", c.path, strings.NewReader(c.body))
		for i := 0; i < len(c.hdr); i += 2 {
			r.Header.Set(c.hdr[i], c.hdr[i+1])
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		wantDatabaseDown(t, c.path+" with an unknown key and the database down", w.Code, w.Header(), w.Body.String(), logs.String(), "database_unavailable", c.anthropic)
	}
	if _, err := v.Verify(good); err != nil {
		t.Fatalf("a loaded key with the database down: %v, want it accepted from memory", err)
	}
}
