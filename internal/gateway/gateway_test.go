package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/testenv"
	"llmgate/internal/testenv/testdb"
	"llmgate/internal/usage"
)

const testMaster = "sk-lg-test-master-key"

type env struct {
	t    *testing.T
	g    *Gateway
	up   *fakeVLLM
	base string
	db   string
}

// startEnv starts a gateway in front of a fake vLLM, a closed port and a
// backend with a short time-out.
func startEnv(t *testing.T, mutate ...func(*config.Config)) *env {
	t.Helper()
	up := newFakeVLLM(t)
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	src := fmt.Sprintf(`
backends:
  vllm: {url: %s, api_key: sk-upstream}
  dead: {url: %s}
  slowbe: {url: %s/v1, timeout: 300ms}
models:
  qwen: {backend: vllm, upstream_model: up-a}
  nousage: {backend: vllm}
  cut: {backend: vllm}
  endless: {backend: vllm}
  slow: {backend: vllm}
  slow-timeout: {backend: slowbe, upstream_model: slow}
  err-400: {backend: vllm}
  err-500: {backend: vllm}
  err-401: {backend: vllm}
  err-429: {backend: vllm}
  nojinja: {backend: vllm}
  no-choices: {backend: vllm}
  error-in-200: {backend: vllm}
  offline: {backend: dead}
  embed: {backend: vllm}
`, up.URL, deadURL, up.URL)
	cfg, err := config.Load(strings.NewReader(src), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = testdb.SQLite(t, t.TempDir(), "llmgate.db")
	cfg.Listen = "127.0.0.1:0"
	for _, m := range mutate {
		m(cfg)
	}
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, g: g, up: up, base: g.URL(), db: cfg.Database}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return e
}

type result struct {
	status int
	header http.Header
	body   string
}

func (e *env) do(method, path, key string, body string, hdr ...string) result {
	e.t.Helper()
	req, _ := http.NewRequest(method, "http://"+e.g.Addr+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func chatBody(model string, stream bool, extra string) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"Say hello to the gateway"}]%s}`, model, stream, extra)
}

// records waits for n ledger records and returns them newest first.
func (e *env) records(n int) []usage.Record {
	e.t.Helper()
	var recs []usage.Record
	if _, ok := testenv.Poll(5*time.Second, func() bool {
		var err error
		if recs, err = e.g.Store.Recent(context.Background(), 1000); err != nil {
			e.t.Fatal(err)
		}
		return len(recs) >= n
	}); !ok {
		e.t.Fatalf("ledger has %d records, want %d", len(recs), n)
	}
	return recs
}

func TestGateway_RoutesByModelAndRewritesUpstreamName(t *testing.T) {
	e := startEnv(t)
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", false, ""))
	if r.status != 200 || !strings.Contains(r.body, `"choices"`) {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	if got := e.up.lastBody()["model"]; got != "up-a" {
		t.Fatalf("upstream got model %v, want up-a", got)
	}
	if got := e.up.auth[len(e.up.auth)-1]; got != "Bearer sk-upstream" {
		t.Fatalf("upstream auth = %q, want the backend's key, not the client's", got)
	}
	if r.header.Get("X-Request-Id") == "" {
		t.Fatal("no X-Request-Id in response")
	}
	rec := e.records(1)[0]
	if rec.Model != "qwen" || rec.Backend != "vllm" || rec.UpstreamModel != "up-a" || rec.Status != 200 ||
		rec.PromptTokens != 11 || rec.CompletionTokens != 2 || rec.Estimated || rec.KeyID != "master" || rec.Latency <= 0 {
		t.Fatalf("record = %+v", rec)
	}
}

func TestGateway_StreamWithoutClientUsage_HidesUsageChunkButRecordsIt(t *testing.T) {
	e := startEnv(t)
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", true, ""))
	if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream" || r.header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("status %d headers %v", r.status, r.header)
	}
	so, _ := e.up.lastBody()["stream_options"].(map[string]any)
	if so["include_usage"] != true {
		t.Fatalf("upstream was not asked for usage: %v", e.up.lastBody())
	}
	lines := sseLines(t, r.body)
	if lines[len(lines)-1] != "[DONE]" {
		t.Fatalf("stream did not end with [DONE]: %q", lines)
	}
	for _, l := range lines {
		if strings.Contains(l, `"usage"`) {
			t.Fatalf("client that did not ask got a usage chunk: %s", l)
		}
	}
	rec := e.records(1)[0]
	if rec.PromptTokens != 11 || rec.CompletionTokens != 3 || rec.Estimated || !rec.Stream || rec.TTFT <= 0 {
		t.Fatalf("record = %+v", rec)
	}
}

func TestGateway_StreamWithClientUsage_KeepsUsageChunk(t *testing.T) {
	e := startEnv(t)
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", true, `,"stream_options":{"include_usage":true}`))
	lines := sseLines(t, r.body)
	if len(lines) < 2 || !strings.Contains(lines[len(lines)-2], `"usage":{"prompt_tokens":11`) {
		t.Fatalf("usage chunk missing: %q", lines)
	}
	if rec := e.records(1)[0]; rec.CompletionTokens != 3 || rec.Estimated {
		t.Fatalf("record = %+v", rec)
	}
}

func TestGateway_StreamOptionsWithoutUsage_IsCompleted(t *testing.T) {
	e := startEnv(t)
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", true, `,"stream_options":{"include_usage":false}`))
	if strings.Contains(r.body, `"usage"`) {
		t.Fatalf("usage chunk leaked to a client that said include_usage false")
	}
	so, _ := e.up.lastBody()["stream_options"].(map[string]any)
	if so["include_usage"] != true {
		t.Fatalf("upstream stream_options = %v", so)
	}
	if rec := e.records(1)[0]; rec.CompletionTokens != 3 || rec.Estimated {
		t.Fatalf("record = %+v", rec)
	}
}

func TestGateway_BackendIgnoringStreamOptions_UsageEstimatedAndMarked(t *testing.T) {
	e := startEnv(t)
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("nousage", true, ""))
	if r.status != 200 || !strings.HasSuffix(strings.TrimSpace(r.body), "data: [DONE]") {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	rec := e.records(1)[0]
	if !rec.Estimated || rec.PromptTokens <= 0 || rec.CompletionTokens <= 0 {
		t.Fatalf("record should carry estimated usage: %+v", rec)
	}
}

func TestGateway_StreamCutMidway_BecomesErrorEvent(t *testing.T) {
	e := startEnv(t)
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("cut", true, ""))
	lines := sseLines(t, r.body)
	last := lines[len(lines)-1]
	if !strings.Contains(last, `"error"`) || !strings.Contains(last, "stream_cut") || !strings.Contains(last, `backend \"vllm\"`) {
		t.Fatalf("last event %q, want an error event naming the backend", last)
	}
	for _, l := range lines {
		if l == "[DONE]" {
			t.Fatal("a cut stream must not end with [DONE]")
		}
	}
	rec := e.records(1)[0]
	if rec.Status != 502 || rec.ErrorType != "stream_cut" || !rec.Estimated || rec.CompletionTokens == 0 {
		t.Fatalf("record = %+v", rec)
	}
}

func TestGateway_ClientDisconnect_CancelsUpstreamAndRecordsUsage(t *testing.T) {
	e := startEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.base+"/chat/completions", strings.NewReader(chatBody("endless", true, "")))
	req.Header.Set("Authorization", "Bearer "+testMaster)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	n := 0
	for n < 400 { // read a few chunks, then hang up
		m, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	cancel()
	resp.Body.Close()
	select {
	case m := <-e.up.cancelled:
		if m != "endless" {
			t.Fatalf("cancelled %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client went away")
	}
	rec := e.records(1)[0]
	if rec.Status != 499 || !rec.Estimated || rec.CompletionTokens == 0 {
		t.Fatalf("record = %+v", rec)
	}
}

func TestGateway_NonStreamClientDisconnect_CancelsUpstream(t *testing.T) {
	e := startEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.base+"/chat/completions", strings.NewReader(chatBody("slow", false, "")))
	req.Header.Set("Authorization", "Bearer "+testMaster)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("expected the client time-out")
	}
	select {
	case <-e.up.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream not cancelled")
	}
	if rec := e.records(1)[0]; rec.Status != 499 {
		t.Fatalf("record = %+v", rec)
	}
}

func TestGateway_Embeddings(t *testing.T) {
	e := startEnv(t)
	r := e.do("POST", "/v1/embeddings", testMaster, `{"model":"embed","input":"hi"}`)
	if r.status != 200 || !strings.Contains(r.body, `"embedding"`) {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	if rec := e.records(1)[0]; rec.Endpoint != "embeddings" || rec.PromptTokens != 3 {
		t.Fatalf("record = %+v", rec)
	}
}

func TestGateway_ModelsListsEveryModelWithBackend(t *testing.T) {
	e := startEnv(t)
	r := e.do("GET", "/v1/models", testMaster, "")
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		}
	}
	_ = json.Unmarshal([]byte(r.body), &list)
	var found bool
	for _, m := range list.Data {
		if m.ID == "qwen" {
			found = m.OwnedBy == "vllm"
		}
	}
	if r.status != 200 || !found || len(list.Data) != 15 {
		t.Fatalf("status %d models %+v", r.status, list.Data)
	}
}

func TestGateway_XAPIKeyAndVirtualKeys(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	k, secret, err := CreateKey(context.Background(), e.g.Store, keys.Key{Name: "app", Models: []string{"qwen*"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.g.Verifier.Reload(context.Background())
	r := e.do("POST", "/v1/chat/completions", "", chatBody("qwen", false, ""), "x-api-key", secret)
	if r.status != 200 {
		t.Fatalf("x-api-key: status %d %s", r.status, r.body)
	}
	if rec := e.records(1)[0]; rec.KeyID != k.ID {
		t.Fatalf("record key %q, want %q", rec.KeyID, k.ID)
	}
	r = e.do("POST", "/v1/chat/completions", secret, chatBody("err-500", false, ""))
	if r.status != 403 || !strings.Contains(r.body, "may not use model") {
		t.Fatalf("allow-list: status %d %s", r.status, r.body)
	}
	// count_tokens obeys the allow-list too, in the Anthropic envelope.
	r = e.do("POST", "/v1/messages/count_tokens", secret, `{"model":"err-500","messages":[{"role":"user","content":"hi"}]}`)
	if r.status != 403 || !strings.Contains(r.body, `"type":"error"`) || !strings.Contains(r.body, "may not use model") {
		t.Fatalf("count_tokens outside the allow-list: status %d %s", r.status, r.body)
	}
	if r = e.do("POST", "/v1/messages/count_tokens", secret, `{"model":"qwen","messages":[{"role":"user","content":"hi"}]}`); r.status != 200 || !strings.Contains(r.body, "input_tokens") {
		t.Fatalf("count_tokens on an allowed model: status %d %s", r.status, r.body)
	}
	r = e.do("GET", "/v1/models", secret, "")
	if strings.Contains(r.body, "err-500") || !strings.Contains(r.body, `"qwen"`) {
		t.Fatalf("models for a restricted key: %s", r.body)
	}
	if err := e.g.Store.RevokeKey(context.Background(), k.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The verifier's watcher picks the revocation up within a second.
	deadline := time.Now().Add(3 * time.Second)
	for {
		r = e.do("POST", "/v1/chat/completions", secret, chatBody("qwen", false, ""))
		if r.status == 401 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.status != 401 || !strings.Contains(r.body, "revoked") {
		t.Fatalf("revoked key: status %d %s", r.status, r.body)
	}
}

// TestGateway_Errors checks every error of the issue: status, envelope and
// a message that says what to do.
func TestGateway_Errors(t *testing.T) {
	t.Parallel()
	e := startEnv(t, func(c *config.Config) { c.MaxBodyBytes = 1 << 20 })
	big := chatBody("qwen", false, `,"pad":"`+strings.Repeat("x", 2<<20)+`"`)
	cases := []struct {
		name, path, key, body string
		hdr                   []string
		status                int
		typ                   string
		want                  []string
	}{
		{"missing key", "/v1/chat/completions", "", chatBody("qwen", false, ""), nil, 401, "authentication_error", []string{"missing API key", "Authorization: Bearer"}},
		{"Bearer with colon", "/v1/chat/completions", "", chatBody("qwen", false, ""), []string{"Authorization", "Bearer: " + testMaster}, 401, "authentication_error", []string{"remove the colon"}},
		{"bare key", "/v1/chat/completions", "", chatBody("qwen", false, ""), []string{"Authorization", testMaster}, 401, "authentication_error", []string{"bare key without the Bearer scheme"}},
		{"unknown key", "/v1/chat/completions", "sk-lg-nope-nope-nope", chatBody("qwen", false, ""), nil, 401, "authentication_error", []string{"invalid API key", "llmgate keys create"}},
		{"backend key used", "/v1/chat/completions", "sk-proj-abcdefghijkl", chatBody("qwen", false, ""), nil, 401, "authentication_error", []string{"a backend's own key does not work here"}},
		{"unknown model", "/v1/chat/completions", testMaster, chatBody("qwne", false, ""), nil, 404, "invalid_request_error", []string{`model "qwne" is not served by this gateway; did you mean "qwen"? Available models: `}},
		{"missing model", "/v1/chat/completions", testMaster, `{"messages":[]}`, nil, 400, "invalid_request_error", []string{`no "model" field`}},
		{"v1 twice", "/v1/v1/chat/completions", testMaster, chatBody("qwen", false, ""), nil, 404, "invalid_request_error", []string{"/v1 twice", "base URL already ends in /v1"}},
		{"no v1", "/chat/completions", testMaster, chatBody("qwen", false, ""), nil, 404, "invalid_request_error", []string{"lacks the /v1 prefix"}},
		{"malformed JSON", "/v1/chat/completions", testMaster, `{"model": "qwen",, }`, nil, 400, "invalid_request_error", []string{"not valid JSON", "byte offset 18"}},
		{"body too large", "/v1/chat/completions", testMaster, big, nil, 413, "invalid_request_error", []string{"larger than the gateway's limit of 1 MiB", "max_body_bytes"}},
		{"backend refused", "/v1/chat/completions", testMaster, chatBody("offline", false, ""), nil, 502, "upstream_error", []string{`backend "dead" refused the connection`}},
		{"backend timeout", "/v1/chat/completions", testMaster, chatBody("slow-timeout", false, ""), nil, 504, "timeout_error", []string{`backend "slowbe"`, "did not answer in time"}},
		{"200 without choices", "/v1/chat/completions", testMaster, chatBody("no-choices", false, ""), nil, 502, "upstream_error", []string{`answered 200 but its body has no "choices"`, "content filtered by provider"}},
		{"200 with error body", "/v1/chat/completions", testMaster, chatBody("error-in-200", false, ""), nil, 502, "upstream_error", []string{"answered 200 with an error", "quota exhausted"}},
		{"upstream 400 kept", "/v1/chat/completions", testMaster, chatBody("err-400", false, ""), nil, 400, "invalid_request_error", []string{"maximum context length"}},
		{"upstream 500", "/v1/chat/completions", testMaster, chatBody("err-500", false, ""), nil, 502, "upstream_error", []string{`backend "vllm" failed (500`, "CUDA out of memory"}},
		{"upstream 401", "/v1/chat/completions", testMaster, chatBody("err-401", false, ""), nil, 502, "upstream_error", []string{"rejected the gateway's credentials", "backends.vllm.api_key"}},
		{"upstream 429", "/v1/chat/completions", testMaster, chatBody("err-429", false, ""), nil, 429, "rate_limit_error", []string{"rate limiting"}},
		{"wrong method", "/v1/chat/completions", testMaster, "", nil, 405, "invalid_request_error", []string{"use POST"}},
		{"empty body", "/v1/chat/completions", testMaster, "", nil, 400, "invalid_request_error", []string{"body is empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := "POST"
			if c.name == "wrong method" {
				method = "GET"
			}
			r := e.do(method, c.path, c.key, c.body, c.hdr...)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			var env struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(r.body), &env); err != nil || env.Error.Message == "" || env.Error.Code == nil {
				t.Fatalf("not an OpenAI error envelope: %s", r.body)
			}
			if env.Error.Type != c.typ {
				t.Errorf("type %q, want %q", env.Error.Type, c.typ)
			}
			for _, w := range c.want {
				if !strings.Contains(env.Error.Message, w) {
					t.Errorf("message %q lacks %q", env.Error.Message, w)
				}
			}
			if strings.Contains(r.body, testMaster) || strings.Contains(r.body, "sk-upstream") {
				t.Errorf("a key leaked into the error: %s", r.body)
			}
			if c.status == 429 && r.header.Get("Retry-After") != "7" {
				t.Errorf("Retry-After = %q", r.header.Get("Retry-After"))
			}
		})
	}
}

func TestGateway_ShutdownFlushesLedger(t *testing.T) {
	up := newFakeVLLM(t)
	cfg, _ := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  v: {url: %s}\nmodels:\n  m: {backend: v}\n", up.URL)), "t")
	cfg.Database = testdb.SQLite(t, t.TempDir(), "l.db")
	cfg.Listen = "127.0.0.1:0"
	// A long flush interval: only the shutdown flush can write the records.
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		LedgerOptions: ledger.Options{Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 25; i++ {
		req, _ := http.NewRequest("POST", g.URL()+"/chat/completions", bytes.NewBufferString(chatBody("m", i%2 == 0, "")))
		req.Header.Set("Authorization", "Bearer "+testMaster)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(context.Background(), cfg.Database)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, _ := st.Recent(context.Background(), 100)
	if len(recs) != 25 {
		t.Fatalf("after shutdown the ledger has %d records, want 25", len(recs))
	}
}

func TestGateway_MasterKeyGeneratedOnceAndOnlyHashStored(t *testing.T) {
	t.Setenv("LLMGATE_MASTER_KEY", "")
	cfg := &config.Config{Database: filepath.Join(t.TempDir(), "m.db"), Listen: "127.0.0.1:0"}
	cfg.ApplyDefaults()
	var notice bytes.Buffer
	g, err := Start(context.Background(), Options{Config: cfg, Notice: &notice, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	secret := ""
	for _, f := range strings.Fields(notice.String()) {
		if strings.HasPrefix(f, keys.Prefix) {
			secret = f
		}
	}
	if secret == "" {
		t.Fatalf("no key printed: %q", notice.String())
	}
	stored, _ := g.Store.GetSetting(context.Background(), masterSetting)
	if stored != keys.Hash(secret) || strings.Contains(stored, secret) {
		t.Fatalf("stored %q is not the hash of the printed key", stored)
	}
	if _, err := g.Verifier.Verify(secret); err != nil {
		t.Fatalf("printed master key does not work: %v", err)
	}
	g.Close(context.Background())
	notice.Reset()
	g2, err := Start(context.Background(), Options{Config: cfg, Notice: &notice, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close(context.Background())
	if notice.Len() != 0 {
		t.Fatalf("second start printed a key again: %q", notice.String())
	}
	if _, err := g2.Verifier.Verify(secret); err != nil {
		t.Fatalf("master key lost across restart: %v", err)
	}
}

// TestGateway_MasterKeyNotGeneratedWhenTheListenFails: with the port taken,
// serve used to print "Generated master key (shown once)", store its hash
// and then fail; the next successful start printed no key, and the key was
// lost. Now nothing is generated until the listener is open.
func TestGateway_MasterKeyNotGeneratedWhenTheListenFails(t *testing.T) {
	t.Setenv("LLMGATE_MASTER_KEY", "")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Database: filepath.Join(t.TempDir(), "m.db"), Listen: taken.Addr().String()}
	cfg.ApplyDefaults()
	var notice bytes.Buffer
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := Start(context.Background(), Options{Config: cfg, Notice: &notice, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("start on a taken port: %v", err)
	}
	if notice.Len() != 0 {
		t.Fatalf("a start that cannot serve printed: %q", notice.String())
	}
	taken.Close()
	g, err := Start(context.Background(), Options{Config: cfg, Notice: &notice, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	if !strings.Contains(notice.String(), "Generated master key") {
		t.Fatalf("the first start that serves must print the new master key, printed: %q", notice.String())
	}
}

// A spool that cannot be opened stops the start before a master key is
// generated: the next start that serves prints it.
func TestGateway_MasterKeyNotGeneratedWhenTheSpoolFails(t *testing.T) {
	t.Setenv("LLMGATE_MASTER_KEY", "")
	dir := t.TempDir()
	notDir := filepath.Join(dir, "spool-is-a-file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Database: filepath.Join(dir, "m.db"), Listen: "127.0.0.1:0", SpoolDir: notDir}
	cfg.ApplyDefaults()
	var notice bytes.Buffer
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := Start(context.Background(), Options{Config: cfg, Notice: &notice, Logger: quiet}); err == nil {
		t.Fatal("started with a spool_dir that is a file")
	}
	if notice.Len() != 0 {
		t.Fatalf("a start that cannot serve printed: %q", notice.String())
	}
	cfg.SpoolDir = filepath.Join(dir, "spool")
	g, err := Start(context.Background(), Options{Config: cfg, Notice: &notice, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	if !strings.Contains(notice.String(), "Generated master key") {
		t.Fatalf("the first start that serves must print the new master key, printed: %q", notice.String())
	}
}

// TestLedger_DuplicateClientRequestIDsAreSeparateRecords: five requests
// with the same X-Request-Id used to leave one ledger record (the client's
// id was the key). Each now has its own gateway-made id; the client's id
// is echoed and stored beside it.
func TestLedger_DuplicateClientRequestIDsAreSeparateRecords(t *testing.T) {
	e := startEnv(t)
	for i := 0; i < 5; i++ {
		r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", i%2 == 1, ""), "X-Request-Id", "same-id")
		if r.status != 200 || r.header.Get("X-Request-Id") != "same-id" {
			t.Fatalf("request %d: %d, X-Request-Id %q", i, r.status, r.header.Get("X-Request-Id"))
		}
	}
	recs := e.records(5)
	ids := map[string]bool{}
	for _, r := range recs {
		if r.ClientRequestID != "same-id" || !usage.IsNewID(r.ID) || ids[r.ID] {
			t.Fatalf("record %+v: want its own gateway-made id and the client's id beside it", r)
		}
		ids[r.ID] = true
	}
	if len(ids) != 5 {
		t.Fatalf("%d records for 5 requests", len(ids))
	}
	// Without a client id, the answer echoes the record's id.
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", false, ""))
	if id := r.header.Get("X-Request-Id"); !usage.IsNewID(id) {
		t.Fatalf("X-Request-Id %q, want a gateway-made id", id)
	}
}

// TestGateway_ASecondProcessOnOneSpoolDirDoesNotStart: without its own
// journal a gateway would answer requests whose records a crash loses.
func TestGateway_ASecondProcessOnOneSpoolDirDoesNotStart(t *testing.T) {
	dir := t.TempDir()
	start := func(db string) (*Gateway, error) {
		cfg := &config.Config{Database: filepath.Join(dir, db), Listen: "127.0.0.1:0", SpoolDir: filepath.Join(dir, "spool")}
		cfg.ApplyDefaults()
		return Start(context.Background(), Options{Config: cfg, MasterKey: testMaster, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	g, err := start("a.db")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	_, err = start("b.db")
	if err == nil || !strings.Contains(err.Error(), "its own spool_dir") {
		t.Fatalf("a second gateway on the same spool_dir: %v, want a refusal naming spool_dir", err)
	}
	// One hint, and the directory named once.
	if msg := err.Error(); strings.Count(msg, "spool_dir") != 1 || strings.Count(msg, filepath.Join(dir, "spool")) != 1 {
		t.Fatalf("refusal %q: want the directory and the hint once each", msg)
	}
}

// Two gateways on two SQLite files in one folder, neither setting
// spool_dir, start and serve side by side: each default spool is named
// after its database file.
func TestGateway_TwoSQLiteFilesInOneFolderServeSideBySide(t *testing.T) {
	dir := t.TempDir()
	up := newFakeVLLM(t)
	start := func(db string) *Gateway {
		t.Helper()
		cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  vllm: {url: %s}\nmodels:\n  qwen: {backend: vllm}\n", up.URL)), "t.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Database, cfg.Listen = filepath.Join(dir, db), "127.0.0.1:0"
		g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
		if err != nil {
			t.Fatalf("gateway on %s: %v", db, err)
		}
		t.Cleanup(func() { _ = g.Close(context.Background()) })
		return g
	}
	a, b := start("a.db"), start("b.db")
	for _, g := range []*Gateway{a, b} {
		e := &env{t: t, g: g}
		if r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", false, "")); r.status != 200 {
			t.Fatalf("gateway on %s: %d %s", g.Config.Database, r.status, r.body)
		}
		if recs := e.records(1); len(recs) != 1 {
			t.Fatalf("gateway on %s: %d records, want its own 1", g.Config.Database, len(recs))
		}
	}
	for _, name := range []string{"a.db.spool", "b.db.spool"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.IsDir() {
			t.Fatalf("no spool %s beside its database: %v", name, err)
		}
	}
}

// Records an earlier version left in its default spool (llmgate-spool
// beside the database) are written by the next start, which uses the new
// default: nothing is lost in the upgrade. Another database's are left.
func TestGateway_RecordsInTheOldDefaultSpoolAreWrittenAfterTheUpgrade(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "llmgate-spool")
	sp, err := ledger.OpenSpool(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Append([]usage.Record{{ID: "req_left_1", Time: time.Now(), KeyID: "master", Model: "qwen", Status: 200},
		{ID: "req_left_2", Time: time.Now(), KeyID: "master", Model: "qwen", Status: 200}}); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	cfg := &config.Config{Database: filepath.Join(dir, "llmgate.db"), Listen: "127.0.0.1:0"}
	cfg.ApplyDefaults()
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	e := &env{t: t, g: g}
	got := map[string]bool{}
	for _, r := range e.records(2) {
		got[r.ID] = true
	}
	if !got["req_left_1"] || !got["req_left_2"] {
		t.Fatalf("records %v, want the two left in the old spool", got)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("the old spool is still there: %v", err)
	}
}

// TestEngineRefusalsAs500_AreRefusedWithTheFixAndTheModelStaysUp:
// llama-server started without --jinja answers every request with tools
// "500 tools param requires --jinja flag" (and a text-only one every
// image with "500 image input is not supported"). Claude Code sends tools with
// every request: it must get a 400 that names the fix (not a 502 it
// retries), and those refusals must not open the deployment's breaker,
// which would refuse the model's requests without tools too.
func TestEngineRefusalsAs500_AreRefusedWithTheFixAndTheModelStaysUp(t *testing.T) {
	e := startEnv(t)
	const tools = `"tools":[{"name":"Read","description":"read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}]`
	for i := range 12 {
		stream := i%2 == 1
		r := e.do("POST", "/v1/messages", testMaster,
			fmt.Sprintf(`{"model":"nojinja","max_tokens":16,"stream":%v,"messages":[{"role":"user","content":"hi"}],%s}`, stream, tools))
		if r.status != http.StatusBadRequest {
			t.Fatalf("request %d (stream %v): status %d, want 400: %s", i, stream, r.status, r.body)
		}
		var env struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(r.body), &env); err != nil || env.Type != "error" || env.Error.Type != "invalid_request_error" {
			t.Fatalf("not an Anthropic invalid_request_error: %s", r.body)
		}
		for _, w := range []string{`backend "vllm" cannot take requests with tools`, "tools param requires --jinja flag", "add --jinja"} {
			if !strings.Contains(env.Error.Message, w) {
				t.Errorf("message %q lacks %q", env.Error.Message, w)
			}
		}
	}
	// The same model without tools is served: no breaker opened.
	if r := e.do("POST", "/v1/messages", testMaster, `{"model":"nojinja","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`); r.status != http.StatusOK {
		t.Fatalf("a request without tools after the refusals: %d %s", r.status, r.body)
	}
	// An image to a text-only llama-server (500 "image input is not
	// supported"): refused the same way, the model still up.
	const img = `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}`
	for range 8 {
		r := e.do("POST", "/v1/messages", testMaster, `{"model":"nojinja","max_tokens":16,"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},`+img+`]}]}`)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, "cannot take this request's image or audio input") || !strings.Contains(r.body, "--mmproj") {
			t.Fatalf("image to a text-only engine: %d %s", r.status, r.body)
		}
	}
	if r := e.do("POST", "/v1/messages", testMaster, `{"model":"nojinja","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`); r.status != http.StatusOK {
		t.Fatalf("a text request after the image refusals: %d %s", r.status, r.body)
	}
	// The OpenAI dialect gets its own envelope with the same advice.
	r := e.do("POST", "/v1/chat/completions", testMaster,
		`{"model":"nojinja","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, `"code":"backend_tools_disabled"`) || !strings.Contains(r.body, "add --jinja") {
		t.Fatalf("chat completions: %d %s", r.status, r.body)
	}
}
