package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeVLLM is an httptest upstream that answers like vLLM. Its behaviour is
// chosen per model name so one upstream serves every test case.
type fakeVLLM struct {
	*httptest.Server
	mu        sync.Mutex
	bodies    []map[string]any // requests received
	auth      []string
	cancelled chan string // model of a request whose context ended early
}

func newFakeVLLM(t *testing.T) *fakeVLLM {
	f := &fakeVLLM{cancelled: make(chan string, 16)}
	f.Server = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeVLLM) lastBody() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) == 0 {
		return nil
	}
	return f.bodies[len(f.bodies)-1]
}

func (f *fakeVLLM) handle(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"up-a","object":"model","owned_by":"vllm"}]}`)
		return
	case "/models", "/props", "/get_model_info", "/get_server_info", "/api/show":
		http.NotFound(w, r) // the gateway asking for context lengths: not a request to record
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	model, _ := body["model"].(string)
	stream, _ := body["stream"].(bool)
	includeUsage := false
	if so, ok := body["stream_options"].(map[string]any); ok {
		includeUsage, _ = so["include_usage"].(bool)
	}
	if tools, _ := body["tools"].([]any); model == "nojinja" && len(tools) > 0 {
		// llama.cpp's llama-server started without --jinja.
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}`)
		return
	}
	if model == "nojinja" && strings.Contains(string(raw), `"image_url"`) {
		// ... and with a text-only model (no --mmproj).
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"code":500,"message":"image input is not supported - hint: if this is unexpected, you may need to provide the mmproj","type":"server_error"}}`)
		return
	}
	switch model {
	case "err-400":
		w.WriteHeader(400)
		fmt.Fprint(w, `{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}`)
		return
	case "err-500":
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"message":"CUDA out of memory","type":"InternalServerError"}}`)
		return
	case "err-401":
		w.WriteHeader(401)
		fmt.Fprint(w, `{"error":"Unauthorized"}`)
		return
	case "err-429":
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(429)
		fmt.Fprint(w, `{"error":{"message":"slow down","type":"rate_limit"}}`)
		return
	case "no-choices":
		fmt.Fprint(w, `{"error_code":1301,"msg":"content filtered by provider"}`)
		return
	case "error-in-200":
		fmt.Fprint(w, `{"error":{"message":"quota exhausted","code":"insufficient_quota"}}`)
		return
	case "slow":
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			f.cancelled <- model
			return
		}
	}
	if r.URL.Path == "/v1/embeddings" {
		fmt.Fprintf(w, `{"id":"embd-1","object":"list","created":1,"model":%q,"data":[{"index":0,"object":"embedding","embedding":[0.1,0.2]}],"usage":{"prompt_tokens":3,"total_tokens":3,"completion_tokens":0}}`, model)
		return
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"total_tokens":13,"completion_tokens":2}}`, model)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	chunk := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); fl.Flush() }
	head := fmt.Sprintf(`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1,"model":%q,`, model)
	chunk(head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)
	n := 3
	if model == "endless" {
		n = 1000
	}
	for i := 0; i < n; i++ {
		if model == "endless" {
			select {
			case <-r.Context().Done():
				f.cancelled <- model
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		chunk(head + fmt.Sprintf(`"choices":[{"index":0,"delta":{"content":"tok%d "},"logprobs":null,"finish_reason":null}]}`, i))
		if model == "cut" && i == 1 {
			// Die mid-stream: close the connection without [DONE].
			hj, ok := w.(http.Hijacker)
			if ok {
				c, _, _ := hj.Hijack()
				c.Close()
			}
			return
		}
	}
	chunk(head + `"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`)
	// "nousage" models behave like engines that ignore stream_options.
	if includeUsage && model != "nousage" {
		chunk(head + `"choices":[],"usage":{"prompt_tokens":11,"total_tokens":14,"completion_tokens":3}}`)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// sseLines returns the data payloads of an SSE body.
func sseLines(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for _, block := range strings.Split(body, "\n\n") {
		for _, line := range strings.Split(block, "\n") {
			if strings.HasPrefix(line, "data: ") {
				out = append(out, strings.TrimPrefix(line, "data: "))
			}
		}
	}
	return out
}
