// Package sqlite implements the store on an embedded SQLite database
// (modernc.org/sqlite, pure Go, WAL mode).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
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
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

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
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

// SetSetting stores a setting.
func (s *Store) SetSetting(ctx context.Context, name, value string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO settings(name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value`, name, value)
	return err
}

const keyCols = `id, name, owner, hash, hint, models, rpm, tpm, max_conc, budget_usd, budget_period, metadata, created_at, expires_at, revoked_at`

// CreateKey stores a new key.
func (s *Store) CreateKey(ctx context.Context, k *keys.Key) error {
	models, _ := json.Marshal(nonNil(k.Models))
	meta, _ := json.Marshal(k.Metadata)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `INSERT INTO api_keys(`+keyCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		k.ID, k.Name, k.Owner, k.Hash, k.Hint, string(models), k.RPM, k.TPM, k.MaxConc, k.BudgetUSD, k.BudgetPeriod,
		string(meta), k.CreatedAt.UnixMilli(), msPtr(k.ExpiresAt), msPtr(k.RevokedAt))
	if err != nil {
		return fmt.Errorf("insert key: %w", err)
	}
	if err := bumpKeys(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ListKeys returns every key, newest first.
func (s *Store) ListKeys(ctx context.Context) ([]*keys.Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyCols+` FROM api_keys ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*keys.Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// GetKey returns one key by ID.
func (s *Store) GetKey(ctx context.Context, id string) (*keys.Key, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keys.ErrNotFound
	}
	return k, err
}

// RevokeKey marks a key revoked.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, at.UnixMilli(), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return keys.ErrNotFound
	}
	if err := bumpKeys(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// KeysVersion returns the key change counter.
func (s *Store) KeysVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, `SELECT v FROM versions WHERE name = 'keys'`).Scan(&v)
	return v, err
}

func bumpKeys(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `UPDATE versions SET v = v + 1 WHERE name = 'keys'`)
	return err
}

type scanner interface{ Scan(...any) error }

func scanKey(r scanner) (*keys.Key, error) {
	var (
		k                keys.Key
		models, meta     string
		created          int64
		expires, revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.Name, &k.Owner, &k.Hash, &k.Hint, &models, &k.RPM, &k.TPM, &k.MaxConc, &k.BudgetUSD,
		&k.BudgetPeriod, &meta, &created, &expires, &revoked); err != nil {
		return nil, err
	}
	_ = json.Unmarshal([]byte(models), &k.Models)
	_ = json.Unmarshal([]byte(meta), &k.Metadata)
	k.CreatedAt = time.UnixMilli(created)
	k.ExpiresAt = timePtr(expires)
	k.RevokedAt = timePtr(revoked)
	return &k, nil
}

// InsertUsage writes a batch atomically; records whose ID is already
// stored are skipped, so a retried batch never duplicates. Hourly rollups
// are updated in the same transaction from the new records only.
func (s *Store) InsertUsage(ctx context.Context, recs []usage.Record) error {
	return sqlstore.InsertUsage(ctx, s.db, sqlstore.SQLite, recs)
}

// Summary aggregates usage per group from hourly rollups plus the raw
// records of partial hours at the range's edges (see usage.SummaryBuilder).
func (s *Store) Summary(ctx context.Context, f usage.Filter) ([]usage.SummaryRow, error) {
	return sqlstore.Summary(ctx, s.db, sqlstore.SQLite, f)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func msPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMilli(v.Int64)
	return &t
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Recent returns the newest records, newest first.
func (s *Store) Recent(ctx context.Context, limit int) ([]usage.Record, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, ts, key_id, model, backend, upstream_model, endpoint, status, error_type,
		prompt_tokens, completion_tokens, cached_tokens, ttft_us, latency_us, estimated, stream, cost_usd
		FROM usage ORDER BY ts DESC, rowid DESC LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []usage.Record
	for rows.Next() {
		var r usage.Record
		var ts, ttft, lat int64
		var est, stream int
		if err := rows.Scan(&r.ID, &ts, &r.KeyID, &r.Model, &r.Backend, &r.UpstreamModel, &r.Endpoint, &r.Status, &r.ErrorType,
			&r.PromptTokens, &r.CompletionTokens, &r.CachedTokens, &ttft, &lat, &est, &stream, &r.CostUSD); err != nil {
			return nil, err
		}
		r.Time = time.UnixMilli(ts)
		r.TTFT = time.Duration(ttft) * time.Microsecond
		r.Latency = time.Duration(lat) * time.Microsecond
		r.Estimated, r.Stream = est != 0, stream != 0
		out = append(out, r)
	}
	return out, rows.Err()
}
