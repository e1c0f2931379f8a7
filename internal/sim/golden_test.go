package sim

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

var (
	idRE      = regexp.MustCompile(`"(chatcmpl-tool|chatcmpl|cmpl|embd|modelperm)-[0-9a-f]{32}"`)
	createdRE = regexp.MustCompile(`"created":\d+`)
)

// normalizeIDs replaces the random ids and the timestamps of a response.
func normalizeIDs(b []byte) []byte {
	b = idRE.ReplaceAll(b, []byte(`"$1-ID"`))
	return createdRE.ReplaceAll(b, []byte(`"created":0`))
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	got = normalizeIDs(got)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/sim -run Golden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from its golden file\n got: %s\nwant: %s", name, got, want)
	}
}

// goldenConfig is a fast, seeded profile so every response is reproducible.
func goldenConfig() Config {
	mc := fastModel()
	mc.Name, mc.Root = "qwen2.5-7b-instruct", "Qwen/Qwen2.5-7B-Instruct"
	mc.DecodeBase, mc.DecodePerSeq, mc.PrefillBase, mc.PrefillPerToken = time.Millisecond, 0, 0, 0
	mc.MaxModelLen = 64
	mc.MaxQueue = 1
	// A reasoning model, as vLLM serves Qwen3 with --reasoning-parser qwen3.
	q3 := mc
	q3.Name, q3.Root, q3.Preset = "qwen3-32b", "Qwen/Qwen3-32B", "qwen3-32b"
	q3.Reasoning, q3.MeanReasoningTokens, q3.MaxModelLen = true, 4, 512
	return Config{Models: []ModelConfig{mc, q3}, Seed: 7}
}

// goldenTools is a tool list for the tool-call transcripts.
const goldenTools = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"]}}}]`

func TestGolden_ResponseShapesMatchVLLM(t *testing.T) {
	_, url := startServer(t, goldenConfig())
	cases := []struct {
		name, path, body string
		status           int
	}{
		{"chat", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"Say hello"}],"max_tokens":8,"seed":1,"ignore_eos":true}`, 200},
		{"chat_stop", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"Say hello"}],"max_tokens":8,"seed":1,"ignore_eos":true,"stop":["zzz","token"]}`, 200},
		{"chat_stream_usage", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"Say hello"}],"max_tokens":4,"seed":1,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, 200},
		{"chat_stream", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"Say hello"}],"max_tokens":3,"seed":2,"stream":true}`, 200},
		{"completion", "/v1/completions", `{"model":"qwen2.5-7b-instruct","prompt":"Once upon a time","max_tokens":6,"seed":3,"ignore_eos":true}`, 200},
		{"completion_stream_usage", "/v1/completions", `{"model":"qwen2.5-7b-instruct","prompt":"Once upon a time","max_tokens":3,"seed":3,"stream":true,"stream_options":{"include_usage":true}}`, 200},
		{"embedding", "/v1/embeddings", `{"model":"qwen2.5-7b-instruct","input":"hello world"}`, 200},
		{"embedding_base64", "/v1/embeddings", `{"model":"qwen2.5-7b-instruct","input":["hello world"],"encoding_format":"base64"}`, 200},
		{"error_model_not_found", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 404},
		{"error_max_tokens_too_large", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, 400},
		{"error_prompt_too_long", "/v1/completions", `{"model":"qwen2.5-7b-instruct","prompt":"` + strings.Repeat("word ", 60) + `"}`, 400},
		{"error_n", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"hi"}],"n":2}`, 400},
		{"error_stream_options", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, 400},
		{"error_unknown_route", "/v1/nope", `{}`, 404},
		{"error_max_completion_tokens_wins", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":60}`, 400},
		{"chat_max_completion_tokens_wins", "/v1/chat/completions", `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"hi"}],"max_tokens":60,"max_completion_tokens":3,"seed":1,"ignore_eos":true}`, 200},
		{"chat_tool_call", "/v1/chat/completions", `{"model":"qwen3-32b","messages":[{"role":"user","content":"Weather?"}],"tools":` + goldenTools + `,"tool_choice":"required","seed":4,"max_tokens":40,"chat_template_kwargs":{"enable_thinking":false}}`, 200},
		{"chat_tool_call_stream", "/v1/chat/completions", `{"model":"qwen3-32b","messages":[{"role":"user","content":"Weather?"}],"tools":` + goldenTools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"seed":4,"max_tokens":40,"stream":true,"stream_options":{"include_usage":true}}`, 200},
		{"chat_reasoning", "/v1/chat/completions", `{"model":"qwen3-32b","messages":[{"role":"user","content":"Say hello"}],"max_tokens":16,"seed":1}`, 200},
		{"chat_reasoning_stream", "/v1/chat/completions", `{"model":"qwen3-32b","messages":[{"role":"user","content":"Say hello"}],"max_tokens":16,"seed":1,"stream":true,"stream_options":{"include_usage":true}}`, 200},
		{"chat_reasoning_off", "/v1/chat/completions", `{"model":"qwen3-32b","messages":[{"role":"user","content":"Say hello"}],"max_tokens":6,"seed":1,"chat_template_kwargs":{"enable_thinking":false}}`, 200},
		{"embedding_list", "/v1/embeddings", `{"model":"qwen2.5-7b-instruct","input":["hello world","a second input",[1,2,3]],"dimensions":2}`, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := post(t, url+c.path, c.body)
			if code != c.status {
				t.Fatalf("status %d, want %d: %s", code, c.status, body)
			}
			checkGolden(t, c.name, body)
		})
	}
	t.Run("models", func(t *testing.T) {
		code, body := get(t, url+"/v1/models")
		if code != 200 {
			t.Fatalf("status %d", code)
		}
		checkGolden(t, "models", body)
	})
}

func TestGolden_UsageChunkOnlyWhenRequested(t *testing.T) {
	_, url := startServer(t, goldenConfig())
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`, false},
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":false}}`, false},
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, true},
	} {
		res := stream(t, url+"/v1/chat/completions", tc.body)
		last := parseChunk(t, res.events[len(res.events)-1].data)
		got := last.Usage != nil && len(last.Choices) == 0
		if got != tc.want || !res.done {
			t.Errorf("%s: usage chunk %v (want %v), [DONE] %v", tc.body, got, tc.want, res.done)
		}
		if got && (last.Usage.CompletionTokens != 2 || last.Usage.TotalTokens != last.Usage.PromptTokens+2) {
			t.Errorf("usage chunk %+v does not add up", *last.Usage)
		}
	}
}

func TestGolden_MetricsUseVLLMNames(t *testing.T) {
	_, url := startServer(t, goldenConfig())
	post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"ignore_eos":true}`)
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	for _, want := range []string{
		`vllm:num_requests_running{model_name="qwen2.5-7b-instruct",engine="0"} 0.0`,
		`vllm:num_requests_waiting{model_name="qwen2.5-7b-instruct",engine="0"} 0.0`,
		`vllm:generation_tokens_total{model_name="qwen2.5-7b-instruct",engine="0"} 3.0`,
		`vllm:prompt_tokens_total{model_name="qwen2.5-7b-instruct",engine="0"} 9.0`,
		`vllm:request_success_total{model_name="qwen2.5-7b-instruct",engine="0",finished_reason="length"} 1.0`,
		`vllm:time_to_first_token_seconds_count{model_name="qwen2.5-7b-instruct",engine="0"} 1`,
		`vllm:time_per_output_token_seconds_count{model_name="qwen2.5-7b-instruct",engine="0"} 2`,
		`vllm:e2e_request_latency_seconds_count{model_name="qwen2.5-7b-instruct",engine="0"} 1`,
		`vllm:time_to_first_token_seconds_bucket{model_name="qwen2.5-7b-instruct",engine="0",le="+Inf"} 1`,
		"# TYPE vllm:time_to_first_token_seconds histogram",
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestGolden_ContinuousUsageStatsCountTokensSoFar(t *testing.T) {
	_, url := startServer(t, goldenConfig())
	res := stream(t, url+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`)
	want := []int{0, 1, 2, 3, 3} // role chunk, three tokens, final usage chunk
	if len(res.events) != len(want) {
		t.Fatalf("%d events, want %d", len(res.events), len(want))
	}
	for i, ev := range res.events {
		c := parseChunk(t, ev.data)
		if c.Usage == nil || c.Usage.CompletionTokens != want[i] || c.Usage.TotalTokens != c.Usage.PromptTokens+want[i] {
			t.Errorf("chunk %d usage %+v, want %d completion tokens", i, c.Usage, want[i])
		}
	}
}

func TestServer_WrongMethodIs405AndUnknownRouteIs404(t *testing.T) {
	_, url := startServer(t, goldenConfig())
	if code, b := get(t, url+"/v1/chat/completions"); code != 405 || string(b) != `{"detail":"Method Not Allowed"}` {
		t.Errorf("GET chat: %d %s", code, b)
	}
	if code, b := get(t, url+"/nope"); code != 404 || string(b) != `{"detail":"Not Found"}` {
		t.Errorf("unknown route: %d %s", code, b)
	}
}

func TestServer_CompletionEchoPrependsThePrompt(t *testing.T) {
	_, url := startServer(t, goldenConfig())
	_, _, b := post(t, url+"/v1/completions", `{"prompt":"Echo me","max_tokens":2,"echo":true,"seed":1}`)
	if !bytes.Contains(b, []byte(`"text":"Echo me`)) {
		t.Errorf("non-streaming echo: %s", b)
	}
	res := stream(t, url+"/v1/completions", `{"prompt":"Echo me","max_tokens":2,"echo":true,"seed":1,"stream":true}`)
	if len(res.events) != 2 || parseChunk(t, res.events[0].data).Choices[0].Text[:7] != "Echo me" {
		t.Errorf("streaming echo: %d events, first %s", len(res.events), res.events[0].data)
	}
}
