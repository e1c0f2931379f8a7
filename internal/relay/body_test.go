package relay_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"llmgate/internal/codec"
	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/relay"
	"llmgate/internal/router"
)

// A passthrough request with nothing to patch goes to the backend as the
// client's own bytes, without a copy: the Call then says the bytes were
// given away (the Transport may read them after the answer), so the edge
// does not reuse them. A patched body (a renamed model) is a new one, and
// the client's bytes stay the edge's.
func TestCall_BodyGivenOnlyWhenTheClientBytesAreSent(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	defer up.Close()
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  b: {url: %s/v1}\nmodels:\n  same: {backend: b}\n  renamed: {backend: b, upstream_model: other}\n", up.URL)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	table := router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer table.Close()
	rl := relay.New(relay.Options{Ledger: &recLedger{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for model, given := range map[string]bool{"same": true, "renamed": false} {
		req, err := codec.Decode(codec.Chat, []byte(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)))
		if err != nil {
			t.Fatal(err)
		}
		c := &relay.Call{ID: "req-" + model, Start: time.Now(), Principal: keys.Principal{Master: true}, Req: req, Table: table}
		w := httptest.NewRecorder()
		rl.Serve(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil), c)
		if w.Code != 200 {
			t.Fatalf("%s: %d %s", model, w.Code, w.Body)
		}
		if c.BodyGiven() != given {
			t.Errorf("model %s: BodyGiven %v, want %v", model, c.BodyGiven(), given)
		}
	}
}
