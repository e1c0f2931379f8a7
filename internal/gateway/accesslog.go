package gateway

import (
	"context"
	"log/slog"

	"llmgate/internal/logging"
	"llmgate/internal/server"
	"llmgate/internal/usage"
)

// accessLog writes one structured log line per served request, from the
// ledger record the relay builds anyway, after the answer was flushed.
// Server errors (5xx) log at Warn so they stand out; the rest at Info.
// Lines go through logging.Line: formatted straight into the log's buffer,
// and no stack walk for a caller's program counter (as Logger.LogAttrs
// would do).
type accessLog struct {
	log *slog.Logger
}

func (a accessLog) Observe(r usage.Record) {
	level := slog.LevelInfo
	if r.Status >= 500 || r.Status == 0 {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if a.log.Enabled(ctx, level) {
		attrs := []slog.Attr{
			slog.String("request_id", echoedID(r)), slog.String("record_id", r.ID), slog.String("key_id", r.KeyID), slog.String("endpoint", r.Endpoint),
			slog.String("model", r.Model), slog.String("backend", r.Backend), slog.Int("status", r.Status),
			slog.Bool("stream", r.Stream), slog.Int("prompt_tokens", r.PromptTokens), slog.Int("completion_tokens", r.CompletionTokens),
			slog.Float64("ttft_ms", float64(r.TTFT.Microseconds())/1000), slog.Float64("latency_ms", float64(r.Latency.Microseconds())/1000),
			slog.Float64("overhead_ms", float64(r.Overhead.Microseconds())/1000),
		}
		if r.ServedModel != "" {
			attrs = append(attrs, slog.String("served_model", r.ServedModel))
		}
		if r.ErrorType != "" {
			attrs = append(attrs, slog.String("error", r.ErrorType))
		}
		if r.Estimated {
			attrs = append(attrs, slog.Bool("estimated", true))
		}
		if r.CachedTokens > 0 {
			attrs = append(attrs, slog.Int("cached_tokens", r.CachedTokens))
		}
		logging.Line(a.log, level, "request", attrs)
	}
}

// echoedID is the id the client got in X-Request-Id: its own when it sent
// one, else the record's.
func echoedID(r usage.Record) string {
	if r.ClientRequestID != "" {
		return r.ClientRequestID
	}
	return r.ID
}

// unrecorded writes the access line of a request without a ledger record
// (refused before a model was resolved, a models list, an unknown route),
// in the same shape.
func (a accessLog) unrecorded(e server.AccessEntry) {
	level := slog.LevelInfo
	if e.Status >= 500 {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !a.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", e.RequestID), slog.String("key_id", e.KeyID), slog.String("method", e.Method),
		slog.String("path", e.Path), slog.Int("status", e.Status),
		slog.Float64("latency_ms", float64(e.Latency.Microseconds())/1000),
	}
	if e.Code != "" {
		attrs = append(attrs, slog.String("error", e.Code))
	}
	logging.Line(a.log, level, "request", attrs)
}
