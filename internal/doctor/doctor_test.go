package doctor

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// envMap makes an injected environment; tests never read the real one.
func envMap(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// baseOpts returns options isolated from the machine: empty environment and
// empty home and work directories.
func baseOpts(t *testing.T, srvURL string, f *fakeServer) Options {
	t.Helper()
	return Options{
		BaseURL:   srvURL + "/v1",
		APIKey:    f.key,
		Model:     f.models[0],
		Timeout:   10 * time.Second,
		LookupEnv: envMap(),
		HomeDir:   t.TempDir(),
		WorkDir:   t.TempDir(),
	}
}

func run(t *testing.T, o Options) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := Run(ctx, o)
	if testing.Verbose() {
		var b bytes.Buffer
		_ = r.WriteText(&b)
		t.Log("\n" + b.String())
	}
	return r
}

// must returns the check or fails the test.
func must(t *testing.T, r Report, id string) Check {
	t.Helper()
	c := r.Check(id)
	if c == nil {
		ids := []string{}
		for _, x := range r.Checks {
			ids = append(ids, x.ID)
		}
		t.Fatalf("no check %q in %v", id, ids)
	}
	return *c
}

func expect(t *testing.T, r Report, id string, status Status, detailHas, fixHas string) Check {
	t.Helper()
	c := must(t, r, id)
	if c.Status != status {
		t.Errorf("%s: status %s, want %s (detail: %s; fix: %s)", id, c.Status, status, c.Detail, c.Fix)
	}
	if !strings.Contains(c.Detail, detailHas) {
		t.Errorf("%s: detail %q lacks %q", id, c.Detail, detailHas)
	}
	if !strings.Contains(c.Fix, fixHas) {
		t.Errorf("%s: fix %q lacks %q", id, c.Fix, fixHas)
	}
	return c
}

func TestRun_HealthyEndpointPassesEveryCheck(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	for _, c := range r.Checks {
		if c.Status != StatusPass && c.Status != StatusSkip {
			t.Errorf("%s: %s: %s (fix: %s)", c.ID, c.Status, c.Detail, c.Fix)
		}
	}
	for _, id := range []string{"env.keys", "url.shape", "env.proxy", "net.dns", "net.tcp", "auth", "models", "chat",
		"tools", "stream", "stream.done", "stream.usage", "anthropic", "anthropic.stream", "responses", "perf"} {
		if c := must(t, r, id); c.Status != StatusPass {
			t.Errorf("%s is %s, want pass: %s", id, c.Status, c.Detail)
		}
	}
	if !r.OK || r.Failed != 0 || r.Warnings != 0 {
		t.Errorf("report OK=%v failed=%d warnings=%d", r.OK, r.Failed, r.Warnings)
	}
	if r.Metrics == nil || r.Metrics.OutputTokens != 8 || r.Metrics.TokensEstimated || r.Metrics.TTFTMS <= 0 {
		t.Errorf("metrics = %+v, want 8 tokens from usage and a TTFT", r.Metrics)
	}
	if r.KeyFingerprint != "sk-lg-…cdef" {
		t.Errorf("fingerprint %q", r.KeyFingerprint)
	}
}

func TestRun_HealthyTLSEndpointReportsHandshake(t *testing.T) {
	f := newFake()
	srv := httptest.NewTLSServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.TLSConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	r := run(t, o)
	expect(t, r, "net.tls", StatusPass, "TLS 1.3", "")
	if !r.OK {
		t.Errorf("report failed: %+v", r.Checks)
	}
}

func TestRun_UntrustedCertificateFailsTLSWithCAFix(t *testing.T) {
	f := newFake()
	srv := httptest.NewTLSServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "net.tls", StatusFail, "certificate", "SSL_CERT_FILE")
	expect(t, r, "chat", StatusSkip, "TLS failed", "")
}

func TestRun_KeyWithBearerPrefixGets401AndBareKeyFix(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.APIKey = ""
	o.LookupEnv = envMap("OPENAI_API_KEY", "Bearer: "+f.key)
	r := run(t, o)
	expect(t, r, "env.keys", StatusFail, "OPENAI_API_KEY starts with \"Bearer\"", "bare key")
	expect(t, r, "auth", StatusFail, "HTTP 401", "Set OPENAI_API_KEY to the bare key sk-lg-…cdef")
	// The doctor carries on with the bare key so the rest is still diagnosed.
	expect(t, r, "chat", StatusPass, "OK", "")
	if r.OK {
		t.Error("report passed despite a key the server rejects")
	}
}

func TestRun_QuotedKeyVariableIsFlagged(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.APIKey = ""
	o.LookupEnv = envMap("OPENAI_API_KEY", `"`+f.key+`"`, "ANTHROPIC_API_KEY", "")
	r := run(t, o)
	c := expect(t, r, "env.keys", StatusFail, "wrapped in literal quotes", "Remove the quotes")
	if !strings.Contains(c.Detail, "ANTHROPIC_API_KEY set but empty") {
		t.Errorf("empty variable not reported: %s", c.Detail)
	}
	expect(t, r, "auth", StatusFail, "without quotes", "bare key")
}

func TestRun_WrongKeyIs401WithKeyFix(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	f.realm = "llmgate" // as an llmgate gateway says
	o.APIKey = "sk-lg-wrong-key-00000000wxyz"
	r := run(t, o)
	c := expect(t, r, "auth", StatusFail, "HTTP 401: key sk-lg-…wxyz", "llmgate keys list")
	if !strings.Contains(c.Detail, "Incorrect API key provided: Bearer sk-lg-…wxyz") {
		t.Errorf("server message not quoted with the key scrubbed: %s", c.Detail)
	}
	var js bytes.Buffer
	_ = r.WriteJSON(&js)
	if strings.Contains(js.String(), o.APIKey) {
		t.Error("full key in the report")
	}
	expect(t, r, "models", StatusSkip, "authentication failed", "")
}

// A server that is not an llmgate gateway gets no advice about llmgate's
// keys: the fix names where that server's key comes from.
func TestRun_WrongKeyFixNamesTheServersOwnKey(t *testing.T) {
	for _, tc := range []struct{ server, fix string }{
		{"llama.cpp", "llama-server: use the key it was started with"},
		{"uvicorn", "VLLM_API_KEY"},
		{"", "issued by this endpoint's provider"},
	} {
		f := newFake()
		f.server = tc.server
		srv := httptest.NewServer(f)
		o := baseOpts(t, srv.URL, f)
		o.APIKey = "wrong-key-0000wxyz"
		r := run(t, o)
		c := expect(t, r, "auth", StatusFail, "HTTP 401", tc.fix)
		if strings.Contains(c.Fix, "llmgate") {
			t.Errorf("Server %q: the fix speaks of llmgate: %s", tc.server, c.Fix)
		}
		srv.Close()
	}
}

func TestRun_ForbiddenIs403NotBadKey(t *testing.T) {
	f := newFake()
	f.forbidden = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "auth", StatusFail, "HTTP 403", "403 means the key itself is valid")
}

func TestRun_MissingKeyIs401WithExportFix(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.APIKey = ""
	r := run(t, o)
	expect(t, r, "env.keys", StatusWarn, "no key found", "OPENAI_API_KEY")
	expect(t, r, "auth", StatusFail, "HTTP 401 without a key", "export OPENAI_API_KEY")
	// A llama-server started with --api-key: the key is the one it was given.
	f.server = "llama.cpp"
	r = run(t, o)
	expect(t, r, "auth", StatusFail, "HTTP 401 without a key", "use the key it was started with (its --api-key or LLAMA_API_KEY)")
}

func TestRun_ServerWantingXAPIKeyIsNamed(t *testing.T) {
	f := newFake()
	f.xAPIKeyOnly = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "auth", StatusFail, "accepted in x-api-key", "x-api-key")
}

func TestRun_DoubleV1Is404AndNamesTheFix(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.BaseURL = srv.URL + "/v1/v1"
	r := run(t, o)
	expect(t, r, "url.shape", StatusFail, "repeats /v1", "Remove the duplicate /v1: use "+srv.URL+"/v1.")
	expect(t, r, "url.path", StatusFail, "/v1/v1/models → HTTP 404", "Set the base URL to "+srv.URL+"/v1.")
	expect(t, r, "chat", StatusPass, "OK", "")
	if r.EffectiveBaseURL != srv.URL+"/v1" {
		t.Errorf("effective base URL %q", r.EffectiveBaseURL)
	}
}

func TestRun_RedirectIsReportedAndFollowedForTheRest(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	// An http front that redirects everything, as a TLS terminator might.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL+r.URL.Path, http.StatusMovedPermanently)
	}))
	defer front.Close()
	o := baseOpts(t, front.URL, f)
	r := run(t, o)
	expect(t, r, "url.redirect", StatusFail, "HTTP 301 to "+srv.URL+"/v1/models", "Use the redirect target as the base URL: "+srv.URL+"/v1.")
	expect(t, r, "chat", StatusPass, "OK", "")
}

func TestRun_MissingV1IsFoundByProbing(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.BaseURL = srv.URL + "/"
	r := run(t, o)
	expect(t, r, "url.shape", StatusWarn, "has no /v1", "Append /v1")
	expect(t, r, "url.path", StatusFail, "HTTP 404", "Set the base URL to "+srv.URL+"/v1.")
}

func TestRun_UnknownModelSuggestsNearestNames(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.Model = "qwen2.5-7b-instrct"
	r := run(t, o)
	expect(t, r, "models", StatusFail, "nearest: qwen2.5-7b-instruct", "--model qwen2.5-7b-instruct")
	expect(t, r, "chat", StatusPass, "qwen2.5-7b-instruct", "")
}

func TestRun_200WithErrorBodyQuotesTheBody(t *testing.T) {
	f := newFake()
	f.errorBody200 = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "chat", StatusFail, "HTTP 200 but the body has no choices[0].message", "4xx/5xx status")
	if c := must(t, r, "chat"); !strings.Contains(c.Detail, "upstream overloaded") {
		t.Errorf("body not quoted: %s", c.Detail)
	}
}

func TestRun_ProxyOnClosedPortRetriesDirect(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	closed := closedPort(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	o := baseOpts(t, srv.URL, f)
	// A non-loopback name, because Go never proxies loopback addresses.
	o.BaseURL = "http://llmgate.test:" + port + "/v1"
	o.LookupHost = func(_ context.Context, host string) ([]string, error) {
		if host == "llmgate.test" {
			return []string{"127.0.0.1"}, nil
		}
		return nil, errors.New("no such host")
	}
	o.LookupEnv = envMap("http_proxy", "http://"+closed)
	r := run(t, o)
	expect(t, r, "env.proxy", StatusFail, "proxy http://"+closed+" failed", "Add llmgate.test to NO_PROXY")
	if c := must(t, r, "env.proxy"); !strings.Contains(c.Detail, "answers directly (HTTP 200)") {
		t.Errorf("direct retry not reported: %s", c.Detail)
	}
	expect(t, r, "net.tcp", StatusPass, "127.0.0.1:"+port, "")
	expect(t, r, "chat", StatusPass, "OK", "")
}

func TestRun_WorkingProxyCarriesEveryRequest(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	var proxied atomic.Int64
	// A forward proxy: it receives absolute URLs and dials the fake server
	// whatever the host name says.
	fwd := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { proxied.Add(1) },
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
		}},
	}
	proxy := httptest.NewServer(fwd)
	defer proxy.Close()
	o := baseOpts(t, srv.URL, f)
	o.BaseURL = "http://gateway.internal:4000/v1"
	o.LookupHost = func(context.Context, string) ([]string, error) {
		return nil, errors.New("only the proxy can resolve this")
	}
	o.LookupEnv = envMap("HTTP_PROXY", proxy.URL)
	r := run(t, o)
	expect(t, r, "env.proxy", StatusPass, "go through proxy "+proxy.URL, "")
	expect(t, r, "net.dns", StatusSkip, "which connects for us", "")
	expect(t, r, "stream.done", StatusPass, "[DONE]", "")
	expect(t, r, "anthropic.stream", StatusPass, "message_stop", "")
	if !r.OK || proxied.Load() < 6 {
		t.Errorf("ok=%v, %d requests through the proxy", r.OK, proxied.Load())
	}
}

func TestRun_NoProxyCoveringHostPasses(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.LookupEnv = envMap("HTTPS_PROXY", "http://"+closedPort(t), "HTTP_PROXY", "http://"+closedPort(t))
	r := run(t, o)
	expect(t, r, "env.proxy", StatusWarn, "other HTTP libraries may send 127.0.0.1 to the proxy", "NO_PROXY")
	o.LookupEnv = envMap("HTTP_PROXY", "http://"+closedPort(t), "NO_PROXY", "localhost,127.0.0.1")
	r = run(t, o)
	expect(t, r, "env.proxy", StatusPass, "bypass the proxy", "")
}

func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRun_StreamWithoutUsageWarnsButPasses(t *testing.T) {
	f := newFake()
	f.noUsage = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "stream.usage", StatusWarn, "no usage chunk although stream_options.include_usage was true", "honours stream_options.include_usage")
	expect(t, r, "stream.done", StatusPass, "[DONE]", "")
	if !r.OK {
		t.Error("a warning alone must not fail the report")
	}
	if r.Metrics == nil || !r.Metrics.TokensEstimated || r.Metrics.OutputTokens != 8 {
		t.Errorf("metrics %+v, want 8 chunks counted as tokens", r.Metrics)
	}
}

// An llmgate gateway says in Server-Timing how the time divided; doctor
// passes it on, and warns when the gateway's own share is far from its
// usual tens of microseconds. An endpoint that says nothing gets no such
// line.
func TestRun_GatewaysOwnTimeIsReportedAndASlowOneWarns(t *testing.T) {
	for _, c := range []struct {
		header, detail string
		status         Status
	}{
		{"gateway;dur=0.042, backend;dur=12.5", "the gateway says: 0.042 ms of its own, 12 ms waiting for the backend;", StatusPass},
		{"gateway;dur=250.4, backend;dur=3, wait;dur=1500", "the gateway says: 250 ms of its own, 3.0 ms waiting for the backend, 1500 ms waiting in a queue", StatusWarn},
		{"", "", StatusPass},
	} {
		f := newFake()
		f.serverTiming = c.header
		srv := httptest.NewServer(f)
		r := run(t, baseOpts(t, srv.URL, f))
		srv.Close()
		p := must(t, r, "perf")
		if p.Status != c.status || !strings.Contains(p.Detail, c.detail) {
			t.Errorf("Server-Timing %q: perf %s %q, want %s with %q", c.header, p.Status, p.Detail, c.status, c.detail)
		}
		if c.header == "" && (strings.Contains(p.Detail, "gateway says") || r.Metrics.Timing != nil) {
			t.Errorf("no Server-Timing, yet perf says %q (timing %+v)", p.Detail, r.Metrics.Timing)
		}
		if c.status == StatusWarn && !strings.Contains(p.Fix, "spool_dir") {
			t.Errorf("a slow gateway's fix %q does not point at the host and the journal's disk", p.Fix)
		}
	}
}

func TestRun_StreamWithoutDoneFails(t *testing.T) {
	f := newFake()
	f.noDone = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "stream.done", StatusFail, "ended without data: [DONE]", "End every stream with `data: [DONE]`")
	expect(t, r, "stream", StatusPass, "8 content chunks", "")
	if r.OK {
		t.Error("report passed without [DONE]")
	}
}

func TestRun_MissingAnthropicEndpointWarnsUnlessRequired(t *testing.T) {
	f := newFake()
	f.noAnthropic = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	r := run(t, o)
	expect(t, r, "anthropic", StatusWarn, "HTTP 404", "llmgate serve")
	if !r.OK {
		t.Error("missing Anthropic endpoint must be a warning by default")
	}
	o.RequireAnthropic = true
	r = run(t, o)
	expect(t, r, "anthropic", StatusFail, "HTTP 404", "llmgate serve")
}

func TestRun_MissingResponsesAPIWarnsForCodex(t *testing.T) {
	f := newFake()
	f.noResponses = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "responses", StatusWarn, "HTTP 404: no Responses API", "Codex speaks only the Responses API")
	if !r.OK {
		t.Error("a missing Responses API must be a warning")
	}
}

func TestRun_AnthropicStreamWithoutStartUsageFails(t *testing.T) {
	f := newFake()
	f.noStartUsage = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "anthropic.stream", StatusFail, "message_start has no message.usage", "official Anthropic SDKs")
}

func TestRun_ConnectionRefusedNamesTheLayer(t *testing.T) {
	addr := closedPort(t)
	f := newFake()
	o := baseOpts(t, "http://"+addr, f)
	r := run(t, o)
	expect(t, r, "net.dns", StatusPass, "IP address", "")
	expect(t, r, "net.tcp", StatusFail, "connection refused", "Nothing listens on "+addr)
	expect(t, r, "chat", StatusSkip, "TCP failed", "")
}

func TestRun_LocalhostResolvingToIPv6FirstWarns(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f) // listens on 127.0.0.1 only
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	o := baseOpts(t, "http://localhost:"+port, f)
	o.LookupHost = func(context.Context, string) ([]string, error) { return []string{"::1", "127.0.0.1"}, nil }
	r := run(t, o)
	expect(t, r, "net.tcp", StatusWarn, "after [::1]:"+port+" failed", "Use 127.0.0.1 instead of localhost")
	expect(t, r, "chat", StatusPass, "OK", "")
}

func TestRun_UnresolvableHostFailsDNS(t *testing.T) {
	f := newFake()
	o := baseOpts(t, "http://gateway.invalid:4000", f)
	o.LookupHost = func(context.Context, string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", Name: "gateway.invalid", IsNotFound: true}
	}
	r := run(t, o)
	expect(t, r, "net.dns", StatusFail, "cannot resolve gateway.invalid", "Docker service names")
}

func TestRun_HTMLAtModelsPointsAtWebPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><html><body>Open WebUI</body></html>"))
	}))
	defer srv.Close()
	f := newFake()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "models", StatusFail, "HTML page", "not at a web page")
}

func TestRun_DefaultsComeFromEnvironment(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.BaseURL, o.APIKey, o.Model = "", "", ""
	o.LookupEnv = envMap("ANTHROPIC_BASE_URL", srv.URL, "ANTHROPIC_AUTH_TOKEN", f.key, "OPENAI_API_KEY", "sk-other-key-000000000000")
	r := run(t, o)
	if r.BaseURL != srv.URL+"/v1" || r.BaseURLSource != "ANTHROPIC_BASE_URL" || r.KeySource != "ANTHROPIC_AUTH_TOKEN" {
		t.Errorf("resolved %s from %s, key from %s", r.BaseURL, r.BaseURLSource, r.KeySource)
	}
	if r.Model != f.models[0] || r.ModelSource != "first listed model" {
		t.Errorf("model %q from %q", r.Model, r.ModelSource)
	}
	if !r.OK {
		t.Errorf("failed: %+v", r.Checks)
	}
}

func TestReport_TextAndJSONCarryFixes(t *testing.T) {
	f := newFake()
	f.noDone = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{"✓ ", "✗ stream ends with [DONE]", "→ End every stream", "1 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.OK || back.Failed != 1 || back.Check("stream.done").Fix == "" {
		t.Errorf("JSON round trip lost data: ok=%v failed=%d", back.OK, back.Failed)
	}
	if strings.Contains(js.String(), f.key) {
		t.Error("JSON report contains the full key")
	}
}

func TestRun_CancelledContextReturnsPromptly(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	r := Run(ctx, baseOpts(t, srv.URL, f))
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %s after cancellation", time.Since(start))
	}
	if r.OK {
		t.Error("a cancelled run must not pass")
	}
}

// connKey holds, in a connection's context, whether a streamed answer
// went out on it.
type connKey struct{}

// TestRun_ServerClosingAKeptAliveConnectionAfterAStreamIsResentAndReported
// mimics llama.cpp's llama-server, which closes a connection after each
// streamed answer while saying keep-alive: the next request sent on it
// gets no answer. Doctor resends such requests on a fresh connection (no
// check fails for it) and says what clients that do not retry will see.
func TestRun_ServerClosingAKeptAliveConnectionAfterAStreamIsResentAndReported(t *testing.T) {
	f := newFake()
	var closed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		streamed := r.Context().Value(connKey{}).(*atomic.Bool)
		if streamed.Load() {
			closed.Add(1)
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close() // no answer on a connection that carried a stream
			}
			return
		}
		f.ServeHTTP(w, r)
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			streamed.Store(true)
		}
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Bool))
	}
	srv.Start()
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	if closed.Load() == 0 {
		t.Fatal("the test server closed no connection: the test proves nothing")
	}
	for _, c := range r.Checks {
		if c.Status == StatusFail {
			t.Errorf("%s failed: %s", c.ID, c.Detail)
		}
	}
	c := expect(t, r, "net.keepalive", StatusWarn, "resent those requests on fresh connections", "retry")
	if want := fmt.Sprintf("closed %d kept-alive", closed.Load()); !strings.Contains(c.Detail, want) {
		t.Errorf("detail %q, want %q", c.Detail, want)
	}
}

// A thinking model cut at max_tokens while reasoning answers with no
// content: doctor says so rather than quoting an empty answer.
func TestRun_ChatAnsweredOnlyInReasoningSaysSo(t *testing.T) {
	f := newFake()
	f.thinkOnly = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	c := expect(t, r, "chat", StatusPass, "answered only in its reasoning (“Okay, the user says hi. I should”, 32 characters; finish_reason length)", "")
	if !strings.Contains(c.Detail, "9 prompt + 16 completion tokens") {
		t.Errorf("usage missing: %s", c.Detail)
	}
}

// An endpoint that answers plain chat but refuses tools breaks every
// coding agent: the tools check fails and says what switches tools on.
func TestRun_ToolsRefusedAreAFailureWithTheServersFix(t *testing.T) {
	for _, tc := range []struct {
		status      int
		msg, fixHas string
	}{
		{500, "tools param requires --jinja flag", "add --jinja"},
		{400, "registry.ollama.ai/library/gemma3:270m does not support tools", "--tool-call-parser"},
	} {
		f := newFake()
		f.toolsRefused, f.toolsMessage = tc.status, tc.msg
		srv := httptest.NewServer(f)
		r := run(t, baseOpts(t, srv.URL, f))
		expect(t, r, "chat", StatusPass, "answered", "")
		expect(t, r, "tools", StatusFail, fmt.Sprintf("HTTP %d, where the same request without one passed: %s", tc.status, tc.msg), tc.fixHas)
		srv.Close()
	}
	// The refusal hidden in a 200 (an error envelope, no choices) fails too.
	f := newFake()
	f.toolsRefused, f.toolsMessage = http.StatusOK, "tools are not enabled on this deployment"
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "tools", StatusFail, "HTTP 200 without choices", "4xx/5xx status")
}

// OpenAI's newer models refuse max_tokens: the chat, tool and stream
// checks send max_completion_tokens instead, as those models' clients do,
// and pass.
func TestRun_ChatChecksRetryWithMaxCompletionTokens(t *testing.T) {
	f := newFake()
	f.newOpenAI = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "chat", StatusPass, "answered", "")
	expect(t, r, "tools", StatusPass, "was answered", "")
	expect(t, r, "stream", StatusPass, "content chunks", "")
}
