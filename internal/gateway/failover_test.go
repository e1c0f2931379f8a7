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
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/ledger"
	"llmgate/internal/testenv"
	"llmgate/internal/testenv/testdb"
	"llmgate/internal/usage"
)

// faultUpstream is an httptest upstream whose behaviour is one function,
// counting the requests it received.
type faultUpstream struct {
	*httptest.Server
	name string
	hits atomic.Int64
}

func newUpstream(t *testing.T, name string, h func(u *faultUpstream, w http.ResponseWriter, r *http.Request)) *faultUpstream {
	u := &faultUpstream{name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body first: net/http notices a closed connection (and
		// cancels r.Context) only once the body was read.
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		switch r.URL.Path {
		case "/health", "/v1/models":
			h(u, w, r) // health checks do not count as attempts
			return
		case "/models", "/props", "/get_model_info", "/get_server_info", "/api/show", "/tokenize", "/apply-template":
			http.NotFound(w, r) // nor does the gateway asking for context lengths or prompt counts
			return
		}
		u.hits.Add(1)
		h(u, w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// answer replies like a healthy OpenAI-compatible server, naming itself in
// the content so tests see who served.
func answer(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		return
	}
	var body struct {
		Stream bool `json:"stream"`
	}
	raw, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(raw, &body)
	if !body.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"from %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`, u.name)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for _, part := range []string{"from ", u.name} {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", part)
		fl.Flush()
	}
	fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\ndata: [DONE]\n\n")
}

func status(code int, hdr ...string) func(*faultUpstream, http.ResponseWriter, *http.Request) {
	return func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"message":"%s says %d"}}`, u.name, code)
	}
}

// hang never answers; it returns when the gateway gives up.
func hang(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		return
	}
	<-r.Context().Done()
}

func slow(d time.Duration) func(*faultUpstream, http.ResponseWriter, *http.Request) {
	return func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(d):
			answer(u, w, r)
		case <-r.Context().Done():
		}
	}
}

// dieAfter sends n stream events, then drops the connection.
func dieAfter(n int) func(*faultUpstream, http.ResponseWriter, *http.Request) {
	return func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"part%d \"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		panic(http.ErrAbortHandler)
	}
}

// stallAfter sends n stream events and then nothing until the gateway
// gives up.
func stallAfter(n int) func(*faultUpstream, http.ResponseWriter, *http.Request) {
	return func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"part%d \"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}
}

func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

type faultGW struct {
	t *testing.T
	g *Gateway
}

// startFaultGW starts a gateway with the given config body (backends and
// models); the database lives in a temporary directory.
func startFaultGW(t *testing.T, src string) *faultGW {
	t.Helper()
	cfg, err := config.Load(strings.NewReader(src), "failover.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = testdb.SQLite(t, t.TempDir(), "llmgate.db")
	cfg.Listen = "127.0.0.1:0"
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return &faultGW{t: t, g: g}
}

func (f *faultGW) chat(model string, stream bool) (int, http.Header, string) {
	f.t.Helper()
	return f.request("POST", "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, model, stream))
}

func (f *faultGW) request(method, path, body string) (int, http.Header, string) {
	f.t.Helper()
	req, _ := http.NewRequest(method, "http://"+f.g.Addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testMaster)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// ledger waits until the ledger holds n records, checks it stays at n (no
// double billing), and returns them newest first.
func (f *faultGW) ledger(n int) []usage.Record {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs, err := f.g.Store.Recent(context.Background(), 1000)
		if err != nil {
			f.t.Fatal(err)
		}
		if len(recs) >= n {
			time.Sleep(50 * time.Millisecond) // a second record would have arrived by now
			recs, _ = f.g.Store.Recent(context.Background(), 1000)
			if len(recs) != n {
				f.t.Fatalf("ledger has %d records, want exactly %d: %+v", len(recs), n, recs)
			}
			return recs
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("ledger has %d records, want %d", len(recs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantHits(t *testing.T, want map[*faultUpstream]int64) {
	t.Helper()
	for u, n := range want {
		if got := u.hits.Load(); got != n {
			t.Errorf("upstream %s got %d requests, want %d", u.name, got, n)
		}
	}
}

func TestFailover_EachFaultBeforeFirstByteGoesToTheNextDeployment(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		backend func(t *testing.T) (url string, u *faultUpstream)
		extra   string // backend settings
		stream  bool
	}{
		{"connection refused", func(t *testing.T) (string, *faultUpstream) { return closedURL(t), nil }, "", false},
		{"500", func(t *testing.T) (string, *faultUpstream) { u := newUpstream(t, "bad", status(500)); return u.URL, u }, "", false},
		{"503 on a stream", func(t *testing.T) (string, *faultUpstream) { u := newUpstream(t, "bad", status(503)); return u.URL, u }, "", true},
		{"hang before headers", func(t *testing.T) (string, *faultUpstream) { u := newUpstream(t, "bad", hang); return u.URL, u }, ", first_byte_timeout: 200ms", false},
		{"slow first byte", func(t *testing.T) (string, *faultUpstream) {
			u := newUpstream(t, "bad", slow(3*time.Second))
			return u.URL, u
		}, ", first_byte_timeout: 200ms", true},
		{"death before the first event", func(t *testing.T) (string, *faultUpstream) { u := newUpstream(t, "bad", dieAfter(0)); return u.URL, u }, "", true},
		{"stall before the first event", func(t *testing.T) (string, *faultUpstream) {
			u := newUpstream(t, "bad", stallAfter(0))
			return u.URL, u
		}, ", idle_timeout: 200ms", true},
		{"headers at once, first token too late", func(t *testing.T) (string, *faultUpstream) {
			u := newUpstream(t, "bad", stallAfter(0))
			return u.URL, u
		}, ", first_byte_timeout: 200ms", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			badURL, bad := c.backend(t)
			good := newUpstream(t, "good", answer)
			gw := startFaultGW(t, fmt.Sprintf(`
backends:
  bad: {url: %s%s}
  good: {url: %s}
models:
  m:
    deployments:
      - {backend: bad, priority: 0}
      - {backend: good, priority: 1}
`, badURL, c.extra, good.URL))
			code, _, body := gw.chat("m", c.stream)
			if code != 200 || !strings.Contains(body, "good") || strings.Contains(body, `"error"`) {
				t.Fatalf("status %d body %s; want a clean answer from the good deployment", code, body)
			}
			want := map[*faultUpstream]int64{good: 1}
			if bad != nil {
				want[bad] = 1
			}
			wantHits(t, want)
			recs := gw.ledger(1)
			if recs[0].Backend != "good" || recs[0].Status != 200 || recs[0].ErrorType != "" || recs[0].PromptTokens != 5 || recs[0].Estimated {
				t.Fatalf("ledger record %+v; want one 200 record naming backend good with its usage", recs[0])
			}
		})
	}
}

func TestFailover_429WithRetryAfterRestsThatDeployment(t *testing.T) {
	limited := newUpstream(t, "limited", status(429, "Retry-After", "30"))
	good := newUpstream(t, "good", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  limited: {url: %s}
  good: {url: %s}
models:
  m: {deployments: [{backend: limited}, {backend: good, priority: 1}]}
`, limited.URL, good.URL))
	for i := 0; i < 3; i++ {
		if code, _, body := gw.chat("m", false); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	// The first request met the 429; Retry-After keeps the next two away.
	wantHits(t, map[*faultUpstream]int64{limited: 1, good: 3})
	_, _, body := gw.request("GET", "/v1/models?health=1", "")
	var h struct {
		Data []struct {
			Model       string
			Deployments []struct {
				Backend  string
				Status   string
				RetryInS float64 `json:"retry_in_s"`
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil || len(h.Data) != 1 {
		t.Fatalf("health: %v %s", err, body)
	}
	d := h.Data[0].Deployments[0]
	if d.Backend != "limited" || d.Status != "rate_limited" || d.RetryInS < 25 || d.RetryInS > 30 {
		t.Fatalf("health of the limited deployment: %+v; want rate_limited for about 30s", d)
	}
	gw.ledger(3)
}

func TestFailover_OnlyDeploymentRateLimitedPassesRetryAfterToClient(t *testing.T) {
	limited := newUpstream(t, "limited", status(429, "Retry-After", "7"))
	gw := startFaultGW(t, fmt.Sprintf("backends:\n  limited: {url: %s}\nmodels:\n  m: {backend: limited}\n", limited.URL))
	code, hdr, _ := gw.chat("m", false)
	if code != 429 || hdr.Get("Retry-After") != "7" {
		t.Fatalf("status %d Retry-After %q; want 429 with the backend's Retry-After", code, hdr.Get("Retry-After"))
	}
	code, hdr, body := gw.chat("m", false)
	if code != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "rate limited for") {
		t.Fatalf("second request while resting: %d %q %s; want 429 saying it is rate limited, with Retry-After", code, hdr.Get("Retry-After"), body)
	}
	wantHits(t, map[*faultUpstream]int64{limited: 1})
}

func TestFailover_DeathMidStreamIsNotRetriedAndEndsWithAnErrorEvent(t *testing.T) {
	dies := newUpstream(t, "dies", dieAfter(2))
	good := newUpstream(t, "good", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  dies: {url: %s}
  good: {url: %s}
models:
  m: {deployments: [{backend: dies}, {backend: good, priority: 1}]}
`, dies.URL, good.URL))
	code, _, body := gw.chat("m", true)
	if code != 200 || !strings.Contains(body, "part1") || !strings.Contains(body, `"error"`) || strings.Contains(body, "good") {
		t.Fatalf("status %d body %q; want the two events, then an error event, and nothing from another deployment", code, body)
	}
	if strings.Count(body, `"error"`) != 1 {
		t.Fatalf("want exactly one error event: %q", body)
	}
	wantHits(t, map[*faultUpstream]int64{dies: 1, good: 0})
	rec := gw.ledger(1)[0]
	if rec.Backend != "dies" || rec.Status != 502 || rec.ErrorType != "stream_cut" {
		t.Fatalf("ledger %+v; want one 502 stream_cut record naming the deployment that died", rec)
	}
}

func TestFailover_IdleGapMidStreamEndsWithTimeoutEvent(t *testing.T) {
	stalls := newUpstream(t, "stalls", stallAfter(1))
	good := newUpstream(t, "good", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  stalls: {url: %s, idle_timeout: 200ms}
  good: {url: %s}
models:
  m: {deployments: [{backend: stalls}, {backend: good, priority: 1}]}
`, stalls.URL, good.URL))
	start := time.Now()
	code, _, body := gw.chat("m", true)
	if code != 200 || !strings.Contains(body, "part0") || !strings.Contains(body, "stream_idle_timeout") {
		t.Fatalf("status %d body %q; want the first event then an idle time-out error event", code, body)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("gave up after %v, before the 200ms idle gap", el)
	}
	wantHits(t, map[*faultUpstream]int64{stalls: 1, good: 0})
	if rec := gw.ledger(1)[0]; rec.Status != 504 || rec.Backend != "stalls" {
		t.Fatalf("ledger %+v", rec)
	}
}

func TestFailover_SlowFirstByteWithinTimeoutIsServedWithoutRetry(t *testing.T) {
	slowUp := newUpstream(t, "slow", slow(150*time.Millisecond))
	good := newUpstream(t, "good", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  slow: {url: %s, first_byte_timeout: 5s}
  good: {url: %s}
models:
  m: {deployments: [{backend: slow}, {backend: good, priority: 1}]}
`, slowUp.URL, good.URL))
	if code, _, body := gw.chat("m", false); code != 200 || !strings.Contains(body, "from slow") {
		t.Fatalf("%d %s", code, body)
	}
	wantHits(t, map[*faultUpstream]int64{slowUp: 1, good: 0})
}

func TestFailover_RequestErrorIsNotRetried(t *testing.T) {
	bad := newUpstream(t, "bad", status(400))
	good := newUpstream(t, "good", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  bad: {url: %s}
  good: {url: %s}
models:
  m: {deployments: [{backend: bad}, {backend: good, priority: 1}]}
`, bad.URL, good.URL))
	if code, _, body := gw.chat("m", false); code != 400 || !strings.Contains(body, "bad says 400") {
		t.Fatalf("%d %s; want the backend's 400 passed on", code, body)
	}
	wantHits(t, map[*faultUpstream]int64{bad: 1, good: 0})
	gw.ledger(1)
}

func TestFailover_FallbackModelsInOrderAfterEveryDeploymentFailed(t *testing.T) {
	a := newUpstream(t, "a", status(500))
	b := newUpstream(t, "b", status(502))
	fb1 := newUpstream(t, "fb1", status(503))
	fb2 := newUpstream(t, "fb2", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  a: {url: %s}
  b: {url: %s}
  fb1: {url: %s}
  fb2: {url: %s}
models:
  m:
    deployments: [{backend: a}, {backend: b, priority: 1}]
    fallbacks: [first, second]
  first: {backend: fb1}
  second: {backend: fb2, upstream_model: cloud-model}
`, a.URL, b.URL, fb1.URL, fb2.URL))
	code, _, body := gw.chat("m", true)
	if code != 200 || !strings.Contains(body, "fb2") {
		t.Fatalf("%d %s", code, body)
	}
	wantHits(t, map[*faultUpstream]int64{a: 1, b: 1, fb1: 1, fb2: 1})
	rec := gw.ledger(1)[0]
	if rec.Model != "m" || rec.ServedModel != "second" || rec.Backend != "fb2" || rec.UpstreamModel != "cloud-model" || rec.Status != 200 || rec.ErrorType != "" {
		t.Fatalf("ledger %+v; want the requested model billed once, naming the fallback deployment that served", rec)
	}
}

func TestFailover_BreakerOpensAndHealthEndpointShowsIt(t *testing.T) {
	bad := newUpstream(t, "bad", status(500))
	good := newUpstream(t, "good", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  bad: {url: %s}
  good: {url: %s}
models:
  m: {deployments: [{backend: bad}, {backend: good, priority: 1}]}
`, bad.URL, good.URL))
	for i := 0; i < 8; i++ {
		if code, _, body := gw.chat("m", false); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	// Five consecutive failures open the breaker; later requests skip it.
	wantHits(t, map[*faultUpstream]int64{bad: 5, good: 8})
	_, _, body := gw.request("GET", "/v1/models?health=1", "")
	if !strings.Contains(body, `"status": "open"`) || !strings.Contains(body, `"status": "healthy"`) || !strings.Contains(body, "bad says 500") {
		t.Fatalf("health does not show the open breaker and its last error: %s", body)
	}
	_, _, plain := gw.request("GET", "/v1/models", "")
	if strings.Contains(plain, "deployments") {
		t.Fatalf("plain /v1/models changed shape: %s", plain)
	}
	gw.ledger(8)
}

func TestBalancing_LeastOutstandingSendsMoreToTheFasterDeployment(t *testing.T) {
	// The contrast is large so that the result holds under -race on a busy
	// machine, where the gateway's own time per request grows.
	fast := newUpstream(t, "fast", slow(time.Millisecond))
	slowUp := newUpstream(t, "slow", slow(100*time.Millisecond))
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  fast: {url: %s}
  slow: {url: %s}
models:
  m: {deployments: [{backend: fast}, {backend: slow}]}
`, fast.URL, slowUp.URL))
	const clients, each = 6, 20
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				if code, _, _ := gw.chat("m", false); code != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	f, s := fast.hits.Load(), slowUp.hits.Load()
	t.Logf("fast %d, slow %d", f, s)
	if failed.Load() != 0 || f+s != clients*each {
		t.Fatalf("%d failed, %d+%d served", failed.Load(), f, s)
	}
	if f < 2*s {
		t.Fatalf("least outstanding sent %d to the fast deployment and %d to the 100x slower one; want at least twice as many to the fast one", f, s)
	}
}

func TestHealthChecks_DownBackendIsSkippedUntilItRecovers(t *testing.T) {
	var healthy atomic.Bool
	flappy := newUpstream(t, "flappy", func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if !healthy.Load() {
				w.WriteHeader(503)
			}
			return
		}
		answer(u, w, r)
	})
	good := newUpstream(t, "good", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  flappy: {url: %s, engine: vllm, health_check: {interval: 20ms}}
  good: {url: %s}
models:
  m: {deployments: [{backend: flappy}, {backend: good, priority: 1}]}
`, flappy.URL, good.URL))
	waitFor(t, func() bool {
		_, _, body := gw.request("GET", "/v1/models?health=1", "")
		return strings.Contains(body, `"status": "down"`)
	})
	if code, _, body := gw.chat("m", false); code != 200 || !strings.Contains(body, "from good") {
		t.Fatalf("%d %s", code, body)
	}
	wantHits(t, map[*faultUpstream]int64{flappy: 0, good: 1})
	healthy.Store(true)
	waitFor(t, func() bool {
		_, _, body := gw.request("GET", "/v1/models?health=1", "")
		return !strings.Contains(body, `"status": "down"`)
	})
	if code, _, body := gw.chat("m", false); code != 200 || !strings.Contains(body, "from flappy") {
		t.Fatalf("after recovery: %d %s", code, body)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, cond, "condition")
}

// lowest_latency balancing learns from /v1/messages (translated to a chat
// backend) and /v1/responses as it does from chat: after a few requests
// nearly all go to the fast deployment.
func TestLowestLatency_LearnsFromMessagesAndResponses(t *testing.T) {
	for _, tc := range []struct{ path, body string }{
		{"/v1/messages", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", `{"model":"m","input":"hi"}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			fast := newUpstream(t, "fast", answer)
			slowU := newUpstream(t, "slow", slow(40*time.Millisecond))
			f := startFaultGW(t, fmt.Sprintf("backends:\n  fast: {url: %s}\n  slow: {url: %s}\nmodels:\n  m:\n    balancing: lowest_latency\n    deployments:\n      - {backend: slow}\n      - {backend: fast}\n", fast.URL, slowU.URL))
			for i := 0; i < 4; i++ { // both get measured
				if st, _, b := f.request("POST", tc.path, tc.body); st != 200 {
					t.Fatalf("warm-up: %d %s", st, b)
				}
			}
			before := slowU.hits.Load()
			for i := 0; i < 20; i++ {
				if st, _, b := f.request("POST", tc.path, tc.body); st != 200 {
					t.Fatalf("%d %s", st, b)
				}
			}
			// One in twenty may explore the slower one; allow a few more.
			if n := slowU.hits.Load() - before; n > 4 {
				t.Fatalf("%d of 20 requests went to the 40 ms slower deployment after warm-up; lowest_latency is not learning from %s", n, tc.path)
			}
		})
	}
}

// An Anthropic backend whose stream breaks off after message_start (which
// counts 1 output token) and some text: the record counts the text seen,
// marked estimated, not the 1.
func TestMessagesPassthrough_CutStreamRecordsTheTextSeen(t *testing.T) {
	text := strings.Repeat("twelve chars", 20) // 240 characters ≈ 60 tokens
	up := newUpstream(t, "claude", func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n")
		fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		for i := 0; i < 20; i++ {
			fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", text[i*12:(i+1)*12])
		}
		fl.Flush()
		panic(http.ErrAbortHandler)
	})
	f := startFaultGW(t, fmt.Sprintf("backends:\n  claude: {url: %s, dialect: anthropic}\nmodels:\n  c: {backend: claude}\n", up.URL))
	st, _, body := f.request("POST", "/v1/messages", `{"model":"c","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if st != 200 || !strings.Contains(body, "event: error") {
		t.Fatalf("want a stream ending in an error event, got %d %s", st, body)
	}
	rec := f.ledger(1)[0]
	if rec.PromptTokens != 12 || rec.CompletionTokens < 50 || !rec.Estimated || rec.Status == 200 {
		t.Fatalf("record %+v: want the backend's 12 prompt tokens, ~60 estimated completion tokens, estimated, an error status", rec)
	}
}

// A backend that ignores "stream": true and answers one JSON completion:
// the streaming client still gets SSE (chunk, usage chunk if asked, [DONE])
// and the ledger has the backend's usage.
func TestStreamRequest_JSONAnswerBecomesAStream(t *testing.T) {
	up := newUpstream(t, "batchonly", func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
			return
		}
		fmt.Fprint(w, `{"id":"t1","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"once upon","finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}`)
	})
	f := startFaultGW(t, fmt.Sprintf("backends:\n  b: {url: %s}\nmodels:\n  m: {backend: b}\n", up.URL))
	st, h, body := f.request("POST", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if st != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("chat: %d %s %s", st, h.Get("Content-Type"), body)
	}
	events := strings.Split(strings.TrimSpace(body), "\n\n")
	if len(events) != 3 || events[2] != "data: [DONE]" {
		t.Fatalf("chat stream %q: want chunk, usage chunk, [DONE]", body)
	}
	var chunk struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta struct {
				Role      string `json:"role"`
				Content   string `json:"content"`
				ToolCalls []struct {
					Index *int   `json:"index"`
					ID    string `json:"id"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(events[0], "data: ")), &chunk); err != nil {
		t.Fatal(err)
	}
	c0 := chunk.Choices[0]
	if chunk.Object != "chat.completion.chunk" || c0.Delta.Role != "assistant" || c0.Delta.Content != "hello there" || c0.FinishReason != "tool_calls" ||
		len(c0.Delta.ToolCalls) != 1 || c0.Delta.ToolCalls[0].Index == nil || *c0.Delta.ToolCalls[0].Index != 0 || c0.Delta.ToolCalls[0].ID != "call_1" {
		t.Fatalf("chunk %s", events[0])
	}
	if !strings.Contains(events[1], `"choices":[]`) || !strings.Contains(events[1], `"completion_tokens":3`) {
		t.Fatalf("usage chunk %s", events[1])
	}
	// Completions, without include_usage: no usage chunk reaches the client.
	st, _, body = f.request("POST", "/v1/completions", `{"model":"m","stream":true,"prompt":"tell"}`)
	events = strings.Split(strings.TrimSpace(body), "\n\n")
	if st != 200 || len(events) != 2 || !strings.Contains(events[0], `"object":"text_completion"`) || !strings.Contains(events[0], `"text":"once upon"`) || events[1] != "data: [DONE]" {
		t.Fatalf("completions stream %d %q", st, body)
	}
	recs := f.ledger(2)
	for _, r := range recs {
		if r.Estimated || r.CompletionTokens == 0 || r.Status != 200 {
			t.Fatalf("record %+v: want the backend's usage", r)
		}
	}
}

// keepAliveThen sends one event, then only comment keep-alives for gap,
// then the rest of an answer.
func keepAliveThen(gap time.Duration, first bool) func(*faultUpstream, http.ResponseWriter, *http.Request) {
	return func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fl := w.(http.Flusher)
		fl.Flush()
		if first {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"part0 \"}}]}\n\n")
			fl.Flush()
		}
		for end := time.Now().Add(gap); time.Now().Before(end); {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(40 * time.Millisecond):
			}
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"from %s\"}}]}\n\n", u.name)
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\ndata: [DONE]\n\n")
	}
}

// A backend that keeps the stream open with comments (a queueing provider,
// another llmgate waiting for its engine) is alive: idle_timeout does not
// cut it.
//
// keepAliveGap is longer than the keepAliveIdle idle_timeout of these
// tests, with a comment every 40 ms: over 35 times the margin, since a race
// build on a loaded 2-core machine has stalled a stream past a 200 ms one,
// and once (the whole suite running) past 600 ms.
const (
	keepAliveGap  = 2250 * time.Millisecond
	keepAliveIdle = "1500ms"
)

func TestFailover_CommentKeepAlivesResetTheIdleGap(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "pings", keepAliveThen(keepAliveGap, true))
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  pings: {url: %s, idle_timeout: %s}
models:
  m: {backend: pings}
`, up.URL, keepAliveIdle))
	code, _, body := gw.chat("m", true)
	if code != 200 || !strings.Contains(body, "part0") || !strings.Contains(body, "from pings") || strings.Contains(body, "idle") {
		t.Fatalf("status %d body %q; want the whole answer across a gap of keep-alives longer than idle_timeout", code, body)
	}
}

// Before the first event, keep-alives do not satisfy first_byte_timeout:
// the request fails over to a deployment that answers.
func TestFailover_CommentKeepAlivesDoNotCountAsTheFirstEvent(t *testing.T) {
	up := newUpstream(t, "pings", keepAliveThen(2*time.Second, false))
	good := newUpstream(t, "good", answer)
	gw := startFaultGW(t, fmt.Sprintf(`
backends:
  pings: {url: %s, first_byte_timeout: 200ms}
  good: {url: %s}
models:
  m: {deployments: [{backend: pings}, {backend: good, priority: 1}]}
`, up.URL, good.URL))
	code, _, body := gw.chat("m", true)
	if code != 200 || !strings.Contains(body, `"good"`) || strings.Contains(body, "pings") {
		t.Fatalf("status %d body %q; want the answer of the other deployment", code, body)
	}
}
