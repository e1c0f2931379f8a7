package console

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/usage"
)

// point is one bucket of the dashboard's time series.
type point struct {
	T                time.Time `json:"t"`
	Requests         int64     `json:"requests"`
	Errors           int64     `json:"errors"`
	PromptTokens     int64     `json:"prompt_tokens"`
	CachedTokens     int64     `json:"cached_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	CostUSD          float64   `json:"cost_usd"`
	P50MS            float64   `json:"p50_ms"`
	P95MS            float64   `json:"p95_ms"`
}

// ranges maps the dashboard's range names to a length and bucket size.
var ranges = map[string]struct {
	span, bucket time.Duration
}{
	"24h": {24 * time.Hour, time.Hour},
	"7d":  {7 * 24 * time.Hour, 24 * time.Hour},
	"30d": {30 * 24 * time.Hour, 24 * time.Hour},
}

// handleOverview returns the dashboard: a time series (hourly for a day,
// daily beyond) built from the store's usage Summary, the top models, and
// live figures. User sessions see their own key only.
func (c *Console) handleOverview(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.URL.Query().Get("range")
	rg, ok := ranges[name]
	if !ok {
		name, rg = "24h", ranges["24h"]
	}
	ctx := r.Context()
	now := c.opt.Now().UTC()
	keyID := ""
	if !s.admin() {
		keyID = s.principal.KeyID()
	}
	var series []point
	var since time.Time
	if rg.bucket == time.Hour {
		// One Summary per hour: each is answered from the hourly rollup
		// plus the raw records of the current hour, so 24 small queries.
		end := now.Truncate(time.Hour).Add(time.Hour)
		since = end.Add(-rg.span)
		for t := since; t.Before(end); t = t.Add(time.Hour) {
			rows, err := c.opt.Store.Summary(ctx, usage.Filter{Since: t, Until: t.Add(time.Hour), KeyID: keyID, GroupBy: []string{"day"}})
			if err != nil {
				c.unavailable(w, "usage query failed", err)
				return
			}
			p := point{T: t}
			for _, row := range rows {
				addRow(&p, row)
			}
			series = append(series, p)
		}
	} else {
		days := int(rg.span / (24 * time.Hour))
		start := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, -(days - 1))
		since = start
		rows, err := c.opt.Store.Summary(ctx, usage.Filter{Since: start, KeyID: keyID, GroupBy: []string{"day"}})
		if err != nil {
			c.unavailable(w, "usage query failed", err)
			return
		}
		byDay := map[string]usage.SummaryRow{}
		for _, row := range rows {
			byDay[row.Day] = row
		}
		for i := 0; i < days; i++ {
			t := start.AddDate(0, 0, i)
			p := point{T: t}
			if row, ok := byDay[t.Format("2006-01-02")]; ok {
				addRow(&p, row)
			}
			series = append(series, p)
		}
	}
	models, err := c.opt.Store.Summary(ctx, usage.Filter{Since: since, KeyID: keyID, GroupBy: []string{"model"}})
	if err != nil {
		c.unavailable(w, "usage query failed", err)
		return
	}
	sort.Slice(models, func(i, j int) bool { return models[i].Requests > models[j].Requests })
	totals, err := c.opt.Store.Summary(ctx, usage.Filter{Since: since, KeyID: keyID, GroupBy: []string{"key"}})
	if err != nil {
		c.unavailable(w, "usage query failed", err)
		return
	}
	var tot point
	for _, row := range totals {
		tot.Requests += row.Requests
		tot.Errors += row.Errors
		tot.PromptTokens += row.PromptTokens
		tot.CachedTokens += row.CachedTokens
		tot.CompletionTokens += row.CompletionTokens
		tot.CostUSD += row.CostUSD
	}
	// Whole-range percentiles would need one more pass over the records;
	// a single key's row already has them, and for many keys the request-
	// weighted p50/p95 of the per-model rows is shown as an approximation.
	tot.P50MS, tot.P95MS = weightedLatency(models)
	out := map[string]any{"range": name, "bucket_seconds": rg.bucket.Seconds(), "series": series, "totals": tot, "models": models,
		"percentiles_approximate": len(models) > 1}
	if c.opt.Stats != nil && s.admin() { // gateway-wide figures are for admins
		out["live"] = c.opt.Stats()
	}
	writeJSON(w, http.StatusOK, out)
}

func addRow(p *point, row usage.SummaryRow) {
	p.Requests += row.Requests
	p.Errors += row.Errors
	p.PromptTokens += row.PromptTokens
	p.CachedTokens += row.CachedTokens
	p.CompletionTokens += row.CompletionTokens
	p.CostUSD += row.CostUSD
	// A bucket holds one row per day; an hour never spans two.
	p.P50MS = max(p.P50MS, row.P50LatencyMS)
	p.P95MS = max(p.P95MS, row.P95LatencyMS)
}

func weightedLatency(rows []usage.SummaryRow) (p50, p95 float64) {
	var n int64
	for _, r := range rows {
		p50 += r.P50LatencyMS * float64(r.Requests)
		p95 += r.P95LatencyMS * float64(r.Requests)
		n += r.Requests
	}
	if n == 0 {
		return 0, 0
	}
	return p50 / float64(n), p95 / float64(n)
}

// keyView is a key as the console shows it: never the secret or its hash.
type keyView struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Owner        string            `json:"owner,omitempty"`
	Hint         string            `json:"hint"`
	Models       []string          `json:"models"`
	RPM          int               `json:"rpm"`
	TPM          int               `json:"tpm"`
	MaxConc      int               `json:"max_concurrency"`
	Priority     int               `json:"priority"`
	BudgetUSD    float64           `json:"budget_usd"`
	BudgetPeriod string            `json:"budget_period,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	ExpiresAt    *time.Time        `json:"expires_at,omitempty"`
	RevokedAt    *time.Time        `json:"revoked_at,omitempty"`
	// Status is active, revoked, expired, or exhausted: active but its
	// budget spent for the current period, so every request is refused.
	Status string `json:"status"`
	// SpentUSD is the spend in the current budget period (all time for a
	// key without a period); ReservedUSD what requests in flight hold.
	SpentUSD    float64 `json:"spent_usd"`
	ReservedUSD float64 `json:"reserved_usd,omitempty"`
}

func viewKey(k *keys.Key, now time.Time) keyView {
	v := keyView{ID: k.ID, Name: k.Name, Owner: k.Owner, Hint: k.Hint, Models: k.Models, RPM: k.RPM, TPM: k.TPM, MaxConc: k.MaxConc,
		Priority: k.EffectivePriority(), BudgetUSD: k.BudgetUSD, BudgetPeriod: k.BudgetPeriod, Metadata: k.Metadata, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt,
		RevokedAt: k.RevokedAt, Status: "active"}
	if v.Models == nil {
		v.Models = []string{}
	}
	switch err := k.Usable(now); {
	case errors.Is(err, keys.ErrRevoked):
		v.Status = "revoked"
	case errors.Is(err, keys.ErrExpired):
		v.Status = "expired"
	}
	return v
}

func (c *Console) handleKeys(w http.ResponseWriter, r *http.Request, s *session) {
	now := c.opt.Now()
	var list []*keys.Key
	if !s.admin() {
		k, err := c.opt.Store.GetKey(r.Context(), s.principal.KeyID())
		if err != nil {
			c.unavailable(w, "read key", err)
			return
		}
		list = []*keys.Key{k}
	} else {
		var err error
		if list, err = c.opt.Store.ListKeys(r.Context()); err != nil {
			c.unavailable(w, "list keys", err)
			return
		}
	}
	out := make([]keyView, 0, len(list))
	for _, k := range list {
		out = append(out, viewKey(k, now))
	}
	c.addSpend(r.Context(), list, out, now)
	if !s.admin() {
		writeJSON(w, http.StatusOK, map[string]any{"keys": out, "can_manage": false})
		return
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	_, canRotate := c.opt.Store.(keys.Updater)
	writeJSON(w, http.StatusOK, map[string]any{"keys": out, "can_manage": true, "can_rotate": canRotate})
}

// addSpend fills each key view's spend in its current budget period, from
// the ledger (one summary per period kind) and, for a key with a budget,
// the limiter's count when it is ahead; an active key whose budget is
// spent is shown as exhausted.
func (c *Console) addSpend(ctx context.Context, list []*keys.Key, views []keyView, now time.Time) {
	byPeriod := map[string]map[string]float64{}
	for i, k := range list {
		spent, ok := byPeriod[k.BudgetPeriod]
		if !ok {
			spent = map[string]float64{}
			rows, err := c.opt.Store.Summary(ctx, usage.Filter{Since: keys.PeriodStart(k.BudgetPeriod, now), GroupBy: []string{"key"}})
			if err != nil {
				c.log.Warn("console: key spend unavailable", "err", err)
			}
			for _, row := range rows {
				spent[row.KeyID] += row.CostUSD
			}
			byPeriod[k.BudgetPeriod] = spent
		}
		v := &views[i]
		v.SpentUSD = spent[k.ID]
		if c.opt.Spend != nil && k.BudgetUSD > 0 {
			if settled, reserved, err := c.opt.Spend(ctx, k); err == nil {
				v.SpentUSD = max(v.SpentUSD, settled)
				v.ReservedUSD = reserved
			}
		}
		if v.Status == "active" && k.BudgetUSD > 0 && v.SpentUSD >= k.BudgetUSD {
			v.Status = "exhausted"
		}
	}
}

type createKeyRequest struct {
	Name         string            `json:"name"`
	Owner        string            `json:"owner"`
	Models       []string          `json:"models"`
	RPM          int               `json:"rpm"`
	TPM          int               `json:"tpm"`
	MaxConc      int               `json:"max_concurrency"`
	Priority     int               `json:"priority"`
	BudgetUSD    float64           `json:"budget_usd"`
	BudgetPeriod string            `json:"budget_period"`
	ExpiresDays  float64           `json:"expires_in_days"`
	Metadata     map[string]string `json:"metadata"`
}

// validate checks a create request and says what to fix.
func (q *createKeyRequest) validate() error {
	q.Name = strings.TrimSpace(q.Name)
	if q.Name == "" {
		return errors.New("give the key a name (who or what uses it)")
	}
	if len(q.Name) > 100 {
		return errors.New("the name is longer than 100 characters")
	}
	if q.RPM < 0 || q.TPM < 0 || q.MaxConc < 0 || q.BudgetUSD < 0 || q.ExpiresDays < 0 {
		return errors.New("limits, budget and expiry must be zero (none) or positive")
	}
	if q.Priority < 0 || q.Priority > keys.MaxPriority {
		return fmt.Errorf("priority must be 1 (the default) to %d: a key of priority 3 gets three turns to one of priority 1 in a busy deployment's queue", keys.MaxPriority)
	}
	okPeriod := false
	for _, p := range keys.BudgetPeriods {
		okPeriod = okPeriod || p == q.BudgetPeriod
	}
	if !okPeriod {
		return fmt.Errorf("budget period %q is not one of daily, monthly or none", q.BudgetPeriod)
	}
	models := q.Models[:0]
	for _, m := range q.Models {
		if m = strings.TrimSpace(m); m != "" {
			models = append(models, m)
		}
	}
	q.Models = models
	return nil
}

func (c *Console) handleCreateKey(w http.ResponseWriter, r *http.Request, s *session) {
	var q createKeyRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&q); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	if err := q.validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	secret, err := keys.Generate()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	now := c.opt.Now()
	k := &keys.Key{ID: keys.NewID(), Name: q.Name, Owner: q.Owner, Hash: keys.Hash(secret), Hint: keys.Hint(secret), Models: q.Models,
		RPM: q.RPM, TPM: q.TPM, MaxConc: q.MaxConc, Priority: q.Priority, BudgetUSD: q.BudgetUSD, BudgetPeriod: q.BudgetPeriod, Metadata: q.Metadata, CreatedAt: now}
	if q.BudgetPeriod == "none" {
		k.BudgetPeriod = ""
	}
	if q.ExpiresDays > 0 {
		t := now.Add(time.Duration(q.ExpiresDays * float64(24*time.Hour)))
		k.ExpiresAt = &t
	}
	if err := c.opt.Store.CreateKey(r.Context(), k); err != nil {
		c.unavailable(w, "create key", err)
		return
	}
	c.keysChanged(r)
	c.log.Info("console: key created", "key_id", k.ID, "name", k.Name)
	// The secret is in this one response only; the console shows it once.
	writeJSON(w, http.StatusCreated, map[string]any{"key": viewKey(k, now), "secret": secret})
}

func (c *Console) handleRevokeKey(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	if err := c.opt.Store.RevokeKey(r.Context(), id, c.opt.Now()); err != nil {
		if errors.Is(err, keys.ErrNotFound) {
			writeError(w, http.StatusNotFound, "revoke key "+id+": no such key")
			return
		}
		c.unavailable(w, "revoke key", err)
		return
	}
	c.keysChanged(r)
	c.endKeySessions(r, id)
	c.log.Info("console: key revoked", "key_id", id)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

func (c *Console) handleRotateKey(w http.ResponseWriter, r *http.Request, s *session) {
	up, ok := c.opt.Store.(keys.Updater)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this store cannot rotate keys: revoke the key and create a new one")
		return
	}
	id := r.PathValue("id")
	secret, err := keys.Rotate(r.Context(), up, id)
	if err != nil {
		if errors.Is(err, keys.ErrNotFound) {
			writeError(w, http.StatusNotFound, "rotate key "+id+": no such key (or it is revoked)")
			return
		}
		c.unavailable(w, "rotate key", err)
		return
	}
	c.keysChanged(r)
	c.endKeySessions(r, id)
	c.log.Info("console: key rotated", "key_id", id)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "secret": secret, "hint": keys.Hint(secret)})
}

// endKeySessions signs a revoked or rotated key out of the console on every
// replica (each request re-reads the key too, so a failure here only leaves
// rows that are refused and purged later).
func (c *Console) endKeySessions(r *http.Request, id string) {
	if _, err := c.opt.Store.DeleteKeySessions(r.Context(), id); err != nil {
		c.log.Warn("console: end the key's sessions", "key_id", id, "err", err)
	}
}

func (c *Console) keysChanged(r *http.Request) {
	if c.opt.KeysChanged != nil {
		if err := c.opt.KeysChanged(r.Context()); err != nil {
			c.log.Warn("console: reload keys", "err", err)
		}
	}
}

func (c *Console) handleModels(w http.ResponseWriter, r *http.Request, s *session) {
	out := map[string]any{}
	var names []string
	if c.opt.Models != nil {
		names = c.opt.Models()
	}
	if !s.admin() && s.principal.Key != nil {
		allowed := names[:0:0]
		for _, n := range names {
			if s.principal.Key.Allows(n) {
				allowed = append(allowed, n)
			}
		}
		names = allowed
	}
	out["models"] = names
	if c.opt.Health != nil {
		h := c.opt.Health()
		if !s.admin() {
			h = onlyModels(h, names)
		}
		out["health"] = h
	}
	if c.opt.Engines != nil && s.admin() {
		out["engines"] = c.opt.Engines()
	}
	writeJSON(w, http.StatusOK, out)
}

// onlyModels keeps the health entries of the given models. Health comes
// as the router's own type; a JSON round trip filters it without tying the
// console to the router's structs.
func onlyModels(health any, names []string) any {
	b, err := json.Marshal(health)
	if err != nil {
		return []any{}
	}
	var list []map[string]any
	if json.Unmarshal(b, &list) != nil {
		return []any{}
	}
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	out := make([]map[string]any, 0, len(list))
	for _, m := range list {
		if name, _ := m["model"].(string); keep[name] {
			out = append(out, m)
		}
	}
	return out
}

// usageFilter reads the explorer's query: since/until (RFC 3339 or
// YYYY-MM-DD), key, model and group (comma list).
func (c *Console) usageFilter(r *http.Request, s *session) (usage.Filter, error) {
	q := r.URL.Query()
	var f usage.Filter
	var err error
	if f.Since, err = parseTime(q.Get("since"), false); err != nil {
		return f, err
	}
	if f.Until, err = parseTime(q.Get("until"), true); err != nil {
		return f, err
	}
	if f.Since.IsZero() {
		f.Since = c.opt.Now().Add(-7 * 24 * time.Hour)
	}
	f.KeyID, f.Model = q.Get("key"), q.Get("model")
	if !s.admin() {
		f.KeyID = s.principal.KeyID()
	}
	for _, g := range strings.Split(q.Get("group"), ",") {
		switch g = strings.TrimSpace(g); g {
		case "":
		case "key", "model", "backend", "day":
			f.GroupBy = append(f.GroupBy, g)
		default:
			return f, fmt.Errorf("group %q is not one of key, model, backend, day", g)
		}
	}
	return f, nil
}

func parseTime(v string, endOfDay bool) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	t, err := time.Parse("2006-01-02", v)
	if err != nil {
		return t, fmt.Errorf("time %q: use YYYY-MM-DD or RFC 3339", v)
	}
	if endOfDay {
		t = t.AddDate(0, 0, 1)
	}
	return t, nil
}

func (c *Console) handleUsage(w http.ResponseWriter, r *http.Request, s *session) {
	f, err := c.usageFilter(r, s)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rows, err := c.opt.Store.Summary(r.Context(), f)
	if err != nil {
		c.unavailable(w, "usage query failed", err)
		return
	}
	names := c.keyNames(r, s)
	for i := range rows {
		if rows[i].KeyName == "" {
			rows[i].KeyName = names[rows[i].KeyID]
		}
	}
	if r.URL.Query().Get("format") == "csv" {
		writeUsageCSV(w, rows)
		return
	}
	if rows == nil {
		rows = []usage.SummaryRow{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"rows": rows, "group": f.GroupBy, "since": f.Since, "until": f.Until})
}

// keyNames maps key ids to names for display (admins only; a user knows
// their own key).
func (c *Console) keyNames(r *http.Request, s *session) map[string]string {
	names := map[string]string{"master": "master key"}
	if !s.admin() {
		if k := s.principal.Key; k != nil {
			names[k.ID] = k.Name
		}
		return names
	}
	list, err := c.opt.Store.ListKeys(r.Context())
	if err == nil {
		for _, k := range list {
			names[k.ID] = k.Name
		}
	}
	return names
}

func writeUsageCSV(w http.ResponseWriter, rows []usage.SummaryRow) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="llmgate-usage.csv"`)
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"day", "key_id", "key_name", "model", "backend", "requests", "errors", "prompt_tokens", "cached_tokens",
		"completion_tokens", "cost_usd", "estimated_records", "p50_latency_ms", "p95_latency_ms"})
	for _, r := range rows {
		_ = cw.Write([]string{r.Day, r.KeyID, csvSafe(r.KeyName), r.Model, r.Backend, i64(r.Requests), i64(r.Errors), i64(r.PromptTokens),
			i64(r.CachedTokens), i64(r.CompletionTokens), strconv.FormatFloat(r.CostUSD, 'f', 6, 64), i64(r.Estimated),
			strconv.FormatFloat(r.P50LatencyMS, 'f', 1, 64), strconv.FormatFloat(r.P95LatencyMS, 'f', 1, 64)})
	}
	cw.Flush()
}

// csvSafe defuses spreadsheet formulas in user-chosen text (key names).
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

// recentView is a ledger record for the recent-requests table: metadata
// only, since the gateway does not keep bodies.
type recentView struct {
	ID               string    `json:"id"`                   // the ledger's record id (server-made)
	RequestID        string    `json:"request_id,omitempty"` // the client's X-Request-Id
	Time             time.Time `json:"time"`
	KeyID            string    `json:"key_id"`
	KeyName          string    `json:"key_name,omitempty"`
	Model            string    `json:"model"`
	ServedModel      string    `json:"served_model,omitempty"` // the fallback model that served, when not model
	Backend          string    `json:"backend"`
	Endpoint         string    `json:"endpoint"`
	Status           int       `json:"status"`
	ErrorType        string    `json:"error_type,omitempty"`
	PromptTokens     int       `json:"prompt_tokens"`
	CachedTokens     int       `json:"cached_tokens"` // of the prompt, served from the backend's prefix cache
	CompletionTokens int       `json:"completion_tokens"`
	TTFTMS           float64   `json:"ttft_ms"`
	LatencyMS        float64   `json:"latency_ms"`
	Stream           bool      `json:"stream"`
	Estimated        bool      `json:"estimated"`
	CostUSD          float64   `json:"cost_usd"`
}

func (c *Console) handleRecent(w http.ResponseWriter, r *http.Request, s *session) {
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	fetch := limit
	if !s.admin() {
		fetch = 2000 // Recent has no key filter: take a wider window and keep the user's own
	}
	recs, err := c.opt.Store.Recent(r.Context(), fetch)
	if err != nil {
		c.unavailable(w, "recent requests", err)
		return
	}
	names := c.keyNames(r, s)
	model := r.URL.Query().Get("model")
	out := make([]recentView, 0, limit)
	for _, rec := range recs {
		if !s.admin() && rec.KeyID != s.principal.KeyID() {
			continue
		}
		if model != "" && rec.Model != model {
			continue
		}
		out = append(out, recentView{ID: rec.ID, RequestID: rec.ClientRequestID, Time: rec.Time, KeyID: rec.KeyID, KeyName: names[rec.KeyID], Model: rec.Model,
			ServedModel: rec.ServedModel, Backend: rec.Backend, Endpoint: rec.Endpoint, Status: rec.Status, ErrorType: rec.ErrorType, PromptTokens: rec.PromptTokens,
			CachedTokens: rec.CachedTokens, CompletionTokens: rec.CompletionTokens, TTFTMS: ms(rec.TTFT), LatencyMS: ms(rec.Latency), Stream: rec.Stream,
			Estimated: rec.Estimated, CostUSD: rec.CostUSD})
		if len(out) == limit {
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"requests": out})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
