package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fastjson"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/jsonscan"
	"llmgate/internal/keys"
	"llmgate/internal/router"
	"llmgate/internal/usage"
)

// endpoint describes one OpenAI-dialect endpoint the gateway relays.
type endpoint struct {
	name     string // ledger name
	path     string // upstream path after the base URL
	required string // top-level key a successful response must have
}

var (
	endpointChat        = endpoint{"chat", "/chat/completions", "choices"}
	endpointCompletions = endpoint{"completions", "/completions", "choices"}
	endpointEmbeddings  = endpoint{"embeddings", "/embeddings", "data"}
	// endpointRerank is the rerank API of vLLM, Jina and Cohere ({model,
	// query, documents, top_n} -> results with relevance_score).
	endpointRerank = endpoint{"rerank", "/rerank", "results"}
)

// call is the state of one relayed request, from parsing to the ledger.
type call struct {
	ep        endpoint
	reqID     string
	start     time.Time
	principal keys.Principal
	model     string
	route     *router.Route
	dep       router.Deployment // the deployment of the current attempt
	body      []byte            // the client's body, for estimating prompt tokens
	ticket    Ticket
	hub       *hub // translated request, for other dialects
	writeErr  func(http.ResponseWriter, error)

	anthropicBeta string

	stream           bool
	clientWantsUsage bool
	committed        bool // something reached the client
	attempts         int  // deployments tried

	status    int
	errType   string
	usage     openai.Usage
	haveUsage bool
	ttft      time.Duration
	outChars  int // characters of generated text seen, for estimates
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuf() *bytes.Buffer {
	b := bufPool.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putBuf(b *bytes.Buffer) {
	if b.Cap() <= 1<<20 {
		bufPool.Put(b)
	}
}

// readBody reads the request body into a pooled buffer, enforcing the limit.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) error {
	if r.ContentLength > s.maxBody {
		return tooLarge(s.maxBody)
	}
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge(s.maxBody)
		}
		return apierror.InvalidRequest("body_read_error", "could not read the request body: %v", err)
	}
	return nil
}

func tooLarge(limit int64) error {
	return apierror.Newf(http.StatusRequestEntityTooLarge, apierror.KindInvalidRequest, "body_too_large",
		"request body is larger than the gateway's limit of %d MiB: send a smaller request, or raise max_body_bytes in the config", limit>>20)
}

// proxy returns the handler relaying one OpenAI endpoint.
func (s *Server) proxy(ep endpoint) func(http.ResponseWriter, *http.Request, keys.Principal) {
	return func(w http.ResponseWriter, r *http.Request, p keys.Principal) {
		c := &call{ep: ep, start: time.Now(), principal: p, reqID: s.requestID(r), writeErr: openai.WriteError}
		w.Header()["X-Request-Id"] = []string{c.reqID}
		buf := getBuf()
		defer putBuf(buf)
		if err := s.readBody(w, r, buf); err != nil {
			openai.WriteError(w, err)
			return
		}
		upstreamBody, err := s.prepare(c, buf.Bytes())
		if err == nil && s.admit != nil {
			c.ticket, err = s.admit.Admit(r.Context(), AdmitRequest{Principal: p, Model: c.model, Endpoint: ep.name, Body: c.body})
			rateLimitHeaders(w, c.ticket)
		}
		if err != nil {
			openai.WriteError(w, err)
			if c.model != "" { // known model: the refusal belongs in the ledger
				c.fail(err)
				s.record(c)
			}
			return
		}
		err = s.Table().Forward(r.Context(), c.route, func(ctx context.Context, dep router.Deployment) (bool, error) {
			t0 := time.Now()
			c.errType = "" // a failed earlier attempt must not mark a success
			committed, err := s.attempt(ctx, w, c, dep, upstreamBody)
			s.logAttempt(c, dep, t0, committed, err)
			return committed, err
		})
		if err != nil {
			s.writeFail(w, c, err)
		}
		s.record(c)
	}
}

// rateLimitHeaders puts an admitted request's x-ratelimit-* headers on its
// answer; call it right after Admit, before anything is written.
func rateLimitHeaders(w http.ResponseWriter, t Ticket) {
	if rt, ok := t.(RateLimitTicket); ok {
		rt.RateLimitHeaders(w.Header())
	}
}

// prepare validates the body, resolves the route and returns the body to
// send upstream (with the upstream model name and include_usage set).
func (s *Server) prepare(c *call, body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, apierror.InvalidRequest("empty_body", `request body is empty: send a JSON object such as {"model": "...", "messages": [...]}`)
	}
	if !jsonscan.Valid(body) {
		off, desc := jsonscan.SyntaxOffset(body)
		return nil, apierror.InvalidRequest("invalid_json", "request body is not valid JSON: %s (at byte offset %d)", desc, off)
	}
	sp, err := jsonscan.Find(body, "model", "stream", "stream_options")
	if err != nil {
		return nil, apierror.InvalidRequest("invalid_body", "%v", err)
	}
	model, ok := jsonscan.String(body, sp[0])
	if sp[0].Valid() && !ok {
		return nil, apierror.InvalidRequest("invalid_model", `"model" must be a string naming one of the gateway's models (GET /v1/models lists them)`)
	}
	route, err := s.route(c.principal, model)
	if err != nil {
		return nil, err
	}
	c.model = model
	c.body = body
	c.route = route
	c.stream = jsonscan.Bool(body, sp[1])

	out := body
	if c.stream && (c.ep == endpointChat || c.ep == endpointCompletions) {
		out, c.clientWantsUsage = ensureIncludeUsage(out)
	}
	return out, nil
}

// ensureIncludeUsage makes a streaming request ask for the usage chunk and
// reports whether the client had asked for it itself.
func ensureIncludeUsage(body []byte) ([]byte, bool) {
	sp, _ := jsonscan.Find(body, "stream_options")
	if jsonscan.IsNull(body, sp[0]) {
		if sp[0].Valid() { // "stream_options": null
			return jsonscan.Replace(body, sp[0], []byte(`{"include_usage":true}`)), false
		}
		return jsonscan.Insert(body, "stream_options", []byte(`{"include_usage":true}`)), false
	}
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(body[sp[0].Start:sp[0].End], &opts); err != nil {
		return body, false // not an object: let the backend explain
	}
	wanted := string(opts["include_usage"]) == "true"
	if wanted {
		return body, true
	}
	opts["include_usage"] = json.RawMessage("true")
	b, _ := json.Marshal(opts)
	return jsonscan.Replace(body, sp[0], b), false
}

// attempt sends the request to one deployment and relays the response. It
// reports committed once anything was written to the client; before that,
// a failure is returned so the router may try elsewhere.
func (s *Server) attempt(ctx context.Context, w http.ResponseWriter, c *call, dep router.Deployment, body []byte) (committed bool, err error) {
	c.dep = dep
	b := dep.Backend
	if b.Acquire != nil && !leased(ctx) { // a local engine: start it or wait until ready
		return s.attemptEngine(ctx, w, c, dep, body)
	}
	if b.Dialect == config.DialectAnthropic {
		if c.ep.name != "chat" {
			return false, c.fail(apierror.Newf(http.StatusBadRequest, apierror.KindInvalidRequest, "unsupported_endpoint",
				"model %q is served by an Anthropic backend, which has no %s endpoint; use /v1/chat/completions or /v1/messages", c.model, c.ep.path))
		}
		if _, err := c.chatHub(); err != nil {
			return false, c.fail(err)
		}
		return s.attemptHub(ctx, w, c, dep)
	}
	ctx, endSpan := s.traceAttempt(ctx, c, dep)
	defer func() { endSpan(err) }()
	ctx, cancel, release := attemptContext(ctx, b)
	defer release()
	if dep.UpstreamModel != c.model {
		body = setModel(body, dep.UpstreamModel)
	}
	resp, t0, err := s.send(ctx, c, dep, c.ep.path, body, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if c.stream && isEventStream(resp) {
		idle := startIdleGap(b.IdleTimeout(), firstEventBudget(b, t0), cancel)
		defer idle.stop()
		return s.relayStream(w, ctx, c, resp, idle)
	}
	if c.stream && (c.ep == endpointChat || c.ep == endpointCompletions) {
		return s.relayJSONAsStream(w, c, resp)
	}
	return s.relayJSON(w, c, resp)
}

// setModel rewrites the top-level "model" of a valid JSON body.
func setModel(body []byte, model string) []byte {
	sp, err := jsonscan.Find(body, "model")
	if err != nil || !sp[0].Valid() {
		return body
	}
	q, _ := json.Marshal(model)
	return jsonscan.Replace(body, sp[0], q)
}

func (s *Server) writeFail(w http.ResponseWriter, c *call, err error) {
	if c.committed {
		return // the client already got an answer (or an error event)
	}
	e := c.fail(err)
	if e.Status == 499 {
		return // nobody is listening
	}
	if c.writeErr != nil {
		c.writeErr(w, e)
		return
	}
	openai.WriteError(w, e)
}

// fail records err as the call's outcome and returns it as an *apierror.Error.
func (c *call) fail(err error) *apierror.Error {
	e := apierror.From(err)
	c.status = e.Status
	c.errType = e.Code
	return e
}

// readResult reads a backend's JSON answer into buf and checks that it is a
// real result (taking its usage); the error is the call's failure.
func (s *Server) readResult(c *call, resp *http.Response, buf *bytes.Buffer) ([]byte, error) {
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, 256<<20))
	c.ttft = time.Since(c.start)
	if err != nil {
		return nil, c.fail(c.dep.Backend.Classify(resp.Request.Context(), err))
	}
	body := buf.Bytes()
	if err := s.checkResult(c, body); err != nil {
		return nil, c.fail(err)
	}
	return body, nil
}

// relayJSON relays a non-streaming response after checking that it is a
// real result, and takes its usage.
func (s *Server) relayJSON(w http.ResponseWriter, c *call, resp *http.Response) (committed bool, err error) {
	buf := getBuf()
	defer putBuf(buf)
	body, err := s.readResult(c, resp, buf)
	if err != nil {
		return false, err
	}
	c.status = http.StatusOK
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	// Send it now: the HTTP server would hold a small answer in its buffer until
	// the handler returns, which would put the usage record, metrics and
	// access log on the client's clock.
	_ = http.NewResponseController(w).Flush()
	return true, nil
}

var (
	keyUsage = []byte(`"usage"`)
	keyError = []byte(`"error"`)
)

// checkResult verifies a 2xx body carries a result and extracts usage. A
// 200 without "choices" is a backend failure the client could not read.
func (s *Server) checkResult(c *call, body []byte) error {
	bad := func(why string) error {
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_upstream_response",
			"backend %q answered 200 but %s; the body starts: %s", c.dep.Backend.Name, why, quoteStart(body, 200))
	}
	// One parse validates the body and finds the result, usage and error
	// (this runs on every answer, before the client gets it).
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return bad("the body is not valid JSON")
	}
	obj, err := v.Object()
	if err != nil {
		return bad("the body is not a JSON object")
	}
	result, usage, errv := obj.Get(c.ep.required), obj.Get("usage"), obj.Get("error")
	hasResult := result != nil && result.Type() != fastjson.TypeNull
	if errv != nil && errv.Type() != fastjson.TypeNull && result == nil {
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "upstream_error_in_body",
			"backend %q answered 200 with an error: %s", c.dep.Backend.Name, errorMessage(body))
	}
	if !hasResult {
		return bad(fmt.Sprintf("its body has no %q", c.ep.required))
	}
	if u, ok := usageOf(usage); ok {
		c.usage, c.haveUsage = u, true
	}
	if !c.haveUsage {
		c.outChars = approxGeneratedChars(body)
	}
	return nil
}

var answerParsers fastjson.ParserPool

// usageOf reads an OpenAI usage object; ok is false when v is not one
// (absent, null, or not an object with integer counts).
func usageOf(v *fastjson.Value) (u openai.Usage, ok bool) {
	if v == nil || v.Type() != fastjson.TypeObject {
		return u, false
	}
	absent := 0 // of prompt_tokens and completion_tokens
	count := func(v *fastjson.Value, key string) (int, bool) {
		x := v.Get(key)
		if x == nil || x.Type() == fastjson.TypeNull {
			if x == nil {
				absent++
			}
			return 0, true
		}
		n, err := x.Int()
		return n, err == nil
	}
	var oks [3]bool
	u.PromptTokens, oks[0] = count(v, "prompt_tokens")
	u.CompletionTokens, oks[1] = count(v, "completion_tokens")
	onlyTotal := absent == 2
	u.TotalTokens, oks[2] = count(v, "total_tokens")
	if !oks[0] || !oks[1] || !oks[2] {
		return openai.Usage{}, false
	}
	if onlyTotal {
		// Pooling endpoints (vLLM's rerank) report only total_tokens: all input.
		u.PromptTokens = u.TotalTokens
	}
	if d := v.Get("prompt_tokens_details"); d != nil && d.Type() == fastjson.TypeObject {
		n, _ := count(d, "cached_tokens")
		u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: n}
	}
	if d := v.Get("completion_tokens_details"); d != nil && d.Type() == fastjson.TypeObject {
		n, _ := count(d, "reasoning_tokens")
		u.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: n}
	}
	return u, true
}

// upstreamError maps a non-2xx backend answer to what the client should see:
// the client's own mistakes keep their status, the gateway's configuration
// or backend problems become 502 naming the backend.
func (s *Server) upstreamError(c *call, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	name := c.dep.Backend.Name
	msg := errorMessage(body)
	st := resp.StatusCode
	var e *apierror.Error
	switch {
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		e = apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_auth_failed",
			"backend %q rejected the gateway's credentials (%d: %s): set backends.%s.api_key (or the environment variable it names) to a valid key",
			name, st, msg, name)
	case st == http.StatusNotFound:
		e = apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_not_found",
			"backend %q answered 404 for model %q (%s): check that the backend serves that model name (models.%s.upstream_model) and the %s endpoint",
			name, c.dep.UpstreamModel, msg, c.model, c.ep.path)
	case st == http.StatusTooManyRequests:
		e = apierror.Newf(http.StatusTooManyRequests, apierror.KindRateLimit, "backend_rate_limited",
			"backend %q is rate limiting (%s): retry later", name, msg)
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			e.Header = http.Header{"Retry-After": {ra}}
		}
	case st == http.StatusGatewayTimeout:
		e = apierror.Newf(http.StatusGatewayTimeout, apierror.KindTimeout, "backend_timeout", "backend %q timed out (%s)", name, msg)
	case st >= 500:
		e = apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_error", "backend %q failed (%d: %s)", name, st, msg)
	default: // 400, 413, 422 ...: the request itself was refused
		e = apierror.Newf(st, apierror.KindInvalidRequest, "backend_rejected_request", "backend %q rejected the request: %s", name, msg)
	}
	return e
}

// errorMessage pulls the human message out of the error bodies engines send:
// OpenAI {"error":{"message"}}, vLLM auth {"error":"..."}, FastAPI
// {"detail":...}, {"message":...}; otherwise the start of the body.
func errorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Detail  json.RawMessage `json:"detail"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		if len(v.Error) > 0 {
			var inner struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(v.Error, &inner) == nil && inner.Message != "" {
				return truncate(inner.Message, 500)
			}
			var s string
			if json.Unmarshal(v.Error, &s) == nil && s != "" {
				return truncate(s, 500)
			}
		}
		if len(v.Detail) > 0 {
			var s string
			if json.Unmarshal(v.Detail, &s) == nil {
				return truncate(s, 500)
			}
			return truncate(string(v.Detail), 500)
		}
		if v.Message != "" {
			return truncate(v.Message, 500)
		}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return "empty body"
	}
	return quoteStart(body, 200)
}

func quoteStart(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "(empty)"
	}
	s := string(b)
	if len(s) > n {
		s = s[:n] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// record writes the call to the ledger, estimating tokens when the backend
// reported none.
func (s *Server) record(c *call) {
	if s.ledger == nil {
		return
	}
	rec := usage.Record{
		ID: c.reqID, Time: c.start, KeyID: c.principal.KeyID(), Model: c.model, Endpoint: c.ep.name,
		Status: c.status, ErrorType: c.errType, TTFT: c.ttft, Latency: time.Since(c.start), Stream: c.stream,
	}
	if c.dep.Backend != nil {
		rec.Backend, rec.UpstreamModel = c.dep.Backend.Name, c.dep.UpstreamModel
	}
	if c.haveUsage {
		rec.PromptTokens, rec.CompletionTokens = c.usage.PromptTokens, c.usage.CompletionTokens
		if d := c.usage.PromptTokensDetails; d != nil {
			rec.CachedTokens = d.CachedTokens
		}
		// A stream cut before its final count (an Anthropic backend sends 1
		// output token in message_start) carries more text than counted.
		if est := usage.EstimateTokensFromChars(c.outChars); c.status != http.StatusOK && est > rec.CompletionTokens {
			rec.CompletionTokens, rec.Estimated = est, true
		}
	} else if c.status == http.StatusOK || c.status == 499 || c.outChars > 0 {
		// The backend did not say; count locally and say so.
		rec.PromptTokens = usage.EstimatePromptTokens(c.body)
		rec.CompletionTokens = usage.EstimateTokensFromChars(c.outChars)
		rec.Estimated = true
	}
	if c.ticket != nil {
		c.ticket.Done(&rec)
	}
	if err := s.ledger.Add(rec); err != nil {
		s.log.Error("usage record not queued", "request_id", c.reqID, "err", err)
	}
}
