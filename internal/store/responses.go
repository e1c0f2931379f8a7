package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// StoredResponse is a Responses API response kept so a later request can
// continue from it (previous_response_id) or read it back
// (GET /v1/responses/{id}). Only the key that created it can use it.
type StoredResponse struct {
	ID    string
	KeyID string
	Model string
	// PreviousID is the response this one continued, or "".
	PreviousID string
	// Input is this turn's input items (a JSON array), Output its output
	// items (a JSON array): the conversation so far is the chain's inputs
	// and outputs in order.
	Input  json.RawMessage
	Output json.RawMessage
	// Body is the response object as the client received it.
	Body      json.RawMessage
	CreatedAt time.Time
	ExpiresAt time.Time
}

// ErrBrokenChain is returned by ResponseChain when a response further back
// in the chain is gone (expired or deleted).
var ErrBrokenChain = errors.New("a response earlier in the chain no longer exists")

// MaxResponseChain bounds how far back a chain is followed.
const MaxResponseChain = 10000

// Responses stores Responses API responses.
type Responses interface {
	// PutResponse stores a response and extends the expiry of the responses
	// it continues to its own, so a conversation in use does not lose its
	// beginning.
	PutResponse(ctx context.Context, r StoredResponse) error
	// GetResponse returns the response with this id created by keyID and
	// unexpired at now, or nil.
	GetResponse(ctx context.Context, id, keyID string, now time.Time) (*StoredResponse, error)
	// ResponseChain returns the response with this id (of keyID, unexpired
	// at now) and every response before it, oldest first; nil when the
	// response is not there, ErrBrokenChain when one before it is missing.
	ResponseChain(ctx context.Context, id, keyID string, now time.Time) ([]StoredResponse, error)
	// DeleteResponse deletes a response of keyID and reports whether it
	// existed.
	DeleteResponse(ctx context.Context, id, keyID string) (bool, error)
	// PurgeResponses deletes the responses expired at now.
	PurgeResponses(ctx context.Context, now time.Time) (int64, error)
}
