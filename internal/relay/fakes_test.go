package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/codec"
	"llmgate/internal/keys"
	"llmgate/internal/policy"
	"llmgate/internal/relay"
	"llmgate/internal/router"
	"llmgate/internal/usage"
)

// upstreamCall is what a fake backend received.
type upstreamCall struct {
	Path   string
	Model  string
	Limit  int // the largest output-limit field of the body
	Stream bool
}

// fakeBackend serves one dialect; its behaviour is chosen by the upstream
// model name's outcome part ("ok-a" -> "ok").
type fakeBackend struct {
	*httptest.Server
	anthropic bool
	mu        sync.Mutex
	calls     []upstreamCall
	// slowArrived is signalled when a "slow" request arrives, so that a
	// test client leaves only once the backend is working on it.
	slowArrived chan struct{}
}

// firstTokenDelay is how long "fto-b" waits before its first content, so
// that the serving attempt's TTFT is told apart from the failed one's.
const firstTokenDelay = 60 * time.Millisecond

func newFakeBackend(t *testing.T, anthropic bool) *fakeBackend {
	f := &fakeBackend{anthropic: anthropic, slowArrived: make(chan struct{}, 4)}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeBackend) Calls() []upstreamCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]upstreamCall(nil), f.calls...)
}

func (f *fakeBackend) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet || r.URL.Path == "/api/show" {
		// What the gateway asks an engine about itself (context length,
		// which engine): this fake says nothing, and is not a call.
		http.NotFound(w, r)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	call := upstreamCall{Path: r.URL.Path}
	call.Model, _ = body["model"].(string)
	call.Stream, _ = body["stream"].(bool)
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens", "max_new_tokens", "n_predict"} {
		if n, ok := body[k].(float64); ok && int(n) > call.Limit {
			call.Limit = int(n)
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()

	outcome, _, _ := strings.Cut(call.Model, "-")
	if outcome == "slow" {
		f.slowArrived <- struct{}{}
	}
	switch outcome {
	case "rejected":
		f.fail(w, http.StatusBadRequest, "the parameter is invalid")
		return
	case "err500":
		f.fail(w, http.StatusInternalServerError, "CUDA out of memory")
		return
	case "err429":
		w.Header().Set("Retry-After", "1")
		f.fail(w, http.StatusTooManyRequests, "slow down")
		return
	}
	if call.Model == "fto-a" {
		outcome = "err200"
	}
	if call.Model == "fto-b" {
		time.Sleep(firstTokenDelay)
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/tokenize"):
		f.json(w, `{"count":11,"max_model_len":32768,"tokens":[1,2,3,4,5,6,7,8,9,10,11]}`)
	case strings.HasSuffix(r.URL.Path, "/count_tokens"):
		if outcome == "err200" {
			f.json(w, `{"type":"error","error":{"type":"overloaded_error","message":"quota exhausted"}}`)
			return
		}
		f.json(w, `{"input_tokens":11}`)
	case call.Stream:
		f.stream(w, r, r.URL.Path, outcome)
	default:
		f.whole(w, r, r.URL.Path, outcome)
	}
}

func (f *fakeBackend) fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if f.anthropic {
		fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, msg)
		return
	}
	fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error"}}`, msg)
}

func (f *fakeBackend) json(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, body)
}

// whole answers a non-streaming request.
func (f *fakeBackend) whole(w http.ResponseWriter, r *http.Request, path, outcome string) {
	switch outcome {
	case "err200":
		if f.anthropic {
			f.json(w, `{"type":"error","error":{"type":"overloaded_error","message":"quota exhausted"}}`)
		} else {
			f.json(w, `{"error":{"message":"quota exhausted","type":"server_error"}}`)
		}
		return
	case "cutbefore":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "500")
		_, _ = io.WriteString(w, `{"choices":[`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	case "slow":
		<-r.Context().Done()
		return
	}
	switch {
	case f.anthropic:
		f.json(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hello there"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":7}}`)
	case strings.HasSuffix(path, "/chat/completions"):
		f.json(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`)
	case strings.HasSuffix(path, "/completions"):
		f.json(w, `{"id":"t1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"Hello there","finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`)
	case strings.HasSuffix(path, "/embeddings"):
		f.json(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"m","usage":{"prompt_tokens":11,"total_tokens":11}}`)
	case strings.HasSuffix(path, "/rerank"):
		f.json(w, `{"id":"r1","model":"m","results":[{"index":0,"relevance_score":0.9}],"usage":{"total_tokens":11}}`)
	default:
		http.NotFound(w, r)
	}
}

// stream answers a streaming request.
func (f *fakeBackend) stream(w http.ResponseWriter, r *http.Request, path, outcome string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	send := func(name, data string) {
		if name != "" {
			fmt.Fprintf(w, "event: %s\n", name)
		}
		fmt.Fprintf(w, "data: %s\n\n", data)
		fl.Flush()
	}
	events := f.openaiEvents(strings.HasSuffix(path, "/chat/completions"))
	if f.anthropic {
		events = anthropicEvents
	}
	switch outcome {
	case "err200":
		if f.anthropic {
			send("error", `{"type":"error","error":{"type":"overloaded_error","message":"quota exhausted"}}`)
		} else {
			send("", `{"error":{"message":"quota exhausted","type":"server_error"}}`)
		}
		return
	case "cutbefore":
		fl.Flush()
		panic(http.ErrAbortHandler)
	}
	contentAt := 1 // the first event with generated text
	if f.anthropic {
		contentAt = 2
	}
	for i, ev := range events {
		send(ev[0], ev[1])
		if i == contentAt {
			switch outcome {
			case "cutafter":
				panic(http.ErrAbortHandler)
			case "slow":
				<-r.Context().Done()
				return
			}
		}
	}
}

func (f *fakeBackend) openaiEvents(chat bool) [][2]string {
	if !chat {
		return [][2]string{
			{"", `{"id":"t1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"Hello","finish_reason":null}]}`},
			{"", `{"id":"t1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" there","finish_reason":null}]}`},
			{"", `{"id":"t1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"","finish_reason":"stop"}]}`},
			{"", `{"id":"t1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`},
			{"", `[DONE]`},
		}
	}
	return [][2]string{
		{"", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`},
		{"", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`},
		{"", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]}`},
		{"", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`},
		{"", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`},
		{"", `[DONE]`},
	}
}

var anthropicEvents = [][2]string{
	{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":1}}}`},
	{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}`},
	{"content_block_stop", `{"type":"content_block_stop","index":0}`},
	{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}`},
	{"message_stop", `{"type":"message_stop"}`},
}

// recLedger records what the relay settles.
type recLedger struct {
	mu   sync.Mutex
	recs []usage.Record
}

func (l *recLedger) Add(r usage.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}

// has reports whether the ledger holds a record of the request id.
func (l *recLedger) has(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.ID == id {
			return true
		}
	}
	return false
}

// lastBytesWriter is a client connection that notes, at each write,
// whether the request's record was in the ledger: once the handler has
// returned, recordedAtLast says whether it was there before the answer's
// last bytes.
type lastBytesWriter struct {
	http.ResponseWriter
	led            *recLedger
	id             string
	writes         int
	recordedAtLast bool
}

func (w *lastBytesWriter) Write(b []byte) (int, error) {
	w.writes++
	w.recordedAtLast = w.led.has(w.id)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the Flusher.
func (w *lastBytesWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (l *recLedger) Records() []usage.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]usage.Record(nil), l.recs...)
}

// recAdmission records admissions, and the model each admitted request
// was served by as its ticket was told, and refuses models named
// "refused".
type recAdmission struct {
	mu     sync.Mutex
	reqs   []policy.AdmitRequest
	served []string // "model servedBy" per Done
}

// recTicket tells its admission what Done was called with.
type recTicket struct {
	a     *recAdmission
	model string
}

func (t recTicket) Done(rec *usage.Record) {
	t.a.mu.Lock()
	t.a.served = append(t.a.served, t.model+" "+rec.ServedModel)
	t.a.mu.Unlock()
}

func (a *recAdmission) Admit(_ context.Context, req policy.AdmitRequest) (policy.Ticket, error) {
	a.mu.Lock()
	a.reqs = append(a.reqs, req)
	a.mu.Unlock()
	if strings.HasSuffix(req.Model, "refused") {
		return nil, refusal
	}
	return recTicket{a: a, model: req.Model}, nil
}

// Served returns, per settled request, its model and the servedBy its
// ticket was told ("model " when the model itself served).
func (a *recAdmission) Served() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.served...)
}

func (a *recAdmission) Requests() []policy.AdmitRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]policy.AdmitRequest(nil), a.reqs...)
}

// fakeLeaser stands in for the engine manager as a table's Leaser: it
// manages the backends named, runs onLease (when set) at each lease, and
// records the leases taken and the outcomes they were released with.
type fakeLeaser struct {
	backends []string
	onLease  func(ctx context.Context, backend, model string) error
	mu       sync.Mutex
	leases   []string // "backend model"
	released []error
}

var _ router.Leaser = (*fakeLeaser)(nil)

func (f *fakeLeaser) Manages(backend string) bool {
	return slices.Contains(f.backends, backend)
}

func (f *fakeLeaser) Lease(ctx context.Context, backend, model string) (func(error) error, error) {
	if f.onLease != nil {
		if err := f.onLease(ctx, backend, model); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	f.leases = append(f.leases, backend+" "+model)
	f.mu.Unlock()
	return func(err error) error {
		f.mu.Lock()
		f.released = append(f.released, err)
		f.mu.Unlock()
		return err
	}, nil
}

// taken returns the leases taken and the outcomes released so far.
func (f *fakeLeaser) taken() (leases []string, released []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.leases...), append([]error(nil), f.released...)
}

// serveRelay is the edge in front of rl for a test: the request's path
// names its dialect (as in clients), its body is decoded, and the relay
// serves it on table as the master key, under ledger id.
func serveRelay(rl *relay.Relay, table *router.Table, id string) http.HandlerFunc {
	dialects := map[string]codec.Dialect{}
	for _, c := range clients {
		dialects[c.path] = c.dialect
	}
	return func(w http.ResponseWriter, r *http.Request) {
		d, ok := dialects[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, err := codec.Decode(d, body)
		if err != nil {
			codec.WriteError(d, w, err)
			return
		}
		rl.Serve(w, r, &relay.Call{ID: id, Start: time.Now(), Principal: keys.Principal{Master: true}, Req: req, Table: table})
	}
}
