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
	"llmgate/internal/router"
	"llmgate/internal/server"
	"llmgate/internal/store"
)

// downResponses is a response store whose database is unreachable.
type downResponses struct{ puts int }

var errDown = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

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
// the failure logged); continuing or reading one gets a 503 that says
// what to do instead, never a 500.
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
	s := server.New(server.Options{Table: router.New(cfg), Verifier: v, Ledger: &recLedger{}, Responses: st,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
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
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "response_store_unavailable") ||
			!strings.Contains(w.Body.String(), "connection refused") || !strings.Contains(w.Body.String(), `"error"`) {
			t.Fatalf("%s %s with the store down: %d %s, want a 503 in the OpenAI envelope", c.method, c.path, w.Code, w.Body)
		}
	}
}
