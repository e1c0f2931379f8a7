package relay

import (
	"net/http"
	"time"

	"llmgate/internal/servertiming"
)

// timing divides a request's time, from its body read until its answer's
// head is handed to the HTTP server, into waiting for backends (their
// answers, the tokenizer round trips of the count stage), waiting in the
// gateway (a deployment's fair queue, a local engine starting, the pause
// between attempts) and the rest: the gateway's own work. The client gets
// the split in a Server-Timing header, the observers the gateway's share
// (usage.Record.Overhead).
type timing struct {
	backend, waited time.Duration
	// sent is when the attempt in flight sent its request (zero: none);
	// its answer's wait ends when the relay has its first events.
	sent time.Time
	// attemptEnd is when the last failed attempt ended: the time until
	// the next one starts is a wait (zero: no attempt failed yet).
	attemptEnd time.Time
	gateway    time.Duration // set by timeHead
	headed     bool
}

// backendSince adds the time since at to the backends' share.
func (t *timing) backendSince(at time.Time) { t.backend += time.Since(at) }

// answered ends the wait for the answer of the attempt in flight.
func (t *timing) answered() {
	if !t.sent.IsZero() {
		t.backendSince(t.sent)
		t.sent = time.Time{}
	}
}

// timeHead fixes the gateway's share as the answer's head goes out, and
// writes the split to h's Server-Timing (nil h: the head went out before,
// with the keep-alives of a queue or an engine start, or the client left).
// Only the first call counts.
func (c *Call) timeHead(h http.Header) {
	t := &c.t
	if t.headed {
		return
	}
	t.headed = true
	t.answered()
	from := c.Read
	if from.IsZero() {
		from = c.Start
	}
	t.gateway = max(time.Since(from)-t.backend-t.waited, 0)
	if h == nil {
		return
	}
	var b [80]byte
	v := servertiming.Append(b[:0], "gateway", t.gateway)
	if t.backend > 0 {
		v = servertiming.Append(v, "backend", t.backend)
	}
	if t.waited > 0 {
		v = servertiming.Append(v, "wait", t.waited)
	}
	h[servertiming.Header] = []string{string(v)}
}
