package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"llmgate/internal/store"
)

// CreateSession stores a console session.
func CreateSession(ctx context.Context, db *sql.DB, d Dialect, s store.Session) error {
	_, err := db.ExecContext(ctx, d.Q(`INSERT INTO console_sessions(id_hash, csrf, master, key_id, key_hash, created_at, expires_at)
		VALUES (?,?,?,?,?,?,?)`), s.IDHash, s.CSRF, boolInt(s.Master), s.KeyID, s.KeyHash, s.CreatedAt.UnixMilli(), s.ExpiresAt.UnixMilli())
	return err
}

// GetSession returns the unexpired session with this cookie hash, or nil.
func GetSession(ctx context.Context, db *sql.DB, d Dialect, idHash string, now time.Time) (*store.Session, error) {
	var (
		s                store.Session
		master           int
		created, expires int64
	)
	err := db.QueryRowContext(ctx, d.Q(`SELECT id_hash, csrf, master, key_id, key_hash, created_at, expires_at
		FROM console_sessions WHERE id_hash = ? AND expires_at > ?`), idHash, now.UnixMilli()).
		Scan(&s.IDHash, &s.CSRF, &master, &s.KeyID, &s.KeyHash, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.Master = master != 0
	s.CreatedAt, s.ExpiresAt = time.UnixMilli(created), time.UnixMilli(expires)
	return &s, nil
}

// DeleteSession ends one console session.
func DeleteSession(ctx context.Context, db *sql.DB, d Dialect, idHash string) error {
	_, err := db.ExecContext(ctx, d.Q(`DELETE FROM console_sessions WHERE id_hash = ?`), idHash)
	return err
}

// DeleteKeySessions ends every console session of a key.
func DeleteKeySessions(ctx context.Context, db *sql.DB, d Dialect, keyID string) (int64, error) {
	return exec(ctx, db, d, `DELETE FROM console_sessions WHERE key_id = ? AND master = 0`, keyID)
}

// PurgeSessions deletes the console sessions expired at now.
func PurgeSessions(ctx context.Context, db *sql.DB, d Dialect, now time.Time) (int64, error) {
	return exec(ctx, db, d, `DELETE FROM console_sessions WHERE expires_at <= ?`, now.UnixMilli())
}

// TrimSessions keeps the newest keep sessions of a key (or of the master
// key) and deletes the rest.
func TrimSessions(ctx context.Context, db *sql.DB, d Dialect, keyID string, master bool, keep int) (int64, error) {
	if keep < 0 {
		keep = 0
	}
	return exec(ctx, db, d, `DELETE FROM console_sessions WHERE key_id = ? AND master = ? AND id_hash NOT IN (
		SELECT id_hash FROM console_sessions WHERE key_id = ? AND master = ? ORDER BY created_at DESC, id_hash DESC LIMIT ?)`,
		keyID, boolInt(master), keyID, boolInt(master), keep)
}

func exec(ctx context.Context, db *sql.DB, d Dialect, q string, args ...any) (int64, error) {
	res, err := db.ExecContext(ctx, d.Q(q), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
