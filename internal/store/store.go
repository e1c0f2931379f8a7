// Package store defines what llmgate persists (keys, settings, the usage
// ledger, console sessions, stored Responses API responses) and opens the right implementation for a database setting.
package store

import (
	"llmgate/internal/keys"
	"llmgate/internal/usage"
)

// Store is the full persistence surface. Packages that need only part of it
// declare their own smaller interfaces (keys.Store, usage.Writer).
type Store interface {
	keys.Store
	usage.Writer
	usage.Querier
	Sessions
	Responses
	Close() error
}
