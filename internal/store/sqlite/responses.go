package sqlite

import (
	"context"
	"time"

	"llmgate/internal/store"
	"llmgate/internal/store/sqlstore"
)

// PutResponse stores a Responses API response.
func (s *Store) PutResponse(ctx context.Context, r store.StoredResponse) error {
	return sqlstore.PutResponse(ctx, s.db(), sqlstore.SQLite, r)
}

// GetResponse returns an unexpired response of keyID, or nil.
func (s *Store) GetResponse(ctx context.Context, id, keyID string, now time.Time) (*store.StoredResponse, error) {
	return sqlstore.GetResponse(ctx, s.db(), sqlstore.SQLite, id, keyID, now)
}

// ResponseChain returns a response and those before it, oldest first.
func (s *Store) ResponseChain(ctx context.Context, id, keyID string, now time.Time) ([]store.StoredResponse, error) {
	return sqlstore.ResponseChain(ctx, s.db(), sqlstore.SQLite, id, keyID, now)
}

// DeleteResponse deletes a response of keyID.
func (s *Store) DeleteResponse(ctx context.Context, id, keyID string) (bool, error) {
	return sqlstore.DeleteResponse(ctx, s.db(), sqlstore.SQLite, id, keyID)
}

// PurgeResponses deletes the responses expired at now.
func (s *Store) PurgeResponses(ctx context.Context, now time.Time) (int64, error) {
	return sqlstore.PurgeResponses(ctx, s.db(), sqlstore.SQLite, now)
}
