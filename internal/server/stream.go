package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/jsonscan"
	"llmgate/internal/provider"
	"llmgate/internal/router"
	"llmgate/internal/sse"
	"llmgate/internal/tracing"
)

var (
	emptyChoices = []byte(`[]`)
)

// relayStream relays an SSE stream event by event, flushing each, while a
// tap takes usage and timing. The usage-only chunk the gateway asked for is
// dropped when the client did not ask for it. A stream that breaks after
// headers ends with an error event, never a silent truncation.
//
// The first event is read before anything is written: a backend that dies
// or stalls before its first event has sent the client nothing, so the
// failure is returned uncommitted and the router may try another
// deployment. After that, committed is true and err reports an upstream
// failure (for the breaker) that the client already saw as an error event.
// idle, when set, is re-armed after each event.
func (s *Server) relayStream(w http.ResponseWriter, ctx context.Context, c *call, resp *http.Response, idle *idleGap) (committed bool, err error) {
	rd, ev, sw, err := c.beginStream(w, resp, idle)
	if err != nil {
		return false, c.fail(s.streamError(ctx, c, err, idle))
	}
	for {
		if ev.Done() {
			_ = sw.WriteDone()
			return true, nil
		}
		data := ev.Data
		if c.tapChunk(data) {
			if err := sw.WriteEvent(ev.Name, data); err != nil {
				// The client went away; the deferred cancel stops the upstream.
				c.status, c.errType = 499, "client_closed"
				return true, nil
			}
		}
		ev, err = rd.Next()
		if err != nil {
			return true, s.endStream(sw, ctx, c, err, idle)
		}
		idle.rearm()
	}
}

// beginStream reads a backend stream's first event before anything is
// written — a failure then is returned uncommitted, so the attempt may fail
// over — and then commits the client's SSE answer. The backend's comment
// keep-alives count as signs of life for idle.
func (c *call) beginStream(w http.ResponseWriter, resp *http.Response, idle *idleGap) (*sse.Reader, *sse.Event, *sse.Writer, error) {
	rd := sse.NewReader(resp.Body, 0)
	rd.OnComment = idle.alive
	ev, err := rd.Next()
	if err != nil {
		return nil, nil, nil, err
	}
	idle.rearm()
	sse.SetHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	c.status = http.StatusOK
	c.committed = true
	return rd, ev, sse.NewWriter(w), nil
}

// errIdleGap is the cancellation cause when a stream went quiet too long.
var errIdleGap = errors.New("no stream event within idle_timeout")

// idleGap cancels an attempt whose stream goes quiet: before the first
// event for longer than first_byte_timeout (or idle_timeout when that is
// not set), afterwards for longer than idle_timeout. A nil *idleGap does
// nothing.
type idleGap struct {
	d, first time.Duration
	started  bool // the first event arrived
	timer    *time.Timer
}

// startIdleGap arms the time-outs once the response headers arrived.
// first is the remaining first-byte budget; either may be zero.
func startIdleGap(idle, first time.Duration, cancel context.CancelCauseFunc) *idleGap {
	wait := first
	if wait <= 0 {
		wait = idle
	}
	if wait <= 0 {
		return nil
	}
	return &idleGap{d: idle, first: first, timer: time.AfterFunc(wait, func() { cancel(errIdleGap) })}
}

// firstEventBudget is what is left of a backend's first_byte_timeout for
// the first stream event once the response headers took their part since
// t0; zero when the backend has no first_byte_timeout.
func firstEventBudget(b *provider.Backend, t0 time.Time) time.Duration {
	first := b.FirstByteTimeout()
	if first <= 0 {
		return 0
	}
	return max(first-time.Since(t0), time.Millisecond)
}

// rearm is called after each event.
func (g *idleGap) rearm() {
	if g == nil {
		return
	}
	g.started = true
	if g.d <= 0 {
		g.timer.Stop()
		return
	}
	g.timer.Reset(g.d)
}

// alive is called for a comment line from the backend: a keep-alive, such
// as a queueing provider or another llmgate waiting for its local engine
// sends. It counts as a sign of life for idle_timeout, but not as the first
// event that first_byte_timeout waits for: a backend that only keeps the
// line open has not started answering, and another deployment may.
func (g *idleGap) alive() {
	if g == nil || g.d <= 0 || (!g.started && g.first > 0) {
		return
	}
	g.timer.Reset(g.d)
}

func (g *idleGap) stop() {
	if g != nil {
		g.timer.Stop()
	}
}

// streamError turns a stream read failure into the client-facing error.
func (s *Server) streamError(ctx context.Context, c *call, err error, idle *idleGap) *apierror.Error {
	if idle != nil && context.Cause(ctx) == errIdleGap && !idle.started && idle.first > 0 {
		return apierror.Newf(http.StatusGatewayTimeout, apierror.KindTimeout, "backend_timeout",
			"backend %q sent no stream event within first_byte_timeout (%s): it may be queueing or overloaded; raise backends.%s.first_byte_timeout if the model is slow to start",
			c.dep.Backend.Name, idle.first, c.dep.Backend.Name).Wrap(err)
	}
	if idle != nil && context.Cause(ctx) == errIdleGap {
		return apierror.Newf(http.StatusGatewayTimeout, apierror.KindTimeout, "stream_idle_timeout",
			"backend %q sent no stream event for %s; raise backends.%s.idle_timeout if the model is slow, or check that it is not stuck",
			c.dep.Backend.Name, idle.d, c.dep.Backend.Name).Wrap(err)
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return apierror.New(499, apierror.KindClientClosed, "client_closed", "client closed the request").Wrap(err)
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "stream_cut",
			"backend %q ended the stream before it was complete (no [DONE]); the answer is truncated", c.dep.Backend.Name)
	}
	return c.dep.Backend.Classify(ctx, err)
}

// tapChunk inspects one chunk for timing, usage, errors and generated text,
// and reports whether to forward it to the client.
func (c *call) tapChunk(data []byte) bool {
	hasUsage := bytes.Contains(data, keyUsage)
	hasError := bytes.Contains(data, keyError)
	if c.ttft == 0 || hasUsage || hasError {
		sp, err := jsonscan.Find(data, "choices", "usage", "error")
		if err != nil {
			return true
		}
		choicesEmpty := !sp[0].Valid() || bytes.Equal(bytes.TrimSpace(data[sp[0].Start:sp[0].End]), emptyChoices)
		if c.ttft == 0 && !choicesEmpty {
			c.ttft = time.Since(c.start)
		}
		if hasError && !jsonscan.IsNull(data, sp[2]) {
			c.status, c.errType = http.StatusBadGateway, "upstream_stream_error"
		}
		if hasUsage && !jsonscan.IsNull(data, sp[1]) {
			var u openai.Usage
			if json.Unmarshal(data[sp[1].Start:sp[1].End], &u) == nil {
				c.usage, c.haveUsage = u, true
			}
			if choicesEmpty && sp[0].Valid() && !c.clientWantsUsage {
				return false
			}
		}
	}
	c.outChars += approxGeneratedChars(data)
	return true
}

// endStream handles a stream that ended without [DONE] after the client
// got events: the client gets an error event, and the failure is returned
// for the breaker (nil when the client itself went away).
func (s *Server) endStream(sw *sse.Writer, ctx context.Context, c *call, err error, idle *idleGap) error {
	e := c.streamBroke(s.streamError(ctx, c, err, idle))
	if e == nil {
		return nil
	}
	_ = sw.WriteData(openai.MarshalError(e))
	return e
}

// streamBroke records a stream that failed after the client got events, in
// every protocol: nil when the client itself went away (a 499), otherwise
// the error to send as the stream's last event and to return for the
// breaker.
func (c *call) streamBroke(e *apierror.Error) *apierror.Error {
	if e.Code == "client_closed" {
		c.status, c.errType = 499, "client_closed"
		return nil
	}
	if e.Code != "stream_cut" {
		e.Message = "stream interrupted: " + e.Message
	}
	c.status, c.errType = e.Status, e.Code
	return e
}

// attemptContext bounds one attempt by the backend's whole-request
// timeout. cancel, with a cause, is also how the idle gap ends a stream;
// release must be deferred.
func attemptContext(ctx context.Context, b *provider.Backend) (_ context.Context, cancel context.CancelCauseFunc, release func()) {
	ctx, cancel = context.WithCancelCause(ctx)
	if t := b.Timeout(); t > 0 {
		tctx, cancelT := context.WithTimeout(ctx, t)
		return tctx, cancel, func() { cancelT(); cancel(nil) }
	}
	return ctx, cancel, func() { cancel(nil) }
}

// send posts body to path on one deployment and returns its 2xx answer
// (the caller closes the body) and when the request left. The time to
// headers feeds lowest_latency balancing; a failure comes back recorded on
// the call, a non-2xx answer mapped by upstreamError.
func (s *Server) send(ctx context.Context, c *call, dep router.Deployment, path string, body []byte, header func(http.Header)) (*http.Response, time.Time, error) {
	t0 := time.Now()
	req, err := dep.Backend.NewRequest(ctx, path, body, c.reqID)
	if err != nil {
		return nil, t0, c.fail(err)
	}
	tracing.Inject(ctx, req.Header)
	if c.stream {
		req.Header["Accept"] = []string{"text/event-stream"}
	}
	if header != nil {
		header(req.Header)
	}
	resp, err := dep.Backend.Do(req)
	if err != nil {
		return nil, t0, c.fail(err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, t0, c.fail(s.upstreamError(c, resp))
	}
	dep.ObserveLatency(time.Since(t0))
	return resp, t0, nil
}

// isEventStream reports whether an answer is SSE.
func isEventStream(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}

var genKeys = [][]byte{[]byte(`"content":"`), []byte(`"reasoning_content":"`), []byte(`"arguments":"`), []byte(`"text":"`)}

// approxGeneratedChars counts characters inside generated-text string
// fields. It is only used when a backend reports no usage, so it favours
// speed over exactness (escapes count as one character).
func approxGeneratedChars(data []byte) int {
	n := 0
	for _, k := range genKeys {
		rest := data
		for {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			rest = rest[i+len(k):]
			j := 0
			for j < len(rest) && rest[j] != '"' {
				if rest[j] == '\\' {
					j++
				}
				// Count runes, not bytes: skip UTF-8 continuation bytes.
				if j < len(rest) && rest[j]&0xC0 != 0x80 {
					n++
				}
				j++
			}
			rest = rest[min(j, len(rest)):]
		}
	}
	return n
}
