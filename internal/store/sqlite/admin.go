package sqlite

import (
	"context"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/store/sqlstore"
	"llmgate/internal/usage"
)

var (
	_ keys.Updater         = (*Store)(nil)
	_ ledger.HealthChecker = (*Store)(nil)
)

// UpdateKey stores the mutable fields of a key and bumps the key version.
func (s *Store) UpdateKey(ctx context.Context, k *keys.Key) error {
	return sqlstore.UpdateKey(ctx, s.db(), sqlstore.SQLite, k)
}

// RotateKey replaces a key's secret hash and bumps the key version.
func (s *Store) RotateKey(ctx context.Context, id, hash, hint string) error {
	return sqlstore.RotateKey(ctx, s.db(), sqlstore.SQLite, id, hash, hint)
}

// DeleteUsageBefore deletes raw ledger records older than t.
func (s *Store) DeleteUsageBefore(ctx context.Context, t time.Time) (int64, error) {
	return sqlstore.DeleteUsageBefore(ctx, s.db(), sqlstore.SQLite, t)
}

// CountUsage returns the number of raw records and of distinct record IDs.
func (s *Store) CountUsage(ctx context.Context) (rows, distinct int64, err error) {
	return sqlstore.CountUsage(ctx, s.db())
}

// ByClientRequestID returns the ledger records carrying a client's
// X-Request-Id, newest first.
func (s *Store) ByClientRequestID(ctx context.Context, id string, limit int) ([]usage.Record, error) {
	return sqlstore.ByClientRequestID(ctx, s.db(), sqlstore.SQLite, id, limit)
}
