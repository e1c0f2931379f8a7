package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// An engine restarted with another context (here max_model_len 2048, then
// 4096, with no downtime a check could see) is re-learned at the next
// passed health check: once the first check after the change has run and
// the one after it has begun (the checks of one backend run in sequence,
// so that check's re-asking is over), the gateway's /v1/models and output
// fitting use 4096. Without the re-asking they kept 2048 for the ten
// minutes an answer is kept.
func TestHealthCheck_RelearnsARestartedEnginesContextWithinOneInterval(t *testing.T) {
	var ctxLen, probes atomic.Int64
	ctxLen.Store(2048)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			probes.Add(1)
		case "/v1/models":
			fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm","max_model_len":%d}]}`, ctxLen.Load())
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer be.Close()
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  restarting: {url: %s/v1, health_check: {path: /health, interval: 50ms}}
models:
  m: {backend: restarting}
`, be.URL))

	listed := func() int {
		_, _, body := gw.request("GET", "/v1/models", "")
		var list struct {
			Data []struct {
				ID          string `json:"id"`
				MaxModelLen int    `json:"max_model_len"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Data) != 1 {
			t.Fatalf("/v1/models: %v %s", err, body)
		}
		return list.Data[0].MaxModelLen
	}
	fitted := func(maxTokens int) string {
		t.Helper()
		code, h, body := gw.request("POST", "/v1/chat/completions", fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, maxTokens))
		if code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
		return h.Get("Llmgate-Output-Limit")
	}
	waitProbes := func(n int64) {
		t.Helper()
		waitFor(t, func() bool { return probes.Load() >= n })
	}

	if got := listed(); got != 2048 {
		t.Fatalf("/v1/models max_model_len = %d, want 2048", got)
	}
	if h := fitted(3000); !strings.Contains(h, "context=2048;") {
		t.Fatalf("before the restart: Llmgate-Output-Limit %q, want the 2048 context", h)
	}

	ctxLen.Store(4096) // the engine restarted with -c 4096 between two checks
	p0 := probes.Load()
	waitProbes(p0 + 2)
	if got := listed(); got != 4096 {
		t.Fatalf("after the next health check: /v1/models max_model_len = %d, want 4096", got)
	}
	if h := fitted(5000); !strings.Contains(h, "context=4096;") {
		t.Fatalf("after the next health check: Llmgate-Output-Limit %q, want the 4096 context", h)
	}
	if h := fitted(3000); h != "" {
		t.Fatalf("3000 output tokens fit a 4096 context now, yet the limit was lowered: %q", h)
	}
}
