package bench

import (
	"crypto/tls"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOpenLoop_MaxConcurrencyQueuesAndLatencyStartsWhenASlotFrees(t *testing.T) {
	up := &TimedUpstream{T1: 40 * time.Millisecond, T2: 5 * time.Millisecond, Chunks: 2}
	rep := runAgainst(t, up, []string{"m"}, func(o *Options) {
		o.Concurrencies = nil
		o.Rates = []float64{math.Inf(1)}
		o.MaxConcurrency = 2
		o.NumRequests = 8
	})
	c := rep.Results[0]
	if c.Completed != 8 || c.Mode != "rate" || c.RequestRate == nil || !math.IsInf(float64(*c.RequestRate), 1) {
		t.Fatalf("cell %+v", c)
	}
	if c.MaxConcurrentRequests > 2 {
		t.Errorf("%d in flight, cap is 2", c.MaxConcurrentRequests)
	}
	// Requests 3..8 waited for a slot: about 45, 90 and 135 ms.
	if c.ClientQueue.Max < 80 {
		t.Errorf("client queue time max %.1f ms, want the waits of queued requests (≥ 80 ms)", c.ClientQueue.Max)
	}
	// The wait is not server latency: queued requests (which waited 45, 90
	// or 135 ms, about 90 ms on average) have about the TTFT of those sent
	// at once. Comparing the two groups cancels out how late a loaded
	// machine runs the server's timers.
	var queued, direct []float64
	for _, r := range rep.Requests {
		if r.QueueMs > 20 {
			queued = append(queued, r.TTFTMs)
		} else {
			direct = append(direct, r.TTFTMs)
		}
	}
	if len(queued) < 4 || len(direct) < 1 {
		t.Fatalf("%d queued and %d direct requests", len(queued), len(direct))
	}
	if d := Summarize(queued).Mean - Summarize(direct).Mean; d > 45 {
		t.Errorf("queued requests' TTFT exceeds the others' by %.1f ms: the client queue leaked into TTFT", d)
	}
}

func TestClosedLoop_DurationModeRunsUntilTimeIsUp(t *testing.T) {
	up := &TimedUpstream{T1: 10 * time.Millisecond, T2: 2 * time.Millisecond, Chunks: 2}
	rep := runAgainst(t, up, []string{"m"}, func(o *Options) {
		o.NumRequests = 0
		o.Duration = 300 * time.Millisecond
		o.Concurrencies = []int{2}
	})
	c := rep.Results[0]
	if c.Completed < 10 || c.Duration < 0.3 || c.Duration > 5 {
		t.Errorf("duration cell: %d requests in %.2f s", c.Completed, c.Duration)
	}
}

// slotServer serves at most n requests at once and queues the rest, like an
// engine with a fixed batch size, so throughput saturates at n.
type slotServer struct {
	h     http.Handler
	slots chan struct{}
}

func (s *slotServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	s.h.ServeHTTP(w, r)
}

func TestSweep_FindsTheSaturationPoint(t *testing.T) {
	// 50 ms per request, so the server's slots, not client overhead or a
	// stall of the shared machine, set the throughput.
	up := &TimedUpstream{T1: 20 * time.Millisecond, T2: 10 * time.Millisecond, Chunks: 4}
	srv := httptest.NewServer(&slotServer{h: up, slots: make(chan struct{}, 4)})
	defer srv.Close()
	targets, _ := TargetsFromFlags(srv.URL+"/v1", "", []string{"m"}, "chat", func(string) string { return "" })
	rep, err := Run(t.Context(), Options{
		Targets: targets, Sweep: true, SweepMax: 32, NumRequests: 32, Warmup: 0, Burstiness: 1,
		Workload: Workload{InputLen: 4, OutputLen: 4}, Request: RequestOptions{Timeout: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Saturation) != 1 {
		t.Fatalf("saturation %+v", rep.Saturation)
	}
	s := rep.Saturation[0]
	t.Logf("%+v over %d cells", s, len(rep.Results))
	if s.Concurrency != 4 && s.Concurrency != 8 {
		t.Errorf("saturation at concurrency %d, the server has 4 slots", s.Concurrency)
	}
}

func TestCompletionsEndpoint_IsBenchmarkedThroughV1Completions(t *testing.T) {
	up := &TimedUpstream{T1: 5 * time.Millisecond, T2: 2 * time.Millisecond, Chunks: 3}
	srv := httptest.NewServer(up)
	defer srv.Close()
	targets, _ := TargetsFromFlags(srv.URL+"/v1", "", []string{"m"}, "completions", func(string) string { return "" })
	var mu sync.Mutex
	var paths []string
	inner := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		inner.ServeHTTP(w, r)
	})
	rep, err := Run(t.Context(), Options{
		Targets: targets, Concurrencies: []int{1}, NumRequests: 2, Warmup: 0, Burstiness: 1,
		Workload: Workload{InputLen: 4, OutputLen: 3}, Request: RequestOptions{Timeout: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Results[0]; c.Completed != 2 || c.TotalOutputTokens != 6 {
		t.Errorf("completions cell %+v", c)
	}
	mu.Lock()
	defer mu.Unlock()
	// The first request lists models to label the backend; probes of the
	// server's health (GET) come before the measured requests.
	var posts []string
	for i, p := range paths {
		if p == "/v1/completions" {
			posts = append(posts, p)
		} else if len(posts) > 0 || (i == 0 && p != "/v1/models") {
			t.Errorf("GET %s among or before the model list: %v", p, paths)
		}
	}
	if len(posts) != 2 {
		t.Errorf("paths %v: want the 2 requests at /v1/completions", paths)
	}
}

func TestTransport_SpeaksHTTP1EvenWhenTheServerOffersHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.Proto))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tr := newTransport(4)
	tr.TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 1 {
		t.Errorf("negotiated %s; one multiplexed HTTP/2 connection would distort per-stream timing", resp.Proto)
	}
	if tr.MaxConnsPerHost != 4 || tr.MaxIdleConnsPerHost != 4 || !tr.DisableCompression {
		t.Errorf("pool not sized to the concurrency: %+v", tr)
	}
}

func TestRequestBody_FollowsTheEndpointAndAsksForUsage(t *testing.T) {
	chat := Target{Model: "m", Endpoint: EndpointChat}
	b, _ := buildBody(&chat, &Prompt{Text: "hello"}, &RequestOptions{IgnoreEOS: true, ExtraBody: map[string]any{"top_k": 1}}, 7)
	for _, want := range []string{`"stream":true`, `"include_usage":true`, `"max_tokens":7`, `"temperature":0`, `"ignore_eos":true`, `"messages":[{"content":"hello","role":"user"}]`, `"top_k":1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("chat body %s lacks %s", b, want)
		}
	}
	comp := Target{Model: "m", Endpoint: EndpointCompletions}
	b, _ = buildBody(&comp, &Prompt{Text: "hello"}, &RequestOptions{}, 7)
	if !strings.Contains(string(b), `"prompt":"hello"`) || strings.Contains(string(b), "ignore_eos") {
		t.Errorf("completions body %s", b)
	}
}
