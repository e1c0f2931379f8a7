package server

import (
	"context"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"

	"llmgate/internal/apierror"
)

// LargeBody is the size from which a request body counts against the
// large-body memory cap.
const LargeBody = 1 << 20

// largeBodies bounds the memory large request bodies hold at once. A body
// is read into memory whole, and one the gateway decodes or translates
// (Anthropic Messages, the Responses API, a chat request for an Anthropic
// backend) allocates 10–40 times its size while that runs, kept until the
// request ends: a few clients sending bodies of max_body_bytes at once,
// within every per-key cap, could otherwise take more memory than the
// machine has. Each body of LargeBody or more takes its size from the cap
// once it is read (not from its declared length: a client trickling bodies
// it declared large would hold everyone's room) until its request ends; a
// body that finds no room waits for it, in turn, up to wait, and then gets
// a 503. Smaller bodies, nearly all of an agent's requests, never wait.
type largeBodies struct {
	sem  *semaphore.Weighted
	max  int64
	wait time.Duration
}

// newLargeBodies returns the cap of max bytes (nil: none).
func newLargeBodies(max int64, wait time.Duration) *largeBodies {
	if max <= 0 {
		return nil
	}
	return &largeBodies{sem: semaphore.NewWeighted(max), max: max, wait: wait}
}

// take holds n bytes of the cap until release is called; release is nil
// when nothing was taken (a small body, or no cap). A body larger than the
// whole cap takes all of it.
func (l *largeBodies) take(ctx context.Context, n int64) (release func(), err error) {
	if l == nil || n < LargeBody {
		return nil, nil
	}
	n = min(n, l.max)
	if !l.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(ctx, l.wait)
		err := l.sem.Acquire(wctx, n)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, apierror.ClientClosed(ctx.Err())
			}
			e := apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "large_bodies_busy",
				"the gateway already holds %d MiB of large request bodies (max_large_body_memory) and this %d MiB body waited %s for room: retry shortly, send a smaller request, or raise max_large_body_memory",
				l.max>>20, n>>20, l.wait)
			e.Header = http.Header{"Retry-After": {"1"}}
			return nil, e
		}
	}
	return func() { l.sem.Release(n) }, nil
}
