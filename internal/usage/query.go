package usage

import (
	"context"
	"time"
)

// Filter selects ledger records for a summary.
type Filter struct {
	Since, Until time.Time // Until zero = now
	KeyID        string    // empty = all keys
	Model        string    // empty = all models
	// GroupBy lists dimensions among "key", "model", "backend", "day"; empty
	// means key and model.
	GroupBy []string
}

// SummaryRow aggregates the records of one group.
type SummaryRow struct {
	KeyID            string  `json:"key_id,omitempty"`
	KeyName          string  `json:"key_name,omitempty"`
	Model            string  `json:"model,omitempty"`
	Backend          string  `json:"backend,omitempty"`
	Day              string  `json:"day,omitempty"`
	Requests         int64   `json:"requests"`
	Errors           int64   `json:"errors"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CachedTokens     int64   `json:"cached_tokens"` // of the prompt tokens, those the backend served from its prefix cache
	CompletionTokens int64   `json:"completion_tokens"`
	CostUSD          float64 `json:"cost_usd"`
	Estimated        int64   `json:"estimated_records"`
	P50LatencyMS     float64 `json:"p50_latency_ms"`
	P95LatencyMS     float64 `json:"p95_latency_ms"`
}

// Querier answers usage questions.
type Querier interface {
	Summary(ctx context.Context, f Filter) ([]SummaryRow, error)
	// Recent returns the newest records, newest first.
	Recent(ctx context.Context, limit int) ([]Record, error)
}
