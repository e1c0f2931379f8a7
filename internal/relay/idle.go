package relay

import (
	"context"
	"errors"
	"time"

	"llmgate/internal/provider"
)

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
