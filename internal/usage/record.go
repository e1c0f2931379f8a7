// Package usage is the vocabulary every package shares about what a
// request used: the ledger Record and the Writer that stores records, ledger
// ids, token estimates, money formatting, summary queries and retention. The
// journal that makes records durable is package ledger; hourly rollups are
// package rollup.
package usage

import (
	"context"
	"time"
)

// Record is one request in the ledger.
type Record struct {
	// ID is the ledger's key: made by the server (NewID), unguessable and
	// unique per request. Storing a record twice under one ID stores it
	// once, which is what makes replays of the spool idempotent. Add gives
	// a record without one a new ID.
	ID string
	// ClientRequestID is the client's X-Request-Id, "" when it sent none.
	// Clients choose it freely, so it is neither unique nor trusted: two
	// records with the same ClientRequestID are two requests.
	ClientRequestID string
	Time            time.Time
	KeyID           string
	Model           string // public model name: the one the client asked for
	// ServedModel is the fallback model whose deployment made the
	// request's last attempt (and served it, unless that failed too),
	// when Model's own deployments did not serve: its limits took the
	// request and its prices price it. "" when Model's own deployment
	// made the last attempt, or none was made.
	ServedModel      string
	Backend          string
	UpstreamModel    string
	Endpoint         string // chat, completions, embeddings, messages, responses
	Status           int
	ErrorType        string
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
	TTFT             time.Duration // time to first byte (non-stream) or first token event (stream)
	Latency          time.Duration
	// Overhead is the gateway's own time in the request, from its body
	// read until the answer's head was handed to the HTTP server (a
	// stream's head goes with its first event): the time to first byte it
	// added beyond waiting for backends, fair queues, engine starts and
	// retry pauses (Server-Timing's gateway entry). It is for the
	// observers (metrics, the access log): the ledger does not store it.
	Overhead  time.Duration `json:"-"`
	Estimated bool          // token counts estimated locally
	Stream    bool
	CostUSD   float64
}

// Writer persists batches of records. Implementations must make a batch
// atomic and must ignore records whose ID is already stored.
type Writer interface {
	InsertUsage(ctx context.Context, recs []Record) error
}
