// Package sqlstore holds the SQL that the SQLite and PostgreSQL stores share:
// keys, the usage ledger with its hourly rollups, summaries and retention.
// The two schemas are kept identical (timestamps as Unix milliseconds, JSON
// in text columns) so one statement serves both; a Dialect covers the rest.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"llmgate/internal/keys"
)

// Dialect describes the differences between the supported databases.
type Dialect struct {
	// Dollar is true for $1-style placeholders (PostgreSQL); false for ?.
	Dollar bool
	// Day returns an expression for the UTC date (YYYY-MM-DD) of a column
	// holding Unix seconds.
	Day func(secondsExpr string) string
	// MaxParams is the largest number of bind parameters per statement.
	MaxParams int
}

// SQLite is the dialect of modernc.org/sqlite.
var SQLite = Dialect{
	Day:       func(e string) string { return "strftime('%Y-%m-%d', " + e + ", 'unixepoch')" },
	MaxParams: 32000,
}

// Postgres is the dialect of PostgreSQL through pgx's database/sql driver.
var Postgres = Dialect{
	Dollar:    true,
	Day:       func(e string) string { return "to_char(to_timestamp(" + e + ") AT TIME ZONE 'UTC', 'YYYY-MM-DD')" },
	MaxParams: 60000,
}

// Q rewrites ? placeholders for the dialect.
func (d Dialect) Q(q string) string {
	if !d.Dollar {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// KeyCols lists the api_keys columns in scan order.
const KeyCols = `id, name, owner, hash, hint, models, rpm, tpm, max_conc, budget_usd, budget_period, metadata, created_at, expires_at, revoked_at, objective, priority`

// BumpKeys moves the key version so verifiers on every replica reload.
func BumpKeys(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `UPDATE versions SET v = v + 1 WHERE name = 'keys'`)
	return err
}

// CreateKey inserts a key and bumps the version.
func CreateKey(ctx context.Context, db *sql.DB, d Dialect, k *keys.Key) error {
	models, _ := json.Marshal(nonNil(k.Models))
	meta, _ := json.Marshal(k.Metadata)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, d.Q(`INSERT INTO api_keys(`+KeyCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`),
		k.ID, k.Name, k.Owner, k.Hash, k.Hint, string(models), k.RPM, k.TPM, k.MaxConc, k.BudgetUSD, k.BudgetPeriod,
		string(meta), k.CreatedAt.UnixMilli(), msPtr(k.ExpiresAt), msPtr(k.RevokedAt), k.Objective, k.Priority)
	if err != nil {
		return fmt.Errorf("insert key: %w", err)
	}
	if err := BumpKeys(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ListKeys returns every key, newest first.
func ListKeys(ctx context.Context, db *sql.DB) ([]*keys.Key, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+KeyCols+` FROM api_keys ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*keys.Key
	for rows.Next() {
		k, err := ScanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// GetKey returns one key or keys.ErrNotFound.
func GetKey(ctx context.Context, db *sql.DB, d Dialect, id string) (*keys.Key, error) {
	k, err := ScanKey(db.QueryRowContext(ctx, d.Q(`SELECT `+KeyCols+` FROM api_keys WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keys.ErrNotFound
	}
	return k, err
}

// RevokeKey marks a key revoked (keeping the first revocation time).
func RevokeKey(ctx context.Context, db *sql.DB, d Dialect, id string, at time.Time) error {
	return updateOne(ctx, db, d, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, at.UnixMilli(), id)
}

// UpdateKey stores the mutable fields of k (name, owner, models, limits,
// budget, metadata, expiry).
func UpdateKey(ctx context.Context, db *sql.DB, d Dialect, k *keys.Key) error {
	models, _ := json.Marshal(nonNil(k.Models))
	meta, _ := json.Marshal(k.Metadata)
	return updateOne(ctx, db, d, `UPDATE api_keys SET name = ?, owner = ?, models = ?, rpm = ?, tpm = ?, max_conc = ?,
		budget_usd = ?, budget_period = ?, metadata = ?, expires_at = ?, objective = ?, priority = ? WHERE id = ?`,
		k.Name, k.Owner, string(models), k.RPM, k.TPM, k.MaxConc, k.BudgetUSD, k.BudgetPeriod, string(meta), msPtr(k.ExpiresAt), k.Objective, k.Priority, k.ID)
}

// RotateKey replaces a key's secret hash and hint.
func RotateKey(ctx context.Context, db *sql.DB, d Dialect, id, hash, hint string) error {
	return updateOne(ctx, db, d, `UPDATE api_keys SET hash = ?, hint = ? WHERE id = ? AND revoked_at IS NULL`, hash, hint, id)
}

func updateOne(ctx context.Context, db *sql.DB, d Dialect, q string, args ...any) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, d.Q(q), args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return keys.ErrNotFound
	}
	if err := BumpKeys(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// KeysVersion returns the key change counter.
func KeysVersion(ctx context.Context, db *sql.DB) (int64, error) {
	var v int64
	err := db.QueryRowContext(ctx, `SELECT v FROM versions WHERE name = 'keys'`).Scan(&v)
	return v, err
}

// GetSetting returns a setting or "".
func GetSetting(ctx context.Context, db *sql.DB, d Dialect, name string) (string, error) {
	var v string
	err := db.QueryRowContext(ctx, d.Q(`SELECT value FROM settings WHERE name = ?`), name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

// SetSetting stores a setting.
func SetSetting(ctx context.Context, db *sql.DB, d Dialect, name, value string) error {
	_, err := db.ExecContext(ctx, d.Q(`INSERT INTO settings(name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value`), name, value)
	return err
}

type scanner interface{ Scan(...any) error }

// ScanKey reads one api_keys row in KeyCols order.
func ScanKey(r scanner) (*keys.Key, error) {
	var (
		k                keys.Key
		models, meta     string
		created          int64
		expires, revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.Name, &k.Owner, &k.Hash, &k.Hint, &models, &k.RPM, &k.TPM, &k.MaxConc, &k.BudgetUSD,
		&k.BudgetPeriod, &meta, &created, &expires, &revoked, &k.Objective, &k.Priority); err != nil {
		return nil, err
	}
	_ = json.Unmarshal([]byte(models), &k.Models)
	_ = json.Unmarshal([]byte(meta), &k.Metadata)
	k.CreatedAt = time.UnixMilli(created)
	k.ExpiresAt = timePtr(expires)
	k.RevokedAt = timePtr(revoked)
	return &k, nil
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
