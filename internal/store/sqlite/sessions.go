package sqlite

import (
	"context"
	"time"

	"llmgate/internal/store"
	"llmgate/internal/store/sqlstore"
)

// CreateSession stores a console session.
func (s *Store) CreateSession(ctx context.Context, sess store.Session) error {
	return sqlstore.CreateSession(ctx, s.db(), sqlstore.SQLite, sess)
}

// GetSession returns the unexpired console session with this cookie hash, or nil.
func (s *Store) GetSession(ctx context.Context, idHash string, now time.Time) (*store.Session, error) {
	return sqlstore.GetSession(ctx, s.db(), sqlstore.SQLite, idHash, now)
}

// DeleteSession ends one console session.
func (s *Store) DeleteSession(ctx context.Context, idHash string) error {
	return sqlstore.DeleteSession(ctx, s.db(), sqlstore.SQLite, idHash)
}

// DeleteKeySessions ends every console session of a key.
func (s *Store) DeleteKeySessions(ctx context.Context, keyID string) (int64, error) {
	return sqlstore.DeleteKeySessions(ctx, s.db(), sqlstore.SQLite, keyID)
}

// PurgeSessions deletes the console sessions expired at now.
func (s *Store) PurgeSessions(ctx context.Context, now time.Time) (int64, error) {
	return sqlstore.PurgeSessions(ctx, s.db(), sqlstore.SQLite, now)
}

// TrimSessions keeps the newest keep sessions of a key (or of the master key).
func (s *Store) TrimSessions(ctx context.Context, keyID string, master bool, keep int) (int64, error) {
	return sqlstore.TrimSessions(ctx, s.db(), sqlstore.SQLite, keyID, master, keep)
}
