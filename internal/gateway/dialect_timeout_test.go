package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	asdk "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	osdk "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/ledger"
	"llmgate/internal/testenv"
	"llmgate/internal/testenv/testdb"
)

// These tests cover the translated endpoints (/v1/messages for Claude Code
// and the Anthropic SDKs, /v1/responses for Codex) against backends that
// hang: the idle gap between stream events, the first-event time-out and
// the backend's overall timeout, each ending in the client's own protocol
// with a usage record; and the SSE keep-alive a streaming client of either
// dialect gets while a local engine starts.

const (
	messagesStream  = `{"model":%q,"max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Say hello"}]}`
	messagesPlain   = `{"model":%q,"max_tokens":64,"messages":[{"role":"user","content":"Say hello"}]}`
	responsesStream = `{"model":%q,"stream":true,"store":false,"input":"Say hello"}`
	responsesPlain  = `{"model":%q,"store":false,"input":"Say hello"}`
)

// The Anthropic backend's stream, in the order it sends it.
var anthropicEvents = []struct{ name, data string }{
	{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-up","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":21,"output_tokens":1}}}`},
	{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello "}}`},
}

// anthropicStallAfter answers like the Anthropic API: the stream headers,
// the first n events, then nothing until the gateway gives up. A request
// that is not a stream hangs.
func anthropicStallAfter(n int) func(*faultUpstream, http.ResponseWriter, *http.Request) {
	return func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		var body struct {
			Stream bool `json:"stream"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		if body.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for _, ev := range anthropicEvents[:n] {
				fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
				w.(http.Flusher).Flush()
			}
		}
		<-r.Context().Done()
	}
}

// dialectGW is a gateway whose log is kept and whose backends named at
// its start lease a fake local engine, which a test makes wait or fail
// (fakeEngine).
type dialectGW struct {
	*faultGW
	engines *fakeEngines
	log     *testenv.SyncBuffer
}

// fakeEngines stands in for the engine manager as the tables' Leaser: a
// backend it manages takes its lease from the hook fakeEngine set for it
// last (none: at once).
type fakeEngines struct {
	names map[string]bool
	mu    sync.Mutex
	hooks map[string]func(context.Context) (func(error) error, error)
}

func (f *fakeEngines) Manages(backend string) bool { return f.names[backend] }

func (f *fakeEngines) Lease(ctx context.Context, backend, _ string) (func(error) error, error) {
	f.mu.Lock()
	hook := f.hooks[backend]
	f.mu.Unlock()
	if hook == nil {
		return func(err error) error { return err }, nil
	}
	return hook(ctx)
}

func startDialectGW(t *testing.T, src string, engines ...string) *dialectGW {
	t.Helper()
	cfg, err := config.Load(strings.NewReader(src), "dialect.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = testdb.SQLite(t, t.TempDir(), "llmgate.db")
	cfg.Listen = "127.0.0.1:0"
	d := &dialectGW{log: &testenv.SyncBuffer{}, engines: &fakeEngines{names: map[string]bool{}, hooks: map[string]func(context.Context) (func(error) error, error){}}}
	for _, name := range engines {
		d.engines.names[name] = true
	}
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster,
		Logger: slog.New(slog.NewTextHandler(d.log, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond},
		Leaser: d.engines})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	d.faultGW = &faultGW{t: t, g: g}
	return d
}

// fakeEngine makes the lease of model's backend (a fake local engine's)
// block until proceed is closed (or the request ends) and then return
// fail, nil meaning the engine is ready.
func (d *dialectGW) fakeEngine(model string, proceed <-chan struct{}, fail error) {
	d.t.Helper()
	t := d.g.Tables.Load()
	route, err := t.Route(model)
	if err != nil {
		d.t.Fatal(err)
	}
	name := route.Deployments[0].Backend.Name
	if t.Leaser(name) == nil {
		d.t.Fatalf("backend %q leases no engine: name it when starting the gateway", name)
	}
	d.engines.mu.Lock()
	defer d.engines.mu.Unlock()
	d.engines.hooks[name] = func(ctx context.Context) (func(error) error, error) {
		select {
		case <-proceed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fail != nil {
			return nil, fail
		}
		return func(err error) error { return err }, nil
	}
}

// post is faultGW.request with a deadline: a regression that lets a
// stream hang fails the test instead of stalling it.
func (d *dialectGW) post(path, body string) (int, http.Header, string) {
	d.t.Helper()
	req, _ := http.NewRequestWithContext(dialectCtx(d.t), "POST", "http://"+d.g.Addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testMaster)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatalf("reading %s: %v", path, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// dialectCtx bounds a test's requests.
func dialectCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (d *dialectGW) anthropicClient() asdk.Client {
	return asdk.NewClient(aoption.WithBaseURL("http://"+d.g.Addr+"/"), aoption.WithAPIKey(testMaster), aoption.WithMaxRetries(0))
}

func (d *dialectGW) openaiClient() osdk.Client {
	return osdk.NewClient(ooption.WithBaseURL("http://"+d.g.Addr+"/v1/"), ooption.WithAPIKey(testMaster), ooption.WithMaxRetries(0))
}

func messagesParams(model string) asdk.MessageNewParams {
	return asdk.MessageNewParams{Model: asdk.Model(model), MaxTokens: 64,
		Messages: []asdk.MessageParam{asdk.NewUserMessage(asdk.NewTextBlock("Say hello"))}}
}

func responsesParams(model string) responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: model, Store: osdk.Bool(false),
		Input: responses.ResponseNewParamsInputUnion{OfString: osdk.String("Say hello")}}
}

// readAnthropicStream reads a Messages stream with the official SDK and
// returns the text it accumulated and the stream's error.
func readAnthropicStream(t *testing.T, c asdk.Client, ctx context.Context, model string) (string, error) {
	t.Helper()
	s := c.Messages.NewStreaming(ctx, messagesParams(model))
	defer s.Close()
	var msg asdk.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatalf("accumulate: %v", err)
		}
	}
	var text strings.Builder
	for _, b := range msg.Content {
		text.WriteString(b.Text)
	}
	return text.String(), s.Err()
}

// readResponsesStream reads a Responses stream with openai-go and returns
// the event types, the output text deltas and the last event.
func readResponsesStream(t *testing.T, c osdk.Client, ctx context.Context, model string) (types []string, text string, last responses.ResponseStreamEventUnion, err error) {
	t.Helper()
	s := c.Responses.NewStreaming(ctx, responsesParams(model))
	defer s.Close()
	var errEvent responses.ResponseStreamEventUnion
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
		if ev.Type == "error" {
			errEvent = ev
		}
		last = ev
	}
	if errEvent.Type == "error" && last.Type != "response.failed" {
		t.Errorf("error event not followed by response.failed: %v", types)
	}
	return types, text, last, s.Err()
}

// anthropicErrorBody decodes an Anthropic error envelope.
func anthropicErrorBody(t *testing.T, body string) (typ, msg string) {
	t.Helper()
	var env struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || env.Type != "error" {
		t.Fatalf("not an Anthropic error envelope: %q", body)
	}
	return env.Error.Type, env.Error.Message
}

// sseEvents splits a raw SSE body into its comments and (name, data)
// events.
func sseEvents(body string) (comments []string, events [][2]string) {
	for _, block := range strings.Split(body, "\n\n") {
		var name, data string
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				comments = append(comments, strings.TrimSpace(line[1:]))
			case strings.HasPrefix(line, "event: "):
				name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				data = line[len("data: "):]
			}
		}
		if name != "" || data != "" {
			events = append(events, [2]string{name, data})
		}
	}
	return comments, events
}

func endedWithin(t *testing.T, start time.Time, min time.Duration) {
	t.Helper()
	if el := time.Since(start); el < min || el > 5*time.Second {
		t.Fatalf("the stream ended after %v; want between %v and 5s", el, min)
	}
}

func TestDialectTimeout_MessagesStreamIdleGapEndsWithAnthropicTimeoutError(t *testing.T) {
	t.Parallel()
	stalls := newUpstream(t, "stalls", stallAfter(1))
	gw := startDialectGW(t, fmt.Sprintf(`
backends:
  stalls: {url: %s, idle_timeout: 200ms}
models:
  m: {backend: stalls}
`, stalls.URL))
	start := time.Now()
	text, err := readAnthropicStream(t, gw.anthropicClient(), dialectCtx(t), "m")
	endedWithin(t, start, 200*time.Millisecond)
	if text != "part0 " || err == nil {
		t.Fatalf("text %q, err %v; want the first delta, then the SDK raising the error event", text, err)
	}
	for _, want := range []string{`"type":"timeout_error"`, `backend \"stalls\" sent no stream event for 200ms`, "raise backends.stalls.idle_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("SDK error %q lacks %q", err, want)
		}
	}
	rec := gw.ledger(1)[0]
	if rec.Status != 504 || rec.ErrorType != "stream_idle_timeout" || rec.Endpoint != "messages" || rec.Backend != "stalls" ||
		rec.CompletionTokens == 0 || rec.PromptTokens == 0 || !rec.Estimated {
		t.Fatalf("ledger %+v; want a 504 stream_idle_timeout record with the tokens seen (estimated)", rec)
	}
}

func TestDialectTimeout_ResponsesStreamIdleGapEndsWithResponseFailed(t *testing.T) {
	stalls := newUpstream(t, "stalls", stallAfter(1))
	gw := startDialectGW(t, fmt.Sprintf(`
backends:
  stalls: {url: %s, idle_timeout: 200ms}
models:
  m: {backend: stalls}
`, stalls.URL))
	start := time.Now()
	types, text, last, err := readResponsesStream(t, gw.openaiClient(), dialectCtx(t), "m")
	endedWithin(t, start, 200*time.Millisecond)
	if err != nil || text != "part0 " || last.Type != "response.failed" || types[0] != "response.created" {
		t.Fatalf("events %v text %q err %v; want the delta, then error and response.failed", types, text, err)
	}
	r := last.Response
	if r.Status != "failed" || !strings.Contains(r.Error.Message, "raise backends.stalls.idle_timeout") || r.Error.Code != "server_error" {
		t.Fatalf("response.failed: status %s error %+v", r.Status, r.Error)
	}
	rec := gw.ledger(1)[0]
	if rec.Status != 504 || rec.ErrorType != "stream_idle_timeout" || rec.Endpoint != "responses" || rec.CompletionTokens == 0 {
		t.Fatalf("ledger %+v", rec)
	}
}

// A backend that sends stream headers and then nothing is caught by
// first_byte_timeout before the client got anything: the attempt fails
// uncommitted, so another deployment serves it, or (the only one) the
// client gets a 504 in its protocol's envelope.
func TestDialectTimeout_FirstEventTimeoutFailsOverOrAnswers504(t *testing.T) {
	t.Parallel()
	silent := newUpstream(t, "silent", stallAfter(0))
	good := newUpstream(t, "good", answer)
	anSilent := newUpstream(t, "an-silent", anthropicStallAfter(0))
	gw := startDialectGW(t, fmt.Sprintf(`
backends:
  silent: {url: %s, first_byte_timeout: 200ms}
  good: {url: %s}
  an-silent: {url: %s, dialect: anthropic, first_byte_timeout: 200ms}
models:
  failover: {deployments: [{backend: silent}, {backend: good, priority: 1}]}
  only: {backend: silent}
  claude: {backend: an-silent}
`, silent.URL, good.URL, anSilent.URL))

	// Failover: the client never notices.
	text, err := readAnthropicStream(t, gw.anthropicClient(), dialectCtx(t), "failover")
	if err != nil || text != "from good" {
		t.Fatalf("failover: text %q err %v", text, err)
	}
	wantHits(t, map[*faultUpstream]int64{silent: 1, good: 1})
	if rec := gw.ledger(1)[0]; rec.Status != 200 || rec.Backend != "good" {
		t.Fatalf("failover ledger %+v", rec)
	}

	// The only deployment, translated and passed through: a 504.
	for i, tc := range []struct{ model, backend string }{{"only", "silent"}, {"claude", "an-silent"}} {
		start := time.Now()
		code, hdr, body := gw.post("/v1/messages", fmt.Sprintf(messagesStream, tc.model))
		endedWithin(t, start, 200*time.Millisecond)
		typ, msg := anthropicErrorBody(t, body)
		// "within first_byte_timeout" whether the stream's first event or
		// (on a loaded machine) the response headers were what came late.
		if code != 504 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") || typ != "timeout_error" ||
			!strings.Contains(msg, "within first_byte_timeout") || !strings.Contains(msg, "raise backends."+tc.backend+".first_byte_timeout") {
			t.Fatalf("%s: %d %s %s", tc.model, code, hdr.Get("Content-Type"), body)
		}
		rec := gw.ledger(2 + i)[0]
		if rec.Status != 504 || rec.ErrorType != "backend_timeout" || rec.Backend != tc.backend || rec.Endpoint != "messages" {
			t.Fatalf("%s: ledger %+v", tc.model, rec)
		}
	}
	start := time.Now()
	code, _, body := gw.post("/v1/responses", fmt.Sprintf(responsesStream, "only"))
	endedWithin(t, start, 200*time.Millisecond)
	if code != 504 || !strings.Contains(body, `"code":"backend_timeout"`) || !strings.Contains(body, "first_byte_timeout") {
		t.Fatalf("responses: %d %s", code, body)
	}
	gw.ledger(4)
}

// An Anthropic backend that goes quiet mid-stream: the passthrough
// (/v1/messages) and both translations from it (/v1/responses,
// /v1/chat/completions) end with their protocol's error, and the ledger
// keeps the input tokens message_start reported.
func TestDialectTimeout_AnthropicBackendIdleGapInEveryClientProtocol(t *testing.T) {
	t.Parallel()
	an := newUpstream(t, "an", anthropicStallAfter(3))
	gw := startDialectGW(t, fmt.Sprintf(`
backends:
  an: {url: %s, dialect: anthropic, idle_timeout: 200ms}
models:
  claude: {backend: an}
`, an.URL))
	cases := []struct {
		path, body string
		check      func(t *testing.T, events [][2]string)
	}{
		{"/v1/messages", fmt.Sprintf(messagesStream, "claude"), func(t *testing.T, events [][2]string) {
			last := events[len(events)-1]
			typ, msg := anthropicErrorBody(t, last[1])
			if last[0] != "error" || typ != "timeout_error" || !strings.Contains(msg, "raise backends.an.idle_timeout") ||
				events[0][0] != "message_start" || len(events) != 4 {
				t.Fatalf("passthrough events %v", events)
			}
		}},
		{"/v1/responses", fmt.Sprintf(responsesStream, "claude"), func(t *testing.T, events [][2]string) {
			n := len(events)
			if n < 2 || events[n-2][0] != "error" || events[n-1][0] != "response.failed" || !strings.Contains(events[n-2][1], "raise backends.an.idle_timeout") {
				t.Fatalf("responses events %v", events)
			}
		}},
		{"/v1/chat/completions", `{"model":"claude","stream":true,"messages":[{"role":"user","content":"Say hello"}]}`, func(t *testing.T, events [][2]string) {
			last := events[len(events)-1][1]
			if !strings.Contains(last, `"code":"stream_idle_timeout"`) || !strings.Contains(last, "raise backends.an.idle_timeout") {
				t.Fatalf("chat events %v", events)
			}
		}},
	}
	for i, tc := range cases {
		start := time.Now()
		code, hdr, body := gw.post(tc.path, tc.body)
		endedWithin(t, start, 200*time.Millisecond)
		if code != 200 || hdr.Get("Content-Type") != "text/event-stream" || !strings.Contains(body, "Hello ") {
			t.Fatalf("%s: %d %s %q", tc.path, code, hdr.Get("Content-Type"), body)
		}
		_, events := sseEvents(body)
		tc.check(t, events)
		rec := gw.ledger(i + 1)[0]
		if rec.Status != 504 || rec.ErrorType != "stream_idle_timeout" || rec.Backend != "an" || rec.PromptTokens != 21 {
			t.Fatalf("%s: ledger %+v", tc.path, rec)
		}
	}
}

// Non-streaming translated requests keep obeying backends.<name>.timeout.
func TestDialectTimeout_NonStreamingObeysBackendTimeout(t *testing.T) {
	t.Parallel()
	oa := newUpstream(t, "oa", hang)
	an := newUpstream(t, "an", anthropicStallAfter(0))
	gw := startDialectGW(t, fmt.Sprintf(`
backends:
  oa: {url: %s, timeout: 300ms}
  an: {url: %s, dialect: anthropic, timeout: 300ms}
models:
  gpt: {backend: oa}
  claude: {backend: an}
`, oa.URL, an.URL))
	cases := []struct{ path, model, backend string }{
		{"/v1/messages", "gpt", "oa"}, {"/v1/messages", "claude", "an"},
		{"/v1/responses", "gpt", "oa"}, {"/v1/responses", "claude", "an"},
	}
	for i, tc := range cases {
		body := fmt.Sprintf(messagesPlain, tc.model)
		if tc.path == "/v1/responses" {
			body = fmt.Sprintf(responsesPlain, tc.model)
		}
		start := time.Now()
		code, _, resp := gw.post(tc.path, body)
		endedWithin(t, start, 300*time.Millisecond)
		if code != 504 || !strings.Contains(resp, "raise backends."+tc.backend+".timeout") {
			t.Fatalf("%s %s: %d %s", tc.path, tc.model, code, resp)
		}
		if tc.path == "/v1/messages" {
			if typ, _ := anthropicErrorBody(t, resp); typ != "timeout_error" {
				t.Fatalf("%s %s: error type %s", tc.path, tc.model, typ)
			}
		} else if !strings.Contains(resp, `"code":"backend_timeout"`) {
			t.Fatalf("%s %s: %s", tc.path, tc.model, resp)
		}
		if rec := gw.ledger(i + 1)[0]; rec.Status != 504 || rec.ErrorType != "backend_timeout" || rec.Backend != tc.backend {
			t.Fatalf("%s %s: ledger %+v", tc.path, tc.model, rec)
		}
	}
}

// A streaming client of either translated dialect waiting for a local
// engine gets the SSE headers and keep-alive comments, which the official
// SDKs skip, and then its answer.
func TestDialectEngine_KeepAliveWhileEngineStarts(t *testing.T) {
	t.Parallel()
	good := newUpstream(t, "eng", answer)
	gw := startDialectGW(t, fmt.Sprintf(`
backends:
  eng: {url: %s}
models:
  m: {backend: eng}
`, good.URL), "eng")

	// Raw: the headers and the first comment arrive while the lease still
	// blocks; the answer follows once the engine is ready.
	for _, tc := range []struct{ path, body, lastEvent string }{
		{"/v1/messages", fmt.Sprintf(messagesStream, "m"), "message_stop"},
		{"/v1/responses", fmt.Sprintf(responsesStream, "m"), "response.completed"},
	} {
		proceed := make(chan struct{})
		gw.fakeEngine("m", proceed, nil)
		req, _ := http.NewRequestWithContext(dialectCtx(t), "POST", "http://"+gw.g.Addr+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+testMaster)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("%s: headers before the engine is ready: %d %v", tc.path, resp.StatusCode, resp.Header)
		}
		br := bufio.NewReader(resp.Body)
		first, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(first, ": waiting for engine eng (") {
			t.Fatalf("%s: first line %q (%v); want a keep-alive comment", tc.path, first, err)
		}
		close(proceed)
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		_, events := sseEvents(first + string(rest))
		if len(events) == 0 || events[len(events)-1][0] != tc.lastEvent || !strings.Contains(string(rest), `"eng"`) {
			t.Fatalf("%s: after the wait: %q", tc.path, rest)
		}
	}

	// The SDKs: NewStreaming returns once the headers (sent with the first
	// keep-alive) arrived; the engine is then let go.
	proceed := make(chan struct{})
	gw.fakeEngine("m", proceed, nil)
	ac := gw.anthropicClient()
	s := ac.Messages.NewStreaming(dialectCtx(t), messagesParams("m"))
	close(proceed)
	var msg asdk.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil || len(msg.Content) != 1 || msg.Content[0].Text != "from eng" || msg.StopReason != "end_turn" {
		t.Fatalf("anthropic SDK: %+v, %v", msg, err)
	}
	s.Close()

	proceed = make(chan struct{})
	gw.fakeEngine("m", proceed, nil)
	oc := gw.openaiClient()
	rs := oc.Responses.NewStreaming(dialectCtx(t), responsesParams("m"))
	close(proceed)
	var last responses.ResponseStreamEventUnion
	for rs.Next() {
		last = rs.Current()
	}
	if err := rs.Err(); err != nil || last.Type != "response.completed" || last.Response.OutputText() != "from eng" {
		t.Fatalf("openai SDK: last %s %q, %v", last.Type, last.Response.OutputText(), err)
	}
	rs.Close()
	gw.ledger(4)
	if strings.Contains(gw.log.String(), "superfluous") {
		t.Fatalf("headers written twice:\n%s", gw.log.String())
	}
}

// An engine that fails to start after keep-alive comments were sent, and
// one that starts but whose backend then stalls before its first event,
// end the stream with an error event in the client's protocol instead of a
// second set of headers; the ledger records the failure.
func TestDialectEngine_FailureAfterKeepAliveIsAnInStreamError(t *testing.T) {
	t.Parallel()
	good := newUpstream(t, "eng", answer)
	// The silent backend stalls its answers, but not a question for its
	// models' context lengths, which would otherwise wait out its 2 s
	// fetch time-out.
	stall := stallAfter(0)
	silent := newUpstream(t, "silent", func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			http.NotFound(w, r)
			return
		}
		stall(u, w, r)
	})
	gw := startDialectGW(t, fmt.Sprintf(`
backends:
  eng: {url: %s}
  silent: {url: %s, first_byte_timeout: 200ms}
models:
  m: {backend: eng}
  s: {backend: silent}
`, good.URL, silent.URL), "eng", "silent")
	startFail := apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_startup_timeout",
		`engine "eng" did not become ready within 1s; raise engines.eng.startup_timeout`)
	n := 0
	for _, tc := range []struct {
		model  string
		fail   error
		status int
		code   string
		anType string
		msg    string
	}{
		{"m", startFail, 503, "engine_startup_timeout", "overloaded_error", "did not become ready"},
		{"s", nil, 504, "backend_timeout", "timeout_error", "raise backends.silent.first_byte_timeout"},
	} {
		// Messages, read with the Anthropic SDK: the error event is raised.
		proceed := make(chan struct{})
		gw.fakeEngine(tc.model, proceed, tc.fail)
		ac := gw.anthropicClient()
		s := ac.Messages.NewStreaming(dialectCtx(t), messagesParams(tc.model))
		close(proceed)
		for s.Next() {
		}
		err := s.Err()
		s.Close()
		if err == nil || !strings.Contains(err.Error(), `"type":"`+tc.anType+`"`) || !strings.Contains(err.Error(), tc.msg) {
			t.Fatalf("%s messages: SDK error %v; want %s with %q", tc.model, err, tc.anType, tc.msg)
		}
		n++
		if rec := gw.ledger(n)[0]; rec.Status != tc.status || rec.ErrorType != tc.code || rec.Endpoint != "messages" {
			t.Fatalf("%s messages: ledger %+v", tc.model, rec)
		}

		// Responses, read with openai-go: error then response.failed.
		proceed = make(chan struct{})
		gw.fakeEngine(tc.model, proceed, tc.fail)
		oc := gw.openaiClient()
		rs := oc.Responses.NewStreaming(dialectCtx(t), responsesParams(tc.model))
		close(proceed)
		var types []string
		var last responses.ResponseStreamEventUnion
		for rs.Next() {
			last = rs.Current()
			types = append(types, last.Type)
		}
		if err := rs.Err(); err != nil || last.Type != "response.failed" || !strings.Contains(last.Response.Error.Message, tc.msg) ||
			strings.Join(types, ",") != "response.created,response.in_progress,error,response.failed" {
			t.Fatalf("%s responses: events %v last %+v err %v", tc.model, types, last.Response.Error, err)
		}
		rs.Close()
		n++
		if rec := gw.ledger(n)[0]; rec.Status != tc.status || rec.ErrorType != tc.code || rec.Endpoint != "responses" {
			t.Fatalf("%s responses: ledger %+v", tc.model, rec)
		}
	}
	if strings.Contains(gw.log.String(), "superfluous") {
		t.Fatalf("headers written twice:\n%s", gw.log.String())
	}
}

// Translated streams treat a backend's comment keep-alives as a sign of
// life too: the Anthropic SDK gets the whole answer across a gap longer
// than idle_timeout.
func TestDialectTimeout_MessagesStreamSurvivesKeepAliveGap(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "pings", keepAliveThen(keepAliveGap, true))
	gw := startDialectGW(t, fmt.Sprintf(`
backends:
  pings: {url: %s, idle_timeout: %s}
models:
  m: {backend: pings}
`, up.URL, keepAliveIdle))
	text, err := readAnthropicStream(t, gw.anthropicClient(), dialectCtx(t), "m")
	if err != nil || text != "part0 from pings" {
		t.Fatalf("text %q, err %v; want the whole answer", text, err)
	}
}
