package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/codec"
	"llmgate/internal/dialect"
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

// leased reports whether the attempt already holds an engine lease.
func leased(ctx context.Context) bool { return ctx.Value(leaseKey{}) != nil }

// explainFailure lets the engine of the attempt's lease, if it holds one,
// explain a failure (its process exited: engine_crashed with its last log
// lines) before the client is told. It ends the lease early, which is
// harmless: the answer has failed.
func explainFailure(ctx context.Context, e *apierror.Error) *apierror.Error {
	release, _ := ctx.Value(leaseKey{}).(func(error) error)
	if release == nil {
		return e
	}
	if err := release(e); err != nil {
		return apierror.From(err)
	}
	return e
}

// withEngine takes a lease from l on the local engine of dep (starting
// it, or waiting in its queue) and runs the attempt with it; the engine may
// explain a failure by its process exiting. A streaming client gets the SSE
// headers and comments while it waits, so that it does not time out; the
// attempt then writes on after them, and a failure before its first event
// becomes the error event of the client's protocol.
func (rl *Relay) withEngine(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment, n int, l router.Leaser) Result {
	name := dep.Backend.Name
	// Waiting for the engine (its start, then what it says of itself) is
	// waiting in the gateway; a tokenizer call meanwhile is the backend's.
	start, backend := time.Now(), c.t.backend
	waited := func() { c.t.waited += time.Since(start) - (c.t.backend - backend) }
	release, sw, err := acquireEngine(ctx, w, name, c.Req.Stream, func(ctx context.Context) (func(error) error, error) {
		return l.Lease(ctx, name, c.Req.Model)
	})
	if err != nil {
		waited()
		return rl.engineFailed(sw, c, Result{Dep: dep}, err)
	}
	err = rl.sizeAfterStart(ctx, w, c, dep)
	waited()
	if err != nil {
		res := Result{Dep: dep}.failed(err)
		return rl.engineFailed(sw, c, withCause(res, release(res.routerErr())), res.Err)
	}
	ctx = context.WithValue(ctx, leaseKey{}, release)
	if sw == nil {
		res := rl.relay(ctx, w, c, dep, n)
		return withCause(res, release(res.routerErr()))
	}
	res := rl.relay(ctx, headersSent{w}, c, dep, n)
	res = withCause(res, release(res.routerErr()))
	if res.Err != nil && !res.Committed {
		return rl.engineFailed(sw, c, res, res.Err)
	}
	return res
}

// withCause puts the engine's explanation of a failure on the result.
func withCause(res Result, err error) Result {
	if err == nil {
		return res
	}
	return res.failed(err)
}

// acquireEngine takes the lease. When keepAlive is set and the wait is
// noticeable, it sends SSE headers and then comments until the engine is
// ready, and returns the SSE writer it used.
func acquireEngine(ctx context.Context, w http.ResponseWriter, name string, keepAlive bool,
	acquire func(context.Context) (func(error) error, error)) (func(error) error, *sse.Writer, error) {
	if !keepAlive {
		release, err := acquire(ctx)
		return release, nil, err
	}
	var release func(error) error
	start := time.Now()
	sw, err := keepAliveWhile(w, nil, engineKeepAliveFirst, engineKeepAliveEvery, func() error {
		var err error
		release, err = acquire(ctx)
		return err
	}, func(sw *sse.Writer) {
		_ = sw.WriteComment(fmt.Sprintf("waiting for engine %s (%ds)", name, int(time.Since(start).Seconds())))
	})
	return release, sw, err
}

// keepAliveWhile runs wait on its own goroutine. When it lasts longer
// than first, the client gets the SSE headers (unless sw says they went
// out already) and then alive every `every` until wait returns; the
// writer used is returned (sw, or nil when nothing was sent). A failed
// write means the client left: its context ends the wait.
func keepAliveWhile(w http.ResponseWriter, sw *sse.Writer, first, every time.Duration, wait func() error, alive func(*sse.Writer)) (*sse.Writer, error) {
	done := make(chan error, 1)
	go func() { done <- wait() }()
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return sw, err
		case <-t.C:
			if sw == nil {
				sse.SetHeaders(w.Header())
				w.WriteHeader(http.StatusOK)
				sw = sse.NewWriter(w)
			}
			alive(sw)
			t.Reset(every)
		}
	}
}

// engineFailed reports a failure before any answer: as the result when
// nothing was sent yet, else as the client protocol's error event after the
// keep-alive comments (the result is then committed: the client has the
// status, and finish writes the event as the answer's tail).
func (rl *Relay) engineFailed(sw *sse.Writer, c *Call, res Result, err error) Result {
	res = res.failed(err)
	if sw == nil {
		return res
	}
	res.Committed = true
	if !errors.Is(res.Err, apierror.ErrClientClosed) {
		enc := codec.NewEncoder(c.Req, codec.FormFor(c.Req.Dialect, res.dialect()), c.enc)
		res.tail = tail{sw: sw, events: enc.Fail(nil, res.Err)}
	}
	return res
}

// dialect is the backend dialect of the result's deployment.
func (r Result) dialect() dialect.Dialect {
	if r.Dep.Backend == nil {
		return ""
	}
	return r.Dep.Backend.Dialect
}

// headersSent is a ResponseWriter whose headers are already on the wire:
// the relay's WriteHeader is dropped instead of being written twice.
type headersSent struct{ http.ResponseWriter }

func (h headersSent) WriteHeader(int) {}

// Unwrap lets http.ResponseController reach the Flusher.
func (h headersSent) Unwrap() http.ResponseWriter { return h.ResponseWriter }
