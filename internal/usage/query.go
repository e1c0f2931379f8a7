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

// SecondUse is what one key did on one model in one second: the requests
// the gateway let through to a backend (its own 429 refusals left out)
// and the tokens the ledger has for them. ServedModel is the fallback
// model whose deployment made their last attempt (Record.ServedModel).
type SecondUse struct {
	KeyID, Model, ServedModel string
	// Second is the Unix second in which the requests started.
	Second           int64
	Requests, Tokens int64
}

// RateReader is implemented by stores that can say, second by second, what
// keys and models used since a time: after Redis lost the rate limiters'
// buckets, they are rebuilt from the ledger's last minute.
type RateReader interface {
	UseSince(ctx context.Context, since time.Time) ([]SecondUse, error)
}
