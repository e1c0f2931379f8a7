package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"llmgate/internal/store"
)

// The chain of a response, newest first: the response itself, then each
// previous_id in turn (bounded by store.MaxResponseChain).
const responseChainCTE = `WITH RECURSIVE chain(id, previous_id, depth) AS (
		SELECT id, previous_id, 0 FROM responses WHERE id = ?
		UNION ALL
		SELECT r.id, r.previous_id, c.depth + 1 FROM responses r JOIN chain c ON r.id = c.previous_id
		WHERE c.depth < ?)`

// PutResponse stores a response and extends its ancestors' expiry.
func PutResponse(ctx context.Context, db *sql.DB, d Dialect, r store.StoredResponse) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, d.Q(`INSERT INTO responses(id, key_id, model, previous_id, input, output, body, created_at, expires_at)
		VALUES (?,?,?,?,?,?,?,?,?)`), r.ID, r.KeyID, r.Model, r.PreviousID, string(r.Input), string(r.Output), string(r.Body),
		r.CreatedAt.UnixMilli(), r.ExpiresAt.UnixMilli()); err != nil {
		return err
	}
	if r.PreviousID != "" {
		if _, err := tx.ExecContext(ctx, d.Q(responseChainCTE+`
			UPDATE responses SET expires_at = ? WHERE expires_at < ? AND id IN (SELECT id FROM chain)`),
			r.PreviousID, store.MaxResponseChain, r.ExpiresAt.UnixMilli(), r.ExpiresAt.UnixMilli()); err != nil {
			return fmt.Errorf("extend the expiry of earlier responses: %w", err)
		}
	}
	return tx.Commit()
}

const responseCols = `id, key_id, model, previous_id, input, output, body, created_at, expires_at`

// scanResponse scans responseCols, then extra.
func scanResponse(sc interface{ Scan(...any) error }, extra ...any) (store.StoredResponse, error) {
	var (
		r                store.StoredResponse
		in, out, body    string
		created, expires int64
	)
	err := sc.Scan(append([]any{&r.ID, &r.KeyID, &r.Model, &r.PreviousID, &in, &out, &body, &created, &expires}, extra...)...)
	r.Input, r.Output, r.Body = json.RawMessage(in), json.RawMessage(out), json.RawMessage(body)
	r.CreatedAt, r.ExpiresAt = time.UnixMilli(created), time.UnixMilli(expires)
	return r, err
}

// GetResponse returns an unexpired response of keyID, or nil.
func GetResponse(ctx context.Context, db *sql.DB, d Dialect, id, keyID string, now time.Time) (*store.StoredResponse, error) {
	r, err := scanResponse(db.QueryRowContext(ctx, d.Q(`SELECT `+responseCols+` FROM responses
		WHERE id = ? AND key_id = ? AND expires_at > ?`), id, keyID, now.UnixMilli()))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// ResponseChain returns a response of keyID and those before it, oldest
// first, in one query.
func ResponseChain(ctx context.Context, db *sql.DB, d Dialect, id, keyID string, now time.Time) ([]store.StoredResponse, error) {
	rows, err := db.QueryContext(ctx, d.Q(responseChainCTE+`
		SELECT `+prefixCols("r.", responseCols)+`, c.depth FROM chain c JOIN responses r ON r.id = c.id
		WHERE r.key_id = ? AND r.expires_at > ? ORDER BY c.depth DESC`), id, store.MaxResponseChain, keyID, now.UnixMilli())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var chain []store.StoredResponse
	var depths []int
	for rows.Next() {
		var depth int
		r, err := scanResponse(rows, &depth)
		if err != nil {
			return nil, err
		}
		chain = append(chain, r)
		depths = append(depths, depth)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	n := len(chain)
	if n == 0 || depths[n-1] != 0 {
		return nil, nil // the response itself is not there (or not this key's)
	}
	// Depths must run n-1 .. 0 without a gap and the oldest must start the
	// conversation; otherwise a response in between is gone.
	if depths[0] != n-1 || chain[0].PreviousID != "" {
		return nil, store.ErrBrokenChain
	}
	return chain, nil
}

// DeleteResponse deletes a response of keyID.
func DeleteResponse(ctx context.Context, db *sql.DB, d Dialect, id, keyID string) (bool, error) {
	n, err := exec(ctx, db, d, `DELETE FROM responses WHERE id = ? AND key_id = ?`, id, keyID)
	return n > 0, err
}

// PurgeResponses deletes the responses expired at now.
func PurgeResponses(ctx context.Context, db *sql.DB, d Dialect, now time.Time) (int64, error) {
	return exec(ctx, db, d, `DELETE FROM responses WHERE expires_at <= ?`, now.UnixMilli())
}

func prefixCols(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
