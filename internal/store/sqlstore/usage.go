package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"llmgate/internal/ledger"
	"llmgate/internal/rollup"
	"llmgate/internal/usage"
)

const usageCols = `id, client_request_id, ts, key_id, model, served_model, backend, upstream_model, endpoint, status, error_type,
	prompt_tokens, completion_tokens, cached_tokens, ttft_us, latency_us, estimated, stream, cost_usd`

const usageNCols = 19

const usageRowParams = `(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`

// sqliteRowParams is usageRowParams for the SQLite statements, whose
// arguments (usageArgs with emptyNull) are NULL for the three columns that
// are empty in most rows: the driver copies every string argument into C
// memory and clears it after the statement, a NULL costs neither.
const sqliteRowParams = `(?,coalesce(?,''),?,?,?,coalesce(?,''),?,?,?,?,coalesce(?,''),?,?,?,?,?,?,?,?)`

// ON CONFLICT (id): only the server-made id decides that a record is
// already stored (a replay of the spool); client_request_id never does.
const insertUsageRow = `INSERT INTO usage(` + usageCols + `) VALUES ` + sqliteRowParams + ` ON CONFLICT (id) DO NOTHING`

const rollupCols = `hour, key_id, model, backend, requests, errors, prompt_tokens, completion_tokens, cached_tokens, estimated, cost_usd`

const rollupConflict = ` ON CONFLICT (hour, key_id, model, backend) DO UPDATE SET
			requests = usage_hourly.requests + excluded.requests, errors = usage_hourly.errors + excluded.errors,
			prompt_tokens = usage_hourly.prompt_tokens + excluded.prompt_tokens,
			completion_tokens = usage_hourly.completion_tokens + excluded.completion_tokens,
			cached_tokens = usage_hourly.cached_tokens + excluded.cached_tokens,
			estimated = usage_hourly.estimated + excluded.estimated, cost_usd = usage_hourly.cost_usd + excluded.cost_usd`

const setRollupHist = `UPDATE usage_hourly SET latency = ? WHERE hour = ? AND key_id = ? AND model = ? AND backend = ?`

// UsageStmts holds the ledger writer's statements, prepared once per
// connection (database/sql keeps one per connection and Tx.StmtContext reuses
// it). On an embedded database there is no round trip to save, and parsing
// the statements of every batch again cost about as much as running them.
type UsageStmts struct {
	insert, insertMulti, upsert, setHist *sql.Stmt
}

// multiRows is how many records one statement of the fast path inserts:
// each statement execution costs ~1.5 µs on the embedded driver (its
// step, reset and argument handling) besides the rows' own work, so 32
// rows to a statement save most of it (8.8 → 7.3 µs per row measured).
const multiRows = 32

// PrepareUsage prepares the ledger writer's row-at-a-time statements
// (SQLite dialect).
func PrepareUsage(ctx context.Context, db *sql.DB) (*UsageStmts, error) {
	u := &UsageStmts{}
	var err error
	if u.insert, err = db.PrepareContext(ctx, insertUsageRow); err != nil {
		return nil, fmt.Errorf("prepare usage insert: %w", err)
	}
	// OR IGNORE: a statement that cannot abort needs no statement journal.
	// With the default ABORT (for NOT NULL, say) SQLite saves every page
	// the statement changes that the transaction changed before, to a temp
	// file once past 64 KiB: ~15 % of a row's CPU (BenchmarkInsertUsage).
	// A row it skips makes the count short, which rolls the batch back to
	// the row-by-row path (and its errors), as a stored id does.
	multi := `INSERT OR IGNORE INTO usage(` + usageCols + `) VALUES ` + sqliteRowParams + strings.Repeat(","+sqliteRowParams, multiRows-1) + ` ON CONFLICT (id) DO NOTHING`
	if u.insertMulti, err = db.PrepareContext(ctx, multi); err != nil {
		u.Close()
		return nil, fmt.Errorf("prepare usage insert: %w", err)
	}
	if u.upsert, err = db.PrepareContext(ctx, `INSERT INTO usage_hourly(`+rollupCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?)`+rollupConflict+` RETURNING latency`); err != nil {
		u.Close()
		return nil, fmt.Errorf("prepare usage rollup upsert: %w", err)
	}
	if u.setHist, err = db.PrepareContext(ctx, setRollupHist); err != nil {
		u.Close()
		return nil, fmt.Errorf("prepare usage rollup histogram update: %w", err)
	}
	return u, nil
}

// Close releases the statements.
func (u *UsageStmts) Close() {
	for _, st := range []*sql.Stmt{u.insert, u.insertMulti, u.upsert, u.setHist} {
		if st != nil {
			st.Close()
		}
	}
}

// usageArgs appends r's values in the order of usageCols.
// Integers go as int64, a driver value as it is: database/sql converts an
// int by reflection, and boxes it a second time.
// With emptyNull (the SQLite statements, see sqliteRowParams) an empty
// client request id, served model or error type goes as NULL.
func usageArgs(args []any, r *usage.Record, emptyNull bool) []any {
	crid, served, errType := any(r.ClientRequestID), any(r.ServedModel), any(r.ErrorType)
	if emptyNull {
		crid, served, errType = orNull(r.ClientRequestID), orNull(r.ServedModel), orNull(r.ErrorType)
	}
	return append(args, r.ID, crid, r.Time.UnixMilli(), r.KeyID, r.Model, served, r.Backend, r.UpstreamModel, r.Endpoint,
		int64(r.Status), errType, int64(r.PromptTokens), int64(r.CompletionTokens), int64(r.CachedTokens), r.TTFT.Microseconds(),
		r.Latency.Microseconds(), b2i(r.Estimated), b2i(r.Stream), r.CostUSD)
}

// insertPrepared inserts row by row with one prepared statement: on an
// embedded database there is no round trip to save, and parsing a giant
// multi-row statement costs more than executing a prepared one.
func insertPrepared(ctx context.Context, tx *sql.Tx, u *UsageStmts, recs []usage.Record, inserted map[string]bool) error {
	stmt := tx.StmtContext(ctx, u.insert)
	defer stmt.Close()
	args := make([]any, 0, usageNCols)
	for i := range recs {
		r := &recs[i]
		args = usageArgs(args[:0], r, true)
		res, err := stmt.ExecContext(ctx, args...)
		if err != nil {
			return fmt.Errorf("insert usage: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			inserted[r.ID] = true
		}
		if i < len(recs)-1 {
			ledger.Pace(ctx, i)
		}
	}
	return nil
}

// errSeen ends the fast path: a statement inserted fewer rows than it was
// given, so some record was stored already (a replay) and only the
// row-by-row path can tell which.
var errSeen = errors.New("usage batch holds records already stored")

// insertFast inserts a batch of records none of which is stored yet (the
// ledger's live batches; a replayed one may not be) multiRows to a
// prepared statement, the rest row by row. It fails with errSeen, its
// transaction to be rolled back, when a statement of many rows inserted
// fewer (a record stored already, or one twice in the batch).
func insertFast(ctx context.Context, tx *sql.Tx, u *UsageStmts, recs []usage.Record, inserted map[string]bool) error {
	stmt := tx.StmtContext(ctx, u.insertMulti)
	defer stmt.Close()
	args := make([]any, 0, multiRows*usageNCols)
	i := 0
	for ; i+multiRows <= len(recs); i += multiRows {
		args = args[:0]
		for j := i; j < i+multiRows; j++ {
			args = usageArgs(args, &recs[j], true)
		}
		res, err := stmt.ExecContext(ctx, args...)
		if err != nil {
			return fmt.Errorf("insert usage: %w", err)
		}
		if n, _ := res.RowsAffected(); n != multiRows {
			return errSeen
		}
		for j := i; j < i+multiRows; j++ {
			inserted[recs[j].ID] = true
		}
		if i+multiRows < len(recs) {
			ledger.PaceRange(ctx, i, i+multiRows)
		}
	}
	// The remainder row by row, which tells a stored record from a new one.
	return insertPrepared(ctx, tx, u, recs[i:], inserted)
}

// upsertPrepared is upsertRollups one row at a time with the prepared
// statements (SQLite: one writer at a time, so the read-merge-write of a
// histogram cannot race).
func upsertPrepared(ctx context.Context, tx *sql.Tx, u *UsageStmts, rus []rollup.Row) error {
	upsert := tx.StmtContext(ctx, u.upsert)
	defer upsert.Close()
	setHist := tx.StmtContext(ctx, u.setHist)
	defer setHist.Close()
	for i := range rus {
		r := &rus[i]
		var h []byte
		if err := upsert.QueryRowContext(ctx, r.Hour, r.KeyID, r.Model, r.Backend, r.Requests, r.Errors, r.PromptTokens,
			r.CompletionTokens, r.CachedTokens, r.Estimated, r.CostUSD).Scan(&h); err != nil {
			return err
		}
		if _, err := setHist.ExecContext(ctx, rollup.AppendHist(h, r.Latency), r.Hour, r.KeyID, r.Model, r.Backend); err != nil {
			return err
		}
	}
	return nil
}

// insertMultiRow inserts in multi-row statements, learning which rows were
// new from RETURNING: one round trip per few hundred rows on a server.
func insertMultiRow(ctx context.Context, tx *sql.Tx, d Dialect, recs []usage.Record, inserted map[string]bool) error {
	per := min(500, d.MaxParams/usageNCols)
	args := make([]any, 0, per*usageNCols)
	for start := 0; start < len(recs); start += per {
		chunk := recs[start:min(start+per, len(recs))]
		args = args[:0]
		var b strings.Builder
		b.WriteString(`INSERT INTO usage(` + usageCols + `) VALUES `)
		for i := range chunk {
			r := &chunk[i]
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(usageRowParams)
			args = usageArgs(args, r, false)
		}
		b.WriteString(` ON CONFLICT (id) DO NOTHING RETURNING id`)
		rows, err := tx.QueryContext(ctx, d.Q(b.String()), args...)
		if err != nil {
			return fmt.Errorf("insert usage: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			inserted[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// InsertUsage writes a batch in one transaction: the records, skipping IDs
// already stored, and the hourly rollups of exactly the records that were
// new, so a replayed batch changes neither table. With u (SQLite) rows go
// one at a time through its prepared statements; without (PostgreSQL) in
// multi-row statements, one round trip per few hundred rows.
func InsertUsage(ctx context.Context, db *sql.DB, d Dialect, u *UsageStmts, recs []usage.Record) error {
	if len(recs) == 0 {
		return nil
	}
	if u != nil {
		// Most batches are new records: try the fast path first, and
		// write a batch that holds stored ones again row by row.
		if err := insertUsage(ctx, db, d, u, recs, true); !errors.Is(err, errSeen) {
			return err
		}
	}
	return insertUsage(ctx, db, d, u, recs, false)
}

func insertUsage(ctx context.Context, db *sql.DB, d Dialect, u *UsageStmts, recs []usage.Record, fast bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	inserted := make(map[string]bool, len(recs))
	var err2 error
	switch {
	case u == nil:
		err2 = insertMultiRow(ctx, tx, d, recs, inserted)
	case fast:
		err2 = insertFast(ctx, tx, u, recs, inserted)
	default:
		err2 = insertPrepared(ctx, tx, u, recs, inserted)
	}
	if err2 != nil {
		return err2
	}
	fresh := recs
	if len(inserted) != len(recs) {
		fresh = make([]usage.Record, 0, len(inserted))
		for i := range recs {
			if inserted[recs[i].ID] {
				fresh = append(fresh, recs[i])
				delete(inserted, recs[i].ID) // a duplicate inside the batch counts once
			}
		}
	}
	rus := rollup.FromRecords(fresh)
	if u != nil {
		err2 = upsertPrepared(ctx, tx, u, rus)
	} else {
		err2 = upsertRollups(ctx, tx, d, rus)
	}
	if err2 != nil {
		return fmt.Errorf("update usage rollups: %w", err2)
	}
	return tx.Commit()
}

// upsertRollups adds the counts of new records to their hourly rows and
// merges their latencies into each row's histogram. The upsert locks every
// touched row until commit and returns its current histogram, so the
// read-merge-write below cannot race another writer.
func upsertRollups(ctx context.Context, tx *sql.Tx, d Dialect, rus []rollup.Row) error {
	const per = 400
	idx := make(map[rollup.Key]int, len(rus))
	for i := range rus {
		idx[rus[i].Key] = i
	}
	hists := make([][]byte, len(rus))
	for start := 0; start < len(rus); start += per {
		chunk := rus[start:min(start+per, len(rus))]
		var b strings.Builder
		args := make([]any, 0, len(chunk)*11)
		b.WriteString(`INSERT INTO usage_hourly(` + rollupCols + `) VALUES `)
		for i, r := range chunk {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`(?,?,?,?,?,?,?,?,?,?,?)`)
			args = append(args, r.Hour, r.KeyID, r.Model, r.Backend, r.Requests, r.Errors, r.PromptTokens, r.CompletionTokens,
				r.CachedTokens, r.Estimated, r.CostUSD)
		}
		b.WriteString(rollupConflict + ` RETURNING hour, key_id, model, backend, latency`)
		rows, err := tx.QueryContext(ctx, d.Q(b.String()), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k rollup.Key
			var h []byte
			if err := rows.Scan(&k.Hour, &k.KeyID, &k.Model, &k.Backend, &h); err != nil {
				rows.Close()
				return err
			}
			if i, ok := idx[k]; ok {
				hists[i] = h
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	stmt, err := tx.PrepareContext(ctx, d.Q(setRollupHist))
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i, r := range rus {
		if _, err := stmt.ExecContext(ctx, rollup.AppendHist(hists[i], r.Latency), r.Hour, r.KeyID, r.Model, r.Backend); err != nil {
			return err
		}
	}
	return nil
}

// Summary aggregates usage per group: hourly rollups for the whole hours in
// the range and raw records for the partial hours at its edges.
func Summary(ctx context.Context, db *sql.DB, d Dialect, f usage.Filter) ([]usage.SummaryRow, error) {
	group := f.GroupBy
	if len(group) == 0 {
		group = []string{"key", "model"}
	}
	var rollCols, rawCols []string
	for _, g := range group {
		switch g {
		case "key":
			rollCols, rawCols = append(rollCols, "key_id"), append(rawCols, "key_id")
		case "model", "backend":
			rollCols, rawCols = append(rollCols, g), append(rawCols, g)
		case "day":
			rollCols, rawCols = append(rollCols, d.Day("hour")), append(rawCols, d.Day("(ts/1000)"))
		default:
			return nil, fmt.Errorf("unknown group %q: use key, model, backend or day", g)
		}
	}
	sinceMS := f.Since.UnixMilli()
	if f.Since.IsZero() {
		sinceMS = 0
	}
	until := f.Until
	if until.IsZero() {
		until = time.Now().Add(time.Minute)
	}
	untilMS := until.UnixMilli()
	hStart := rollup.HourStart(sinceMS)
	if hStart*1000 < sinceMS {
		hStart += 3600
	}
	hEnd := rollup.HourStart(untilMS)
	var filt string
	var fargs []any
	if f.KeyID != "" {
		filt += ` AND key_id = ?`
		fargs = append(fargs, f.KeyID)
	}
	if f.Model != "" {
		filt += ` AND model = ?`
		fargs = append(fargs, f.Model)
	}
	sb := rollup.NewSummaryBuilder(group)
	n := len(group)
	dims := make([]string, n)
	if hStart < hEnd {
		args := append([]any{hStart, hEnd}, fargs...)
		q := `SELECT ` + strings.Join(rollCols, ", ") + `, requests, errors, prompt_tokens, cached_tokens, completion_tokens, estimated, cost_usd, latency
			FROM usage_hourly WHERE hour >= ? AND hour < ?` + filt
		var req, errs, pt, cached, ct, est int64
		var cost float64
		var hist []byte
		err := scanRows(ctx, db, d.Q(q), args, dims, []any{&req, &errs, &pt, &cached, &ct, &est, &cost, &hist}, func() {
			sb.AddRollup(dims, req, errs, pt, cached, ct, est, cost, hist)
		})
		if err != nil {
			return nil, err
		}
	} else {
		hStart, hEnd = untilMS/1000, untilMS/1000 // whole range is raw
	}
	raw := [][2]int64{{sinceMS, min(hStart*1000, untilMS)}, {max(hEnd*1000, sinceMS), untilMS}}
	if hStart >= hEnd {
		raw = raw[:1]
		raw[0] = [2]int64{sinceMS, untilMS}
	}
	for _, rg := range raw {
		if rg[0] >= rg[1] {
			continue
		}
		q := `SELECT ` + strings.Join(rawCols, ", ") + `, latency_us, status, prompt_tokens, cached_tokens, completion_tokens, cost_usd, estimated
			FROM usage WHERE ts >= ? AND ts < ?` + filt
		args := append([]any{rg[0], rg[1]}, fargs...)
		var lat, status, pt, cached, ct, est int64
		var cost float64
		err := scanRows(ctx, db, d.Q(q), args, dims, []any{&lat, &status, &pt, &cached, &ct, &cost, &est}, func() {
			sb.AddRecord(dims, lat, status, pt, cached, ct, cost, est != 0)
		})
		if err != nil {
			return nil, err
		}
	}
	out := sb.Rows()
	return out, nameKeys(ctx, db, out)
}

func scanRows(ctx context.Context, db *sql.DB, q string, args []any, dims []string, vals []any, each func()) error {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	ptrs := make([]any, 0, len(dims)+len(vals))
	for i := range dims {
		ptrs = append(ptrs, &dims[i])
	}
	ptrs = append(ptrs, vals...)
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		each()
	}
	return rows.Err()
}

func nameKeys(ctx context.Context, db *sql.DB, rows []usage.SummaryRow) error {
	names := map[string]string{"master": "(master key)"}
	list, err := ListKeys(ctx, db)
	if err != nil {
		return err
	}
	for _, k := range list {
		names[k.ID] = k.Name
	}
	for i := range rows {
		rows[i].KeyName = names[rows[i].KeyID]
	}
	return nil
}

// Recent returns the newest records, newest first.
func Recent(ctx context.Context, db *sql.DB, d Dialect, limit int) ([]usage.Record, error) {
	return queryRecords(ctx, db, d.Q(`SELECT `+usageCols+` FROM usage ORDER BY ts DESC, id DESC LIMIT ?`), limit)
}

// UseSince returns, per key, model, model that served and second, the
// requests and tokens of the records since since; the gateway's own 429
// refusals (which took nothing from a rate limit) are left out.
func UseSince(ctx context.Context, db *sql.DB, d Dialect, since time.Time) ([]usage.SecondUse, error) {
	rows, err := db.QueryContext(ctx, d.Q(`SELECT key_id, model, served_model, ts / 1000, COUNT(*), COALESCE(SUM(prompt_tokens + completion_tokens), 0)
		FROM usage WHERE ts >= ? AND status <> 429 GROUP BY key_id, model, served_model, ts / 1000`), since.UnixMilli())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []usage.SecondUse
	for rows.Next() {
		var u usage.SecondUse
		if err := rows.Scan(&u.KeyID, &u.Model, &u.ServedModel, &u.Second, &u.Requests, &u.Tokens); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// ByClientRequestID returns the records whose client request id is id,
// newest first. Clients choose their ids, so there may be several. An
// empty id matches nothing (records without one are not indexed).
func ByClientRequestID(ctx context.Context, db *sql.DB, d Dialect, id string, limit int) ([]usage.Record, error) {
	if id == "" {
		return nil, nil
	}
	// The repeated <> '' lets the planner use the partial index.
	return queryRecords(ctx, db, d.Q(`SELECT `+usageCols+` FROM usage WHERE client_request_id = ? AND client_request_id <> ''
		ORDER BY ts DESC, id DESC LIMIT ?`), id, limit)
}

func queryRecords(ctx context.Context, db *sql.DB, q string, args ...any) ([]usage.Record, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []usage.Record
	for rows.Next() {
		var r usage.Record
		var ts, ttft, lat int64
		var est, stream int
		if err := rows.Scan(&r.ID, &r.ClientRequestID, &ts, &r.KeyID, &r.Model, &r.ServedModel, &r.Backend, &r.UpstreamModel, &r.Endpoint, &r.Status, &r.ErrorType,
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

// DeleteUsageBefore deletes raw records older than t; hourly rollups stay,
// so summaries of old whole hours are unaffected.
func DeleteUsageBefore(ctx context.Context, db *sql.DB, d Dialect, t time.Time) (int64, error) {
	res, err := db.ExecContext(ctx, d.Q(`DELETE FROM usage WHERE ts < ?`), t.UnixMilli())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// CountUsage returns the number of raw records and of distinct IDs, for
// exactly-once checks.
func CountUsage(ctx context.Context, db *sql.DB) (rows, distinct int64, err error) {
	err = db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT id) FROM usage`).Scan(&rows, &distinct)
	return rows, distinct, err
}

func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
