package relay

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"llmgate/internal/router"
	"llmgate/internal/tracing"
)

// traceAttempt opens the span of one upstream attempt; the returned end
// closes it with the attempt's result. With tracing off both are free.
func (rl *Relay) traceAttempt(ctx context.Context, c *Call, dep router.Deployment) (context.Context, func(Result)) {
	if !tracing.Enabled() {
		return ctx, func(Result) {}
	}
	a := tracing.Attempt{Model: c.Req.Model, UpstreamModel: dep.UpstreamModel, KeyID: c.Principal.KeyID(), RequestID: c.UpstreamID(), Stream: c.Req.Stream}
	if dep.Backend != nil {
		a.Backend = dep.Backend.Name
	}
	ctx, end := tracing.StartAttempt(ctx, a)
	return ctx, func(res Result) {
		st := res.Status
		if st == 0 && res.Err == nil {
			st = http.StatusOK
		}
		end(st, res.Usage.prompt, res.Usage.completion, res.routerErr())
	}
}

// logAttempt logs attempt n of a request at a deployment. Failures are
// warnings; successes are logged at info when they came after a failed
// attempt and at debug otherwise, so the hot path of a healthy gateway
// formats nothing.
func (rl *Relay) logAttempt(c *Call, dep router.Deployment, n int, t0 time.Time, res Result) {
	level := slog.LevelDebug
	switch {
	case res.Err != nil:
		level = slog.LevelWarn
	case n > 1:
		level = slog.LevelInfo
	}
	if !rl.log.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", c.ID), slog.String("model", c.Req.Model), slog.Int("attempt", n),
		slog.String("backend", dep.Backend.Name), slog.String("upstream_model", dep.UpstreamModel),
		slog.Duration("elapsed", time.Since(t0)), slog.Bool("committed", res.Committed),
	}
	msg := "attempt served"
	if e := res.Err; e != nil {
		msg = "attempt failed"
		attrs = append(attrs, slog.Int("status", e.Status), slog.String("code", e.Code), slog.String("err", e.Message))
		if e.Err != nil {
			attrs = append(attrs, slog.String("cause", e.Err.Error()))
		}
	}
	rl.log.LogAttrs(context.Background(), level, msg, attrs...)
}
