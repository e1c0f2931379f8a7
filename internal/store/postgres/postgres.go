// Package postgres implements the store on PostgreSQL through pgx (its
// database/sql driver), for several gateway replicas sharing one database.
// The schema matches the SQLite store's, so the SQL lives in sqlstore.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/redact"
	"llmgate/internal/store"
	"llmgate/internal/store/sqlstore"
	"llmgate/internal/usage"
)

//go:embed migrations/*.sql
var migrations embed.FS

var d = sqlstore.Postgres

// Store is a PostgreSQL-backed store.
type Store struct {
	db *sql.DB
}

var (
	_ store.Store          = (*Store)(nil)
	_ keys.Updater         = (*Store)(nil)
	_ usage.Retainer       = (*Store)(nil)
	_ ledger.HealthChecker = (*Store)(nil)
)

// Open connects to the database at url (postgres://...) and applies
// migrations. Runtime parameters in the URL, such as search_path, apply to
// every connection.
func Open(ctx context.Context, url string) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to postgres %s: %w (is the server running and the database created?)", redact.Secrets(url), err)
	}
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate postgres: %w", err)
	}
	return s, nil
}

// DB exposes the connection pool for tests and tools.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the pool.
func (s *Store) Close() error { return s.db.Close() }

// migrate applies embedded migrations under an advisory lock, so replicas
// starting together do not race.
func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	const lockID = 0x6c6c6d67617465 // "llmgate"
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, lockID); err != nil {
		return err
	}
	defer conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, lockID)
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return err
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("%s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES ($1, $2)`, name, time.Now().Unix()); err != nil {
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
	return sqlstore.GetSetting(ctx, s.db, d, name)
}

// SetSetting stores a setting.
func (s *Store) SetSetting(ctx context.Context, name, value string) error {
	return sqlstore.SetSetting(ctx, s.db, d, name, value)
}

// CreateKey stores a new key.
func (s *Store) CreateKey(ctx context.Context, k *keys.Key) error {
	return sqlstore.CreateKey(ctx, s.db, d, k)
}

// ListKeys returns every key, newest first.
func (s *Store) ListKeys(ctx context.Context) ([]*keys.Key, error) {
	return sqlstore.ListKeys(ctx, s.db)
}

// GetKey returns one key by ID.
func (s *Store) GetKey(ctx context.Context, id string) (*keys.Key, error) {
	return sqlstore.GetKey(ctx, s.db, d, id)
}

// RevokeKey marks a key revoked.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	return sqlstore.RevokeKey(ctx, s.db, d, id, at)
}

// UpdateKey stores the mutable fields of a key.
func (s *Store) UpdateKey(ctx context.Context, k *keys.Key) error {
	return sqlstore.UpdateKey(ctx, s.db, d, k)
}

// RotateKey replaces a key's secret hash.
func (s *Store) RotateKey(ctx context.Context, id, hash, hint string) error {
	return sqlstore.RotateKey(ctx, s.db, d, id, hash, hint)
}

// KeysVersion returns the key change counter; every key change bumps it in
// the same transaction, and every replica's verifier polls it.
func (s *Store) KeysVersion(ctx context.Context) (int64, error) {
	return sqlstore.KeysVersion(ctx, s.db)
}

// InsertUsage writes a batch atomically, skipping IDs already stored
// (INSERT ... ON CONFLICT (id) DO NOTHING), and updates hourly rollups.
func (s *Store) InsertUsage(ctx context.Context, recs []usage.Record) error {
	return sqlstore.InsertUsage(ctx, s.db, d, nil, recs)
}

// Summary aggregates usage per group.
func (s *Store) Summary(ctx context.Context, f usage.Filter) ([]usage.SummaryRow, error) {
	return sqlstore.Summary(ctx, s.db, d, f)
}

// UseSince implements usage.RateReader.
func (s *Store) UseSince(ctx context.Context, since time.Time) ([]usage.SecondUse, error) {
	return sqlstore.UseSince(ctx, s.db, d, since)
}

// Recent returns the newest records, newest first.
func (s *Store) Recent(ctx context.Context, limit int) ([]usage.Record, error) {
	return sqlstore.Recent(ctx, s.db, d, limit)
}

// DeleteUsageBefore deletes raw ledger records older than t.
func (s *Store) DeleteUsageBefore(ctx context.Context, t time.Time) (int64, error) {
	return sqlstore.DeleteUsageBefore(ctx, s.db, d, t)
}

// CountUsage returns the number of raw records and of distinct record IDs.
func (s *Store) CountUsage(ctx context.Context) (rows, distinct int64, err error) {
	return sqlstore.CountUsage(ctx, s.db)
}

// ByClientRequestID returns the ledger records carrying a client's
// X-Request-Id, newest first.
func (s *Store) ByClientRequestID(ctx context.Context, id string, limit int) ([]usage.Record, error) {
	return sqlstore.ByClientRequestID(ctx, s.db, d, id, limit)
}

// CheckHealth reports whether the server answers.
func (s *Store) CheckHealth(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("postgres unreachable: %w", err)
	}
	return nil
}
