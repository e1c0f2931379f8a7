package sim

import (
	"encoding/json"
	"llmgate/internal/testenv"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"ignore_eos":true}`

func fastConfig() Config {
	mc := fastModel()
	mc.DecodeBase, mc.DecodePerSeq, mc.PrefillBase, mc.PrefillPerToken = time.Millisecond, 0, 0, 0
	return Config{Models: []ModelConfig{mc}, Seed: 42}
}

func decodeError(t *testing.T, b []byte) errorInfo {
	t.Helper()
	var e errorResponse
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not a vLLM error body: %s", b)
	}
	return e.Error
}

func TestFaults_429RateAnswersThatFractionWithRetryAfter(t *testing.T) {
	cfg := fastConfig()
	cfg.Faults.Fail429Rate = 0.3
	_, url := startServer(t, cfg)
	const n = 300
	got := 0
	for range n {
		code, h, b := post(t, url+"/v1/chat/completions", chatBody)
		switch code {
		case http.StatusTooManyRequests:
			got++
			if e := decodeError(t, b); e.Code != 429 || h.Get("Retry-After") == "" {
				t.Fatalf("429 without code or Retry-After: %s", b)
			}
		case http.StatusOK:
		default:
			t.Fatalf("unexpected status %d: %s", code, b)
		}
	}
	// Binomial(300, 0.3): mean 90, sd 7.9; the bounds are over 4 sd away.
	if got < 55 || got > 125 {
		t.Errorf("%d of %d requests got 429, want about 30%%", got, n)
	}
}

func TestFaults_500RateAnswersThatFraction(t *testing.T) {
	cfg := fastConfig()
	cfg.Faults.Fail500Rate = 1
	_, url := startServer(t, cfg)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		body := chatBody
		if path == "/v1/completions" {
			body = `{"prompt":"x"}`
		} else if path == "/v1/embeddings" {
			body = `{"input":"x"}`
		}
		code, _, b := post(t, url+path, body)
		if code != http.StatusInternalServerError || decodeError(t, b).Type != "InternalServerError" {
			t.Errorf("%s: status %d body %s, want injected 500", path, code, b)
		}
	}
	// /health, /v1/models and /metrics are not generation requests.
	if code, _ := get(t, url+"/v1/models"); code != 200 {
		t.Errorf("/v1/models status %d under fail-500-rate", code)
	}
}

func TestFaults_CutStreamDropsTheConnectionMidway(t *testing.T) {
	cfg := fastConfig()
	cfg.Faults.CutStreamRate = 0.5
	_, url := startServer(t, cfg)
	cut, whole := 0, 0
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"ignore_eos":true,"stream":true}`
	for range 30 {
		res := stream(t, url+"/v1/chat/completions", body)
		tokens := len(res.tokenTimes(t))
		if res.done {
			whole++
			if tokens != 10 || res.err != nil {
				t.Fatalf("complete stream had %d tokens, err %v", tokens, res.err)
			}
			continue
		}
		cut++
		if res.err == nil {
			t.Error("cut stream ended cleanly; want an unexpected EOF")
		}
		if tokens < 1 || tokens >= 10 {
			t.Errorf("cut stream delivered %d of 10 tokens, want a cut mid-way", tokens)
		}
		for _, ev := range res.events {
			if c := parseChunk(t, ev.data); len(c.Choices) == 1 && c.Choices[0].FinishReason != nil {
				t.Error("cut stream carried a finish_reason")
			}
		}
	}
	if cut == 0 || whole == 0 {
		t.Errorf("cut %d, whole %d of 30 at rate 0.5", cut, whole)
	}
}

func TestFaults_StartupDelayKeepsHealthAt503(t *testing.T) {
	cfg := fastConfig()
	cfg.StartupDelay = 300 * time.Millisecond
	s, url := startServer(t, cfg)
	if code, _ := get(t, url+"/health"); code != http.StatusServiceUnavailable {
		t.Fatalf("/health = %d during startup, want 503", code)
	}
	code, h, b := post(t, url+"/v1/chat/completions", chatBody)
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(decodeError(t, b).Message, "/health") {
		t.Fatalf("chat during startup: %d %s", code, b)
	}
	testenv.Eventually(t, 5*time.Second, s.Ready, "ready after a 300ms startup")
	if code, _ := get(t, url+"/health"); code != http.StatusOK {
		t.Fatalf("/health = %d after startup, want 200", code)
	}
	if code, _, b := post(t, url+"/v1/chat/completions", chatBody); code != 200 {
		t.Fatalf("chat after startup: %d %s", code, b)
	}
}

func TestFaults_APIKeyGuardsV1LikeVLLM(t *testing.T) {
	cfg := fastConfig()
	cfg.APIKey = "sk-sim"
	_, url := startServer(t, cfg)
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "sk-sim"}} {
		code, _, b := post(t, url+"/v1/chat/completions", chatBody, hdr...)
		if code != http.StatusUnauthorized || string(b) != `{"error":"Unauthorized"}` {
			t.Errorf("header %v: %d %s, want 401 {\"error\":\"Unauthorized\"}", hdr, code, b)
		}
	}
	if code, _, b := post(t, url+"/v1/chat/completions", chatBody, "Authorization", "Bearer sk-sim"); code != 200 {
		t.Errorf("right key: %d %s", code, b)
	}
	for _, path := range []string{"/health", "/metrics", "/version"} {
		if code, _ := get(t, url+path); code != 200 {
			t.Errorf("%s needs no key in vLLM, got %d", path, code)
		}
	}
	if code, _ := get(t, url+"/v1/models"); code != http.StatusUnauthorized {
		t.Errorf("/v1/models without key: %d, want 401", code)
	}
}

func TestFaults_MaxModelLenOverflowIs400WithVLLMText(t *testing.T) {
	cfg := fastConfig()
	cfg.Models[0].MaxModelLen = 100
	_, url := startServer(t, cfg)
	code, _, b := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":95}`)
	e := decodeError(t, b)
	if code != 400 || e.Type != "BadRequestError" || e.Code != 400 ||
		!strings.Contains(e.Message, "This model's maximum context length is 100 tokens and your request has 9 input tokens (95 > 100 - 9)") {
		t.Errorf("overflow: %d %s", code, b)
	}
	if code, _, b := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":91}`); code != 200 {
		t.Errorf("exact fit rejected: %d %s", code, b)
	}
}

func TestFaults_QueueFullIsRejectedWith503Or429(t *testing.T) {
	for _, status := range []int{503, 429} {
		cfg := fastConfig()
		cfg.QueueFullStatus = status
		cfg.Models[0].MaxNumSeqs, cfg.Models[0].MaxQueue = 1, 1
		cfg.Models[0].DecodeBase = 2 * time.Millisecond
		s, url := startServer(t, cfg)
		long := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":60,"ignore_eos":true}`
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); post(t, url+"/v1/chat/completions", long) }()
		waitLoad(t, s, 1, 0)
		wg.Add(1)
		go func() { defer wg.Done(); post(t, url+"/v1/chat/completions", long) }()
		waitLoad(t, s, 1, 1)
		code, h, b := post(t, url+"/v1/chat/completions", chatBody)
		if code != status || decodeError(t, b).Code != status || h.Get("Retry-After") == "" ||
			!strings.Contains(string(b), "queue") {
			t.Errorf("queue full: %d %s, want %d", code, b, status)
		}
		wg.Wait()
	}
}

// waitLoad polls until the model has the given running and waiting counts.
func waitLoad(t *testing.T, s *Server, running, waiting int) {
	t.Helper()
	if _, ok := testenv.Poll(5*time.Second, func() bool {
		r, w, _ := s.Load("m")
		return r == running && w == waiting
	}); ok {
		return
	}
	r, w, _ := s.Load("m")
	t.Fatalf("load stayed at running %d waiting %d, want %d/%d", r, w, running, waiting)
}
