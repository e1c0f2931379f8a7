// Package sqlite implements the store on an embedded SQLite database
// (modernc.org/sqlite, pure Go, WAL mode).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/store"
	"llmgate/internal/store/sqlstore"
	"llmgate/internal/usage"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a SQLite-backed store.
type Store struct {
	db *sql.DB
	us *sqlstore.UsageStmts // the ledger writer's statements, prepared once
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path and applies
// migrations.
func Open(ctx context.Context, path string) (*Store, error) {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate sqlite %s: %w", path, err)
	}
	if s.us, err = sqlstore.PrepareUsage(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.us.Close()
	return s.db.Close()
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return err
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("%s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`, name, time.Now().Unix()); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// GetSetting returns a setting's value, or "" when unset.
func (s *Store) GetSetting(ctx context.Context, name string) (string, error) {
	return sqlstore.GetSetting(ctx, s.db, sqlstore.SQLite, name)
}

// SetSetting stores a setting.
func (s *Store) SetSetting(ctx context.Context, name, value string) error {
	return sqlstore.SetSetting(ctx, s.db, sqlstore.SQLite, name, value)
}

// CreateKey stores a new key.
func (s *Store) CreateKey(ctx context.Context, k *keys.Key) error {
	return sqlstore.CreateKey(ctx, s.db, sqlstore.SQLite, k)
}

// ListKeys returns every key, newest first.
func (s *Store) ListKeys(ctx context.Context) ([]*keys.Key, error) {
	return sqlstore.ListKeys(ctx, s.db)
}

// GetKey returns one key by ID.
func (s *Store) GetKey(ctx context.Context, id string) (*keys.Key, error) {
	return sqlstore.GetKey(ctx, s.db, sqlstore.SQLite, id)
}

// RevokeKey marks a key revoked.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	return sqlstore.RevokeKey(ctx, s.db, sqlstore.SQLite, id, at)
}

// KeysVersion returns the key change counter.
func (s *Store) KeysVersion(ctx context.Context) (int64, error) {
	return sqlstore.KeysVersion(ctx, s.db)
}

// InsertUsage writes a batch atomically; records whose ID is already
// stored are skipped, so a retried batch never duplicates. Hourly rollups
// are updated in the same transaction from the new records only.
func (s *Store) InsertUsage(ctx context.Context, recs []usage.Record) error {
	return sqlstore.InsertUsage(ctx, s.db, sqlstore.SQLite, s.us, recs)
}

// Summary aggregates usage per group from hourly rollups plus the raw
// records of partial hours at the range's edges (see usage.SummaryBuilder).
func (s *Store) Summary(ctx context.Context, f usage.Filter) ([]usage.SummaryRow, error) {
	return sqlstore.Summary(ctx, s.db, sqlstore.SQLite, f)
}

// Recent returns the newest records, newest first.
func (s *Store) Recent(ctx context.Context, limit int) ([]usage.Record, error) {
	return sqlstore.Recent(ctx, s.db, sqlstore.SQLite, limit)
}
