package server

import (
	"context"
	"log/slog"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/router"
)

// logAttempt logs one attempt of a request at a deployment. Failures are
// warnings (with whether the router may still retry); successes are logged
// at info when they came after a failed attempt and at debug otherwise, so
// the hot path of a healthy gateway formats nothing.
func (s *Server) logAttempt(c *call, dep router.Deployment, t0 time.Time, committed bool, err error) {
	c.attempts++
	level := slog.LevelDebug
	switch {
	case err != nil:
		level = slog.LevelWarn
	case c.attempts > 1:
		level = slog.LevelInfo
	}
	if !s.log.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", c.reqID), slog.String("model", c.model), slog.Int("attempt", c.attempts),
		slog.String("backend", dep.Backend.Name), slog.String("upstream_model", dep.UpstreamModel),
		slog.Duration("elapsed", time.Since(t0)), slog.Bool("committed", committed),
	}
	msg := "attempt served"
	if err != nil {
		e := apierror.From(err)
		msg = "attempt failed"
		attrs = append(attrs, slog.Int("status", e.Status), slog.String("code", e.Code), slog.String("err", e.Message))
		if e.Err != nil {
			attrs = append(attrs, slog.String("cause", e.Err.Error()))
		}
	}
	s.log.LogAttrs(context.Background(), level, msg, attrs...)
}
