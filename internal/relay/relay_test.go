package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/codec"
	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/relay"
	"llmgate/internal/router"
)

var refusal = apierror.New(http.StatusTooManyRequests, apierror.KindRateLimit, "rate_limit_exceeded", "key over its limit")

// outcomes are what a backend does; each model routes to two deployments
// ("<outcome>-a" first, "<outcome>-b" second) so that retries show.
var outcomes = []string{"ok", "refused", "rejected", "err500", "err429", "err200", "cutbefore", "cutafter", "slow", "fto"}

// clients are the client dialects with their request bodies (%s is the
// model, %v the stream flag). Every generating body sets an output limit
// of 50 in its own dialect's field.
var clients = []struct {
	name    string
	dialect codec.Dialect
	path    string
	body    string
}{
	{"chat", codec.Chat, "/v1/chat/completions", `{"model":%q,"stream":%v,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
	{"completions", codec.Completions, "/v1/completions", `{"model":%q,"stream":%v,"max_tokens":50,"prompt":"hi"}`},
	{"embeddings", codec.Embeddings, "/v1/embeddings", `{"model":%q,"input":"hi"}`},
	{"rerank", codec.Rerank, "/v1/rerank", `{"model":%q,"query":"q","documents":["a","b"]}`},
	{"responses", codec.Responses, "/v1/responses", `{"model":%q,"stream":%v,"max_output_tokens":50,"input":"hi","store":false}`},
	{"messages", codec.Messages, "/v1/messages", `{"model":%q,"stream":%v,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
	{"count_tokens", codec.CountTokens, "/v1/messages/count_tokens", `{"model":%q,"messages":[{"role":"user","content":"hi"}]}`},
}

// harness is one relay over a static routing table in front of two fake
// backends (OpenAI and Anthropic dialect), with no gateway around it.
type harness struct {
	oa, an *fakeBackend
	led    *recLedger
	adm    *recAdmission
	srv    *httptest.Server
	served chan struct{}
	// client is the request's connection, as the relay wrote to it.
	client *lastBytesWriter
}

func newHarness(t *testing.T) *harness {
	h := &harness{oa: newFakeBackend(t, false), an: newFakeBackend(t, true), led: &recLedger{}, adm: &recAdmission{}, served: make(chan struct{}, 1)}
	var src strings.Builder
	fmt.Fprintf(&src, "routing: {retry_backoff: 1ms}\nbackends:\n  oa-a: {url: %s/v1}\n  oa-b: {url: %s/v1}\n  an-a: {url: %s, dialect: anthropic}\n  an-b: {url: %s, dialect: anthropic}\nmodels:\n",
		h.oa.URL, h.oa.URL, h.an.URL, h.an.URL)
	for _, be := range []string{"oa", "an"} {
		for _, o := range outcomes {
			fmt.Fprintf(&src, "  %s-%s: {deployments: [{backend: %s-a, upstream_model: %s-a, priority: 0}, {backend: %s-b, upstream_model: %s-b, priority: 1}]}\n",
				be, o, be, o, be, o)
		}
	}
	cfg, err := config.Load(strings.NewReader(src.String()), "relay_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	table := router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(table.Close)
	rl := relay.New(relay.Options{Ledger: h.led, Admission: h.adm, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	dialects := map[string]codec.Dialect{}
	for _, c := range clients {
		dialects[c.path] = c.dialect
	}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(harnessHeader) != t.Name() {
			// Not this case's client: another case's relay, still asking
			// its backend (a recheck in the background), at a port this
			// server got again once that backend was closed.
			http.NotFound(w, r)
			return
		}
		defer func() { h.served <- struct{}{} }()
		d := dialects[r.URL.Path]
		body, _ := io.ReadAll(r.Body)
		req, err := codec.Decode(d, body)
		if err != nil {
			codec.WriteError(d, w, err)
			return
		}
		h.client = &lastBytesWriter{ResponseWriter: w, led: h.led, id: "req-1"}
		rl.Serve(h.client, r, &relay.Call{ID: "req-1", Start: time.Now(), Principal: keys.Principal{Master: true}, Req: req, Table: table})
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// harnessHeader names the case a request to the harness comes from.
const harnessHeader = "X-Test-Case"

// answer is what the client saw.
type answer struct {
	status int
	header http.Header
	body   string
}

// send makes one request; with leave the client goes away once the
// backend is working on it (after the first event of a stream).
func (h *harness) send(t *testing.T, path, body string, leave bool) answer {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(harnessHeader, t.Name())
	if leave {
		go func() {
			select { // a stream's client leaves after its first event (below)
			case <-h.oa.slowArrived:
			case <-h.an.slowArrived:
			case <-ctx.Done():
				return
			}
			if !strings.Contains(body, `"stream":true`) {
				cancel()
			}
		}()
	}
	// The harness's own client: http.DefaultClient, shared by the
	// parallel cases, could reuse a keep-alive connection to an earlier
	// case's server whose port a later one got again.
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		if leave {
			h.wait(t)
			return answer{}
		}
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if leave {
		// The client leaves once it has the first generated text: the
		// relay has then tapped the event that sets the record's TTFT (the
		// first read may hold only message_start).
		b := make([]byte, 512)
		for !bytes.Contains(buf.Bytes(), []byte("Hello")) {
			n, err := resp.Body.Read(b)
			buf.Write(b[:n])
			if err != nil {
				break
			}
		}
		cancel()
	} else {
		_, _ = io.Copy(&buf, resp.Body)
	}
	h.wait(t)
	return answer{resp.StatusCode, resp.Header, buf.String()}
}

// wait blocks until the relay has finished serving the request.
func (h *harness) wait(t *testing.T) {
	select {
	case <-h.served:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not finish serving within 10s")
	}
}

// want is the expected result of one case.
type want struct {
	status    int // the client's status (0: the client left)
	code      string
	calls     int
	recStatus int
	tokens    [2]int // exact prompt/completion counts when the backend reported them
	estimated bool
	ttftMin   time.Duration // the record's TTFT at least this; 0 with noTTFT for none
	noTTFT    bool
	endEvent  bool // a 200 stream that ends with the dialect's error event
}

func expect(client string, d codec.Dialect, backend, outcome string, stream bool) (want, bool) {
	anthropic := backend == "an"
	unsupported := anthropic && (d == codec.Completions || d == codec.Embeddings || d == codec.Rerank)
	if unsupported {
		if outcome != "ok" {
			return want{}, false
		}
		return want{status: 400, code: "unsupported_endpoint", recStatus: 400, noTTFT: true}, true
	}
	if d == codec.CountTokens {
		switch {
		case outcome == "refused":
		case !anthropic && (outcome == "ok" || outcome == "err500"):
			// The tokenizer, or the estimate when it fails: never a failure.
			return want{status: 200, calls: 1, recStatus: 200}, true
		case anthropic && (outcome == "ok" || outcome == "rejected" || outcome == "err500" || outcome == "err429" || outcome == "err200" || outcome == "fto"):
		default:
			return want{}, false
		}
	}
	if !stream && outcome == "cutafter" {
		return want{}, false // without a stream there is no "after the first event"
	}
	tokens := [2]int{11, 7}
	switch d {
	case codec.Embeddings, codec.Rerank:
		tokens = [2]int{11, 0}
	case codec.CountTokens:
		tokens = [2]int{0, 0}
	}
	switch outcome {
	case "ok":
		return want{status: 200, calls: 1, recStatus: 200, tokens: tokens}, true
	case "fto":
		return want{status: 200, calls: 2, recStatus: 200, tokens: tokens, ttftMin: firstTokenDelay}, true
	case "refused":
		return want{status: 429, code: "rate_limit_exceeded", calls: 0, recStatus: 429, noTTFT: true}, true
	case "rejected":
		return want{status: 400, code: "backend_rejected_request", calls: 1, recStatus: 400, noTTFT: true}, true
	case "err500":
		return want{status: 502, code: "backend_error", calls: 2, recStatus: 502, noTTFT: true}, true
	case "err429":
		return want{status: 429, code: "backend_rate_limited", calls: 2, recStatus: 429, noTTFT: true}, true
	case "err200":
		code := "upstream_error_in_body"
		if stream {
			code = "upstream_stream_error"
		}
		return want{status: 502, code: code, calls: 2, recStatus: 502, noTTFT: true}, true
	case "cutbefore":
		code := "backend_error"
		if stream {
			code = "stream_cut"
		}
		return want{status: 502, code: code, calls: 2, recStatus: 502, noTTFT: true}, true
	case "cutafter":
		return want{status: 200, code: "stream_cut", calls: 1, recStatus: 502, estimated: !anthropic, endEvent: true}, true
	case "slow":
		return want{status: 0, calls: 1, recStatus: apierror.StatusClientClosed, noTTFT: !stream}, true
	}
	panic(outcome)
}

// TestRelay_EveryDialectPairAndOutcome runs every client dialect against
// every backend dialect, streamed and not, through each outcome, and checks
// what the client got, how often the backend was called, the one ledger
// record, and that the backend received the model and output limit the
// gateway admitted.
func TestRelay_EveryDialectPairAndOutcome(t *testing.T) {
	ran := 0
	for _, cl := range clients {
		for _, backend := range []string{"oa", "an"} {
			for _, stream := range []bool{false, true} {
				if stream && !cl.dialect.Generates() {
					continue
				}
				for _, outcome := range outcomes {
					w, ok := expect(cl.name, cl.dialect, backend, outcome, stream)
					if !ok {
						continue
					}
					ran++
					name := fmt.Sprintf("%s/%s/stream=%v/%s", cl.name, backend, stream, outcome)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						body := fmt.Sprintf(cl.body, backend+"-"+outcome)
						if strings.Contains(cl.body, "%v") {
							body = fmt.Sprintf(cl.body, backend+"-"+outcome, stream)
						}
						runCase(t, cl.dialect, cl.path, body, backend, outcome, stream, w)
					})
				}
			}
		}
	}
	if ran < 150 {
		t.Fatalf("only %d cases ran", ran)
	}
}

func runCase(t *testing.T, d codec.Dialect, path, body, backend, outcome string, stream bool, w want) {
	h := newHarness(t)
	got := h.send(t, path, body, outcome == "slow")

	// What the client got.
	if w.status != 0 && got.status != w.status {
		t.Fatalf("status %d, want %d: %s", got.status, w.status, got.body)
	}
	switch {
	case w.status == 0:
	case w.status != 200:
		checkEnvelope(t, d, got.body, w.code)
	case w.endEvent:
		checkErrorEvent(t, d, got.body)
	default:
		checkAnswer(t, d, stream, got)
	}

	// How often each backend was called, and with what.
	be, other := h.oa, h.an
	if backend == "an" {
		be, other = h.an, h.oa
	}
	var calls, tokenized []upstreamCall
	for _, c := range be.Calls() {
		if strings.HasSuffix(c.Path, "/tokenize") && d != codec.CountTokens {
			// A translated Messages stream counts its prompt for
			// message_start.
			tokenized = append(tokenized, c)
			continue
		}
		calls = append(calls, c)
	}
	if len(calls) != w.calls || len(other.Calls()) != 0 {
		t.Fatalf("backend called %d times (other backend %d), want %d: %+v", len(calls), len(other.Calls()), w.calls, calls)
	}
	if d == codec.Messages && stream && backend == "oa" && outcome != "refused" {
		// Counted at each deployment tried, by its own tokenizer, before
		// the attempt there.
		if len(tokenized) != len(calls) {
			t.Errorf("the tokenizer was asked %d times for %d attempts, want once per attempt: %+v", len(tokenized), len(calls), tokenized)
		}
		for i := range min(len(tokenized), len(calls)) {
			if tokenized[i].Model != calls[i].Model {
				t.Errorf("count %d was made for model %q, attempt %d went to %q", i, tokenized[i].Model, i, calls[i].Model)
			}
		}
	} else if len(tokenized) != 0 {
		t.Errorf("the tokenizer was asked %d times, want never", len(tokenized))
	}
	adm := h.adm.Requests()
	if len(adm) != 1 {
		t.Fatalf("admitted %d times, want once", len(adm))
	}
	for i, c := range calls {
		wantModel := outcome + []string{"-a", "-b"}[i]
		if c.Model != wantModel {
			t.Errorf("call %d: backend got model %q, want the deployment's %q", i, c.Model, wantModel)
		}
		if d.Generates() && int64(c.Limit) != adm[0].OutputTokens {
			t.Errorf("call %d: backend got output limit %d, the gateway admitted %d", i, c.Limit, adm[0].OutputTokens)
		}
		if c.Stream != (stream && d.Generates()) {
			t.Errorf("call %d: backend got stream=%v", i, c.Stream)
		}
	}
	if d.Generates() && adm[0].OutputTokens != 50 {
		t.Errorf("admitted output %d, want the request's 50", adm[0].OutputTokens)
	}

	// Exactly one record, from the attempt that served.
	recs := h.led.Records()
	if len(recs) != 1 {
		t.Fatalf("%d ledger records, want 1: %+v", len(recs), recs)
	}
	rec := recs[0]
	// The record was durable before the answer's last bytes left, on
	// every path (a client that left has no last bytes).
	if w.recStatus != apierror.StatusClientClosed && (h.client == nil || h.client.writes == 0 || !h.client.recordedAtLast) {
		t.Errorf("the answer's last bytes were written before its record reached the ledger")
	}
	if rec.Status != w.recStatus {
		t.Errorf("record status %d (%s), want %d", rec.Status, rec.ErrorType, w.recStatus)
	}
	if w.code != "" && w.status != 200 && rec.ErrorType != w.code || w.endEvent && rec.ErrorType != w.code {
		t.Errorf("record error %q, want %q", rec.ErrorType, w.code)
	}
	if w.recStatus == 200 && !w.estimated && (rec.PromptTokens != w.tokens[0] || rec.CompletionTokens != w.tokens[1] || rec.Estimated) {
		t.Errorf("record tokens %d/%d (estimated %v), want %d/%d as the backend reported", rec.PromptTokens, rec.CompletionTokens, rec.Estimated, w.tokens[0], w.tokens[1])
	}
	if w.estimated && (!rec.Estimated || rec.CompletionTokens == 0) {
		t.Errorf("record %+v: a cut stream's output must be estimated from the text seen", rec)
	}
	if w.recStatus != 200 && w.recStatus != apierror.StatusClientClosed && !w.endEvent && rec.CompletionTokens != 0 {
		t.Errorf("a failure before any answer booked %d completion tokens", rec.CompletionTokens)
	}
	switch {
	case w.noTTFT && rec.TTFT != 0:
		t.Errorf("record TTFT %v from an attempt that never answered", rec.TTFT)
	case !w.noTTFT && (rec.TTFT <= 0 || rec.TTFT > rec.Latency):
		t.Errorf("record TTFT %v (latency %v), want the serving attempt's", rec.TTFT, rec.Latency)
	case rec.TTFT < w.ttftMin:
		t.Errorf("record TTFT %v, want at least %v: the failed first attempt's time leaked in", rec.TTFT, w.ttftMin)
	}
	if outcome == "fto" && rec.Backend != backend+"-b" {
		t.Errorf("record backend %q, want the deployment that served (%s-b)", rec.Backend, backend)
	}
}

// checkEnvelope checks an error answer in the dialect's own envelope.
func checkEnvelope(t *testing.T, d codec.Dialect, body, code string) {
	t.Helper()
	if d.Anthropic() {
		var env struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(body), &env) != nil || env.Type != "error" || env.Error.Type == "" || env.Error.Message == "" {
			t.Fatalf("not an Anthropic error envelope: %s", body)
		}
		return
	}
	var env struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(body), &env) != nil || env.Error.Message == "" {
		t.Fatalf("not an OpenAI error envelope: %s", body)
	}
	if env.Error.Code != code {
		t.Fatalf("error code %q, want %q: %s", env.Error.Code, code, body)
	}
}

// checkErrorEvent checks that a stream which broke after its first event
// ends with the dialect's error event.
func checkErrorEvent(t *testing.T, d codec.Dialect, body string) {
	t.Helper()
	var want string
	switch d {
	case codec.Messages:
		want = "event: error\n"
	case codec.Responses:
		want = "event: response.failed\n"
	default:
		want = `data: {"error":`
	}
	if !strings.Contains(body, want) || !strings.Contains(body, "Hello") {
		t.Fatalf("stream lacks the text seen and %q at its end:\n%s", want, body)
	}
}

// checkAnswer checks a successful answer in the dialect's shape.
func checkAnswer(t *testing.T, d codec.Dialect, stream bool, got answer) {
	t.Helper()
	var must []string
	switch {
	case stream && d == codec.Messages:
		must = []string{"event: message_start", "event: message_stop", "Hello"}
	case stream && d == codec.Responses:
		must = []string{"event: response.created", "event: response.completed", "Hello"}
	case stream:
		must = []string{"data: [DONE]", "Hello"}
	case d == codec.Messages:
		must = []string{`"type":"message"`, "Hello there"}
	case d == codec.Responses:
		must = []string{`"object":"response"`, "Hello there"}
	case d == codec.Embeddings:
		must = []string{`"embedding"`}
	case d == codec.Rerank:
		must = []string{`"relevance_score"`}
	case d == codec.CountTokens:
		must = []string{`"input_tokens":`}
	default:
		must = []string{`"choices"`, "Hello there"}
	}
	for _, m := range must {
		if !strings.Contains(got.body, m) {
			t.Fatalf("answer lacks %q:\n%s", m, got.body)
		}
	}
	if !stream && got.header.Get("Content-Length") == "" {
		t.Errorf("a whole answer without Content-Length")
	}
	if stream && strings.Contains(got.body, `"usage":{"prompt_tokens"`) && (d == codec.Chat || d == codec.Completions) {
		t.Errorf("the usage chunk the gateway asked for reached a client that did not ask for it")
	}
}

// TestRelay_DuplicateModelNeverReachesABackend: a key allowed only one
// model must not reach another by sending "model" twice (Go and Python
// decoders take the last copy, a first-member reader the first) or in
// another spelling. The answer is a 400 naming the field; no backend is
// called; nothing is admitted or booked.
func TestRelay_DuplicateModelNeverReachesABackend(t *testing.T) {
	spellings := []string{`"model":"oa-ok","model":"an-ok"`, `"model":"oa-ok","Model":"an-ok"`, `"model":"oa-ok","mod\u0065l":"an-ok"`}
	for _, cl := range clients {
		for _, stream := range []bool{false, true} {
			if stream && !cl.dialect.Generates() {
				continue
			}
			for _, dup := range spellings {
				body := strings.Replace(cl.body, `"model":%q`, dup, 1)
				if strings.Contains(body, "%v") {
					body = fmt.Sprintf(body, stream)
				}
				h := newHarness(t)
				got := h.send(t, cl.path, body, false)
				if got.status != 400 || !strings.Contains(got.body, `\"model\"`) {
					t.Errorf("%s stream=%v %s: %d %s, want a 400 naming \"model\"", cl.name, stream, dup, got.status, got.body)
				}
				if n := len(h.oa.Calls()) + len(h.an.Calls()); n != 0 {
					t.Errorf("%s stream=%v %s: a backend was called %d times", cl.name, stream, dup, n)
				}
				if len(h.adm.Requests()) != 0 || len(h.led.Records()) != 0 {
					t.Errorf("%s: admitted or booked a request the gateway refused to read", cl.name)
				}
			}
		}
	}
}
