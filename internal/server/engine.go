package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/router"
	"llmgate/internal/sse"
)

// Keep-alive timing while a streaming request waits for a local engine:
// the first comment goes out once the wait is noticeable, then regularly,
// well inside the 30-60 s read time-outs of common clients.
var (
	engineKeepAliveFirst = 250 * time.Millisecond
	engineKeepAliveEvery = 5 * time.Second
)

type leaseKey struct{}

// attemptEngine runs an attempt at a backend that is a local engine: it
// takes a lease on the engine (starting it, or waiting in its queue), runs
// the ordinary attempt, and lets the engine explain a failure caused by
// its process exiting. A streaming chat or completions client gets SSE
// comments while it waits, so that it does not time out.
func (s *Server) attemptEngine(ctx context.Context, w http.ResponseWriter, c *call, dep router.Deployment, body []byte) (bool, error) {
	keepAlive := c.stream && (c.ep.name == endpointChat.name || c.ep.name == endpointCompletions.name)
	return s.withEngine(ctx, w, c, dep, keepAlive, func(ctx context.Context, w http.ResponseWriter) (bool, error) {
		return s.attempt(ctx, w, c, dep, body)
	})
}

// withEngine takes a lease on the local engine of dep and runs the attempt
// with it. With keepAlive (a streaming client of any dialect), a noticeable
// wait sends the SSE headers and comments; the attempt then writes on
// after them, and a failure before its first event becomes an error event
// in the client's protocol (see streamFailed).
func (s *Server) withEngine(ctx context.Context, w http.ResponseWriter, c *call, dep router.Deployment, keepAlive bool,
	run func(context.Context, http.ResponseWriter) (bool, error)) (bool, error) {
	b := dep.Backend
	c.dep = dep
	release, sw, err := s.acquireEngine(ctx, w, c, b.Name, func(ctx context.Context) (func(error) error, error) {
		return b.Acquire(ctx, c.model)
	}, keepAlive)
	if err != nil {
		return s.engineFailed(sw, c, err)
	}
	ctx = context.WithValue(ctx, leaseKey{}, true)
	if sw == nil {
		committed, err := run(ctx, w)
		return committed, release(err)
	}
	// The keep-alive already sent the SSE headers: the relay writes on,
	// and a failure becomes an error event in the stream.
	committed, err := run(ctx, headersSent{w})
	err = release(err)
	if err != nil && !committed {
		return s.engineFailed(sw, c, err)
	}
	return true, err
}

// leased reports whether the attempt already holds an engine lease.
func leased(ctx context.Context) bool { return ctx.Value(leaseKey{}) != nil }

// acquireEngine takes the lease. When keepAlive is set and the wait is
// noticeable, it sends SSE headers and then comments until the engine is
// ready, and returns the SSE writer it used.
func (s *Server) acquireEngine(ctx context.Context, w http.ResponseWriter, c *call, name string,
	acquire func(context.Context) (func(error) error, error), keepAlive bool) (func(error) error, *sse.Writer, error) {
	if !keepAlive {
		release, err := acquire(ctx)
		return release, nil, err
	}
	type result struct {
		release func(error) error
		err     error
	}
	done := make(chan result, 1)
	go func() {
		r, err := acquire(ctx)
		done <- result{r, err}
	}()
	t := time.NewTimer(engineKeepAliveFirst)
	defer t.Stop()
	var sw *sse.Writer
	start := time.Now()
	for {
		select {
		case r := <-done:
			return r.release, sw, r.err
		case <-t.C:
			if sw == nil {
				sse.SetHeaders(w.Header())
				w.WriteHeader(http.StatusOK)
				sw = sse.NewWriter(w)
			}
			// A failed write means the client left; its context ends the wait.
			_ = sw.WriteComment(fmt.Sprintf("waiting for engine %s (%ds)", name, int(time.Since(start).Seconds())))
			t.Reset(engineKeepAliveEvery)
		}
	}
}

// engineFailed reports a failure before any answer: as the return value
// when nothing was sent yet, else as an error event after the keep-alive
// comments (returned as handled, since the client already has it).
func (s *Server) engineFailed(sw *sse.Writer, c *call, err error) (bool, error) {
	e := c.fail(err)
	if sw == nil {
		return false, e
	}
	c.committed = true
	if e.Status != 499 {
		streamFailed(sw, c, e)
	}
	return true, nil
}

// streamFailed writes e on a stream whose headers are sent but which has
// no event yet, as the client's protocol ends a failed stream: an OpenAI
// error object for chat and completions; for a translated client what its
// hub translator sends for a failure (Anthropic: message_start then an
// "error" event; Responses: response.created, "error", response.failed).
func streamFailed(sw *sse.Writer, c *call, e *apierror.Error) {
	if c.hub == nil {
		_ = sw.WriteData(openai.MarshalError(e))
		return
	}
	for _, ev := range c.hub.stream().Finish(e) {
		_ = sw.WriteEvent(ev.Name, ev.Data)
	}
}

// headersSent is a ResponseWriter whose headers are already on the wire:
// the relay's WriteHeader is dropped instead of being written twice.
type headersSent struct{ http.ResponseWriter }

func (h headersSent) WriteHeader(int) {}

// Unwrap lets http.ResponseController reach the Flusher.
func (h headersSent) Unwrap() http.ResponseWriter { return h.ResponseWriter }
