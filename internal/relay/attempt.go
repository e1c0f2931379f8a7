package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"llmgate/internal/apierror"
	"llmgate/internal/codec"
	"llmgate/internal/dialect"
	"llmgate/internal/provider"
	"llmgate/internal/router"
	"llmgate/internal/sse"
	"llmgate/internal/tracing"
	"llmgate/internal/translate"
)

// maxAnswer bounds a backend's non-streaming answer.
const maxAnswer = 256 << 20

// attempt runs the request at one deployment: a local engine is started
// (or waited for) first, through the lease the call's table names.
func (rl *Relay) attempt(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment, n int) Result {
	if l := c.Table.Leaser(dep.Backend.Name); l != nil && c.Req.Dialect != codec.CountTokens && !leased(ctx) {
		return rl.withEngine(ctx, w, c, dep, n, l)
	}
	if err := rl.recount(ctx, w, c, dep); err != nil {
		return Result{Dep: dep}.failed(err)
	}
	return rl.relay(ctx, w, c, dep, n)
}

func target(dep router.Deployment) codec.Target {
	return codec.Target{Backend: dep.Backend.Name, Dialect: dep.Backend.Dialect, UpstreamModel: dep.UpstreamModel, DropParams: dep.Backend.DropParams}
}

// relay sends the request to one deployment and relays its answer. An
// engine that refuses the request because the prompt plus the output
// limit does not fit its context, where the prompt alone does, has said
// exactly how many tokens are left: unless fitting is off for the model,
// the request is sent again once with its limit lowered to that (said in
// the Llmgate-Output-Limit header, as any fit is). The engine has the last
// word on what fits.
func (rl *Relay) relay(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment, n int) Result {
	res := rl.relayOnce(ctx, w, c, dep, n)
	e := res.Err
	if e != nil && e.Context != nil {
		rl.engineSaidContext(c, dep, e.Context.ContextTokens)
	}
	if e == nil || res.Committed || e.Context == nil || !c.routeOf(dep).FitOutput || !c.Req.Dialect.Generates() {
		return res
	}
	left := e.Context.ContextTokens - e.Context.PromptTokens
	if left < 1 || c.Req.OutputLimit <= left {
		return res
	}
	w.Header().Set(OutputLimitHeader, fmt.Sprintf("%d->%d; context=%d; prompt=%d; prompt_source=engine",
		c.Req.OutputLimit, left, e.Context.ContextTokens, e.Context.PromptTokens))
	rl.log.Info("output limit lowered to what the engine said fits", "request_id", c.ID, "model", c.Req.Model,
		"backend", dep.Backend.Name, "requested", c.Req.OutputLimit, "fitted", left, "context", e.Context.ContextTokens, "prompt_tokens", e.Context.PromptTokens)
	c.Req = c.Req.WithOutputLimit(left)
	return rl.relayOnce(ctx, w, c, dep, n)
}

// engineSaidContext has the engine asked about itself again, in the
// background, when its refusal names another context length than the
// gateway knows for it: the engine was restarted with another one (a
// backend without health checks is otherwise asked again only after ten
// minutes), and the next requests should be fitted to what it has now.
func (rl *Relay) engineSaidContext(c *Call, dep router.Deployment, n int) {
	if rl.opt.Engines == nil || n <= 0 || c.routeOf(dep).ContextWindow > 0 {
		return // a configured context_window is the user's word
	}
	if known := rl.opt.Engines.Known(0, dep.Backend, dep.UpstreamModel).Tokens; known == 0 || known == n {
		return
	}
	go rl.opt.Engines.Recheck(context.Background(), dep.Backend, false)
}

// relayOnce sends the request to one deployment and relays its answer.
func (rl *Relay) relayOnce(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment, n int) (res Result) {
	res.Dep = dep
	t0 := time.Now()
	ctx, endSpan := rl.traceAttempt(ctx, c, dep)
	defer func() {
		rl.logAttempt(c, dep, n, t0, res)
		endSpan(res)
	}()
	t := target(dep)
	out, err := c.requestFor(dep).Outbound(t)
	if err != nil {
		return res.failed(err)
	}
	if out.Count { // count_tokens on an OpenAI backend: its engine's tokenizer, or an estimate
		return rl.pump(w, c, res, rl.countTokens(ctx, w, c, dep), codec.FormAnthropic)
	}
	b := dep.Backend
	// The timeout bounds the whole attempt, stream included; the idle gap
	// (armed once headers arrive) cancels with errIdleGap as the cause.
	ctx, cancel, release := attemptContext(ctx, b, c.Req.Stream)
	defer release()
	resp, sent, err := rl.send(ctx, c, dep, out)
	if err != nil {
		c.t.backendSince(sent)
		return res.failed(err)
	}
	c.t.sent = sent // until pump has the first events
	defer resp.Body.Close()
	stream := c.Req.Stream && isEventStream(resp)
	dec := codec.NewDecoder(c.Req, t, stream)
	if !stream {
		src := &bodySource{ctx: ctx, b: b, body: resp.Body, dec: dec}
		defer src.release()
		res = rl.pump(w, c, res, src, dec.Form())
		if res.tail.whole || res.tail.sw != nil {
			// The tail may point into the buffer (a whole body, or the
			// closing events of a JSON answer to a stream request):
			// finish gives it back once the tail is written.
			res.tail.buf, src.buf = src.buf, nil
		}
		return res
	}
	idle := startIdleGap(b.IdleTimeout(), firstEventBudget(b, sent), cancel)
	defer idle.stop()
	src := &sseSource{ctx: ctx, b: b, dec: dec, idle: idle, dialect: b.Dialect, body: flushingReader{r: resp.Body}}
	src.rd = sse.NewReader(&src.body, 0)
	src.rd.OnComment = idle.alive
	return rl.pump(w, c, res, src, dec.Form())
}

// flushingReader is a stream's backend body that first flushes what the
// client's stream holds whenever the gateway goes to read more: the events
// that arrived together leave in one write, and none waits while the
// gateway waits for the backend.
type flushingReader struct {
	r  io.Reader
	sw *sse.Writer // the client's stream, once open
}

func (f *flushingReader) Read(p []byte) (int, error) {
	if f.sw != nil {
		_ = f.sw.Flush() // a failure stays in the writer: its next write returns it
	}
	return f.r.Read(p)
}

// source yields a backend answer's decoded events.
type source interface {
	// next returns the next events (at least one) or the failure that
	// ended the answer, as the client should see it.
	next() ([]codec.Event, *apierror.Error)
}

// pump is the one relay loop, for every dialect pair, stream or not. The
// first events are read before anything is written: a backend that fails
// (or stalls past first_byte_timeout, or answers 200 with an error) before
// them has sent the client nothing, so the attempt fails uncommitted and
// the router may try another deployment. A non-stream answer is the same
// loop collected into one body. The answer's last bytes — the whole body,
// or a stream's closing events — are not written here but returned as the
// result's tail, which finish writes once the record is settled.
func (rl *Relay) pump(w http.ResponseWriter, c *Call, res Result, src source, form codec.Form) Result {
	evs, fail := src.next()
	c.t.answered()
	if fail != nil {
		return res.failed(fail)
	}
	enc := codec.NewEncoder(c.Req, form, c.enc)
	if !c.Req.Stream {
		c.backendDone() // the whole answer is read
		ev := &evs[0]   // a whole answer is one event
		res.tap(ev, c.Start)
		body, err := enc.Body(*ev)
		if err != nil {
			return res.failed(err)
		}
		res.Status, res.Committed = http.StatusOK, true
		res.tail = tail{whole: true, body: body}
		return res
	}
	if _, sent := w.(headersSent); sent {
		c.timeHead(nil)
	} else {
		c.timeHead(w.Header())
	}
	sse.SetHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	res.Status, res.Committed = http.StatusOK, true
	so := &streamOut{sw: *sse.NewWriter(w)}
	sw := &so.sw
	if s, ok := src.(*sseSource); ok {
		// Held events go out before the next read of the backend, and
		// the closing ones when finish has written them.
		sw.Hold()
		s.body.sw = sw
	}
	for {
		for i := range evs {
			ev := &evs[i]
			res.tap(ev, c.Start)
			out, err := enc.Event(so.evs[:0], *ev)
			if err != nil {
				res = res.failed(err)
				res.tail = tail{sw: sw, events: enc.Fail(out, res.Err)}
				return res
			}
			if ev.End {
				c.backendDone()
				res.tail = tail{sw: sw, events: enc.End(out)}
				return res
			}
			for _, e := range out {
				if sw.WriteEvent(e.Name, e.Data) != nil {
					// The client went away; the deferred cancel stops the
					// backend.
					return res.clientGone()
				}
			}
		}
		if evs, fail = src.next(); fail != nil {
			if errors.Is(fail, apierror.ErrClientClosed) {
				return res.clientGone()
			}
			res = res.failed(fail)
			res.tail = tail{sw: sw, events: enc.Fail(so.evs[:0], res.Err)}
			return res
		}
	}
}

// streamOut is a stream's writer and the client events of one backend
// event (reused: a passthrough event is one client event). The closing
// events wait in it for finish, without a copy.
type streamOut struct {
	sw  sse.Writer
	evs [4]translate.Event
}

var jsonCT = []string{"application/json"}

// sseSource reads a backend's event stream.
type sseSource struct {
	ctx     context.Context
	b       *provider.Backend
	rd      *sse.Reader
	dec     codec.Decoder
	idle    *idleGap
	dialect dialect.Dialect
	started bool
	buf     [2]codec.Event // reused: the events of one backend event
	body    flushingReader // what rd reads
}

func (s *sseSource) next() ([]codec.Event, *apierror.Error) {
	for {
		ev, err := s.rd.Next()
		if err != nil {
			return nil, s.streamError(err)
		}
		s.idle.rearm()
		evs, derr := s.dec.Event(s.buf[:0], ev.Name, ev.Data)
		if derr != nil {
			return nil, apierror.From(derr)
		}
		if len(evs) > 0 {
			s.started = true
			return evs, nil
		}
	}
}

// streamError turns a stream read failure into the client-facing error;
// a local engine whose process died under the stream says so.
func (s *sseSource) streamError(err error) *apierror.Error {
	e := s.readError(err)
	if errors.Is(e, apierror.ErrClientClosed) {
		return e
	}
	return explainFailure(s.ctx, e)
}

func (s *sseSource) readError(err error) *apierror.Error {
	name := s.b.Name
	cause := context.Cause(s.ctx)
	switch {
	case s.idle != nil && cause == errIdleGap && !s.idle.started && s.idle.first > 0:
		return apierror.Newf(http.StatusGatewayTimeout, apierror.KindTimeout, "backend_timeout",
			"backend %q sent no stream event within first_byte_timeout (%s): it may be queueing or overloaded; raise backends.%s.first_byte_timeout if the model is slow to start",
			name, s.idle.first, name).Wrap(err)
	case s.idle != nil && cause == errIdleGap:
		return interrupted(apierror.Newf(http.StatusGatewayTimeout, apierror.KindTimeout, "stream_idle_timeout",
			"backend %q sent no stream event for %s; raise backends.%s.idle_timeout if the model is slow, or check that it is not stuck",
			name, s.idle.d, name).Wrap(err), s.started)
	case s.ctx.Err() != nil && errors.Is(s.ctx.Err(), context.Canceled):
		return apierror.ClientClosed(err)
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		end := "[DONE]"
		if s.dialect == dialect.Anthropic {
			end = "message_stop"
		}
		return apierror.ErrStreamCut.WithMessage("backend " + strconv.Quote(name) + " ended the stream before it was complete (no " + end + "); the answer is truncated")
	}
	return interrupted(s.b.Classify(s.ctx, err), s.started)
}

// interrupted says that a failure cut a stream the client was reading.
func interrupted(e *apierror.Error, started bool) *apierror.Error {
	if !started {
		return e
	}
	return e.WithMessage("stream interrupted: " + e.Message)
}

// bodySource reads a whole (non-SSE) answer into a pooled buffer, which
// its events point into until release.
type bodySource struct {
	ctx  context.Context
	b    *provider.Backend
	body io.Reader
	dec  codec.Decoder
	buf  *bytes.Buffer
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (s *bodySource) next() ([]codec.Event, *apierror.Error) {
	if s.buf != nil {
		return nil, apierror.ErrStreamCut // a body's events always end; not reached
	}
	s.buf = bufPool.Get().(*bytes.Buffer)
	s.buf.Reset()
	if _, err := s.buf.ReadFrom(io.LimitReader(s.body, maxAnswer)); err != nil {
		return nil, s.b.Classify(s.ctx, err)
	}
	evs, err := s.dec.Body(s.buf.Bytes())
	if err != nil {
		return nil, apierror.From(err)
	}
	return evs, nil
}

// release returns the buffer, unless the answer's tail took it.
func (s *bodySource) release() {
	putBuffer(s.buf)
	s.buf = nil
}

// putBuffer gives an answer's buffer back to the pool (nil: none).
func putBuffer(b *bytes.Buffer) {
	if b != nil && b.Cap() <= 1<<20 {
		bufPool.Put(b)
	}
}

// localSource is an answer the gateway made itself (a token count).
type localSource struct{ evs []codec.Event }

func (s *localSource) next() ([]codec.Event, *apierror.Error) {
	evs := s.evs
	s.evs = nil
	return evs, nil
}

// attemptContext bounds one attempt by the backend's whole-request
// timeout. cancel, with a cause, is also how the idle gap ends a stream
// (nil when the request is not a stream and nothing bounds it: the
// request's own context then serves as it is); release must be deferred.
func attemptContext(ctx context.Context, b *provider.Backend, stream bool) (_ context.Context, cancel context.CancelCauseFunc, release func()) {
	if !stream && b.Timeout() <= 0 {
		return ctx, nil, func() {}
	}
	ctx, cancel = context.WithCancelCause(ctx)
	if t := b.Timeout(); t > 0 {
		tctx, cancelT := context.WithTimeout(ctx, t)
		return tctx, cancel, func() { cancelT(); cancel(nil) }
	}
	return ctx, cancel, func() { cancel(nil) }
}

// send posts the outbound request to one deployment and returns its 2xx
// answer (the caller closes the body) and when the request left. The time
// to headers feeds lowest_latency balancing; a non-2xx answer is mapped by
// upstreamError.
func (rl *Relay) send(ctx context.Context, c *Call, dep router.Deployment, out codec.Outbound) (*http.Response, time.Time, error) {
	t0 := time.Now()
	// The body is given to the Transport, which may read it after the
	// answer came back: when it is the client's own bytes (a passthrough
	// with nothing patched), their pooled buffer is not reused.
	if sharesMemory(out.Body, c.Req.Body) {
		c.bodyGiven.Store(true)
	}
	req, err := dep.Backend.NewRequestGiving(ctx, out.Path, out.Body, c.UpstreamID())
	if err != nil {
		return nil, t0, err
	}
	tracing.Inject(ctx, req.Header)
	if c.Req.Stream {
		req.Header["Accept"] = []string{"text/event-stream"}
	}
	if out.Beta != "" {
		req.Header.Set("Anthropic-Beta", out.Beta)
	}
	if dep.Backend.InferenceExtension {
		inferenceHeaders(req.Header, c.Principal)
	}
	resp, err := dep.Backend.Do(req)
	if err != nil {
		return nil, t0, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, t0, upstreamError(c, dep, out.Path, resp)
	}
	dep.ObserveLatency(time.Since(t0))
	return resp, t0, nil
}

// sharesMemory reports whether a and b overlap in memory.
func sharesMemory(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// upstreamError maps a non-2xx backend answer to what the client should
// see: the client's own mistakes keep their status, the gateway's
// configuration or backend problems become 502 naming the backend.
func upstreamError(c *Call, dep router.Deployment, path string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	name := dep.Backend.Name
	msg := codec.ErrorMessage(body)
	st := resp.StatusCode
	switch {
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_auth_failed",
			"backend %q rejected the gateway's credentials (%d: %s): set backends.%s.api_key (or the environment variable it names) to a valid key",
			name, st, msg, name)
	case st == http.StatusNotFound:
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_not_found",
			"backend %q answered 404 for model %q (%s): check that the backend serves that model name (models.%s.upstream_model) and the %s endpoint",
			name, dep.UpstreamModel, msg, c.Req.Model, path)
	case st == http.StatusTooManyRequests:
		e := apierror.Newf(http.StatusTooManyRequests, apierror.KindRateLimit, "backend_rate_limited",
			"backend %q is rate limiting (%s): retry later", name, msg)
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			e.Header = http.Header{"Retry-After": {ra}}
		}
		return e
	case st == http.StatusGatewayTimeout:
		return apierror.Newf(http.StatusGatewayTimeout, apierror.KindTimeout, "backend_timeout", "backend %q timed out (%s)", name, msg)
	// llama.cpp's llama-server answers 500 for a request its start-up
	// flags or model cannot take. The server is healthy and every such
	// request fails the same way: no backend failure (no breaker, no
	// retry on another deployment) but a 400 the client does not retry,
	// saying what fixes it.
	case st >= 500 && strings.Contains(msg, "--jinja"):
		return apierror.Newf(http.StatusBadRequest, apierror.KindInvalidRequest, "backend_tools_disabled",
			"backend %q cannot take requests with tools (%d: %s): it is llama.cpp's llama-server started without --jinja; "+
				"add --jinja to its command line and restart it (Claude Code, Codex, opencode and Cline send tools with every request)",
			name, st, msg)
	case st >= 500 && (strings.Contains(msg, "image input is not supported") || strings.Contains(msg, "audio input is not supported")):
		return apierror.Newf(http.StatusBadRequest, apierror.KindInvalidRequest, "backend_input_unsupported",
			"backend %q cannot take this request's image or audio input (%d: %s): the model takes text only "+
				"(llama-server reads images and audio only with the model's --mmproj file); send text only, or route such input to a multimodal model",
			name, st, msg)
	case st >= 500:
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_error", "backend %q failed (%d: %s)", name, st, msg)
	}
	// 400, 413, 422 ...: the request itself was refused. The engine's own
	// words and numbers go to the client.
	ee := codec.ParseEngineError(body)
	if ee.ContextOverflow() {
		return engineContextError(c, name, msg, ee)
	}
	if ee.Type != "" {
		msg = ee.Type + ": " + msg
	}
	return apierror.Newf(st, apierror.KindInvalidRequest, "backend_rejected_request", "backend %q rejected the request: %s", name, msg)
}

// engineContextError is an engine's refusal of a request that does not
// fit its context, with the engine's numbers: a prompt that alone fills it
// is "prompt is too long" (what Anthropic says, and what Claude Code
// compacts on); otherwise the output limit is what to lower.
func engineContextError(c *Call, backend, msg string, ee codec.EngineError) *apierror.Error {
	var e *apierror.Error
	if ee.PromptTokens >= ee.ContextTokens {
		e = apierror.InvalidRequest("context_length_exceeded",
			"prompt is too long: %d tokens > %d maximum (model %q, counted by the engine behind backend %q, which says: %s): shorten the prompt or start a new conversation",
			ee.PromptTokens, ee.ContextTokens, c.Req.Model, backend, msg)
	} else {
		e = apierror.InvalidRequest("context_length_exceeded",
			"the prompt (%d tokens) plus the output limit exceeds model %q's context of %d tokens (the engine behind backend %q says: %s): lower the output limit to %d or less",
			ee.PromptTokens, c.Req.Model, ee.ContextTokens, backend, msg, ee.ContextTokens-ee.PromptTokens)
	}
	e.Context = &apierror.ContextOverflow{PromptTokens: ee.PromptTokens, ContextTokens: ee.ContextTokens}
	return e
}

// isEventStream reports whether an answer is SSE.
func isEventStream(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}
