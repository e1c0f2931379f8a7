package server

import (
	"context"
	"net/http"

	"llmgate/internal/router"
	"llmgate/internal/tracing"
)

// traceAttempt opens the span of one upstream attempt; the returned end
// closes it with the call's outcome so far. With tracing off both are
// free.
func (s *Server) traceAttempt(ctx context.Context, c *call, dep router.Deployment) (context.Context, func(error)) {
	if !tracing.Enabled() {
		return ctx, func(error) {}
	}
	a := tracing.Attempt{Model: c.model, UpstreamModel: dep.UpstreamModel, KeyID: c.principal.KeyID(), RequestID: c.reqID, Stream: c.stream}
	if dep.Backend != nil {
		a.Backend = dep.Backend.Name
	}
	ctx, end := tracing.StartAttempt(ctx, a)
	return ctx, func(err error) {
		st := c.status
		if st == 0 && err == nil {
			st = http.StatusOK
		}
		end(st, c.usage.PromptTokens, c.usage.CompletionTokens, err)
	}
}
