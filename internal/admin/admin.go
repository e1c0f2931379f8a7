package admin

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/usage"
)

// Store is what the admin API needs from persistence.
type Store interface {
	keys.Store
	keys.Updater
	usage.Querier
}

// Options configures the API.
type Options struct {
	Store Store
	// Auth authenticates a request (server.Server.Authenticate).
	Auth func(*http.Request) (keys.Principal, error)
	// Reload, when set, refreshes this replica's key cache right after a
	// change; other replicas pick it up by polling the key version.
	Reload func(context.Context) error
	Logger *slog.Logger
	// Spend, when set, returns what the limiter counts against a key's
	// budget in its current window, in USD: settled spend and reservations
	// of requests in flight (the running gateway's admission). Without it
	// "show" reports the ledger's spend alone.
	Spend func(ctx context.Context, k *keys.Key) (settledUSD, reservedUSD float64, err error)
	// KeyListHint ends the "no such key" message with where to find key
	// ids; default "GET /admin/keys lists the ids" (the CLI on a database
	// file says "llmgate keys list" instead).
	KeyListHint string
}

// Handler serves /admin/keys and /admin/usage.
type Handler struct {
	opt Options
	mux *http.ServeMux
	now func() time.Time
}

// Paths are the patterns to mount on the gateway's mux.
var Paths = []string{"/admin/keys", "/admin/keys/", "/admin/usage"}

// New returns the admin API handler.
func New(opt Options) *Handler {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.KeyListHint == "" {
		opt.KeyListHint = "GET /admin/keys lists the ids"
	}
	h := &Handler{opt: opt, mux: http.NewServeMux(), now: time.Now}
	h.mux.HandleFunc("GET /admin/keys", h.listKeys)
	h.mux.HandleFunc("POST /admin/keys", h.createKey)
	h.mux.HandleFunc("GET /admin/keys/{id}", h.showKey)
	h.mux.HandleFunc("PATCH /admin/keys/{id}", h.updateKey)
	h.mux.HandleFunc("DELETE /admin/keys/{id}", h.revokeKey)
	h.mux.HandleFunc("POST /admin/keys/{id}/revoke", h.revokeKey)
	h.mux.HandleFunc("POST /admin/keys/{id}/rotate", h.rotateKey)
	h.mux.HandleFunc("GET /admin/usage", h.usage)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, apierror.Newf(http.StatusNotFound, apierror.KindNotFound, "not_found",
			"%s %s is not an admin endpoint: use /admin/keys[/{id}[/revoke|/rotate]] or /admin/usage", r.Method, r.URL.Path))
	})
	return h
}

// ServeHTTP authenticates the master key, then dispatches.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := h.opt.Auth(r)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	if !p.Master {
		openai.WriteError(w, apierror.New(http.StatusForbidden, apierror.KindPermission, "master_key_required",
			"the admin API needs the master key (LLMGATE_MASTER_KEY); virtual keys cannot manage keys or read usage"))
		return
	}
	h.mux.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func badRequest(format string, args ...any) *apierror.Error {
	return apierror.InvalidRequest("invalid_admin_request", format, args...)
}

func (h *Handler) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, keys.ErrNotFound) {
		err = apierror.New(http.StatusNotFound, apierror.KindNotFound, "key_not_found", "no such key (or it is revoked); "+h.opt.KeyListHint)
	}
	var e *apierror.Error
	if !errors.As(err, &e) {
		// Anything else is the store's: its words (address, user and
		// database names, SQL) go to the log under the request id.
		id := w.Header().Get("X-Request-Id")
		h.opt.Logger.Error("admin request failed: database unavailable", "request_id", id, "err", err)
		err = apierror.DatabaseUnavailable(id, err)
	}
	openai.WriteError(w, err)
}

func (h *Handler) changed(ctx context.Context) {
	if h.opt.Reload != nil {
		if err := h.opt.Reload(ctx); err != nil {
			h.opt.Logger.Warn("key cache reload after change failed; the poller will retry", "err", err)
		}
	}
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request) {
	ks, err := h.opt.Store.ListKeys(r.Context())
	if err != nil {
		h.fail(w, err)
		return
	}
	out := make([]Key, 0, len(ks))
	for _, k := range ks {
		out = append(out, View(k, h.now()))
	}
	writeJSON(w, http.StatusOK, out)
}

func decodeSpec(r *http.Request) (*KeySpec, error) {
	var s KeySpec
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, badRequest("invalid key JSON: %v (fields: name, owner, models, rpm, tpm, max_concurrency, budget_usd, budget_period, metadata, objective, expires_at)", err)
	}
	return &s, nil
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request) {
	spec, err := decodeSpec(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	var k keys.Key
	if err := spec.Apply(&k); err != nil {
		h.fail(w, badRequest("%v", err))
		return
	}
	rec, secret, err := keys.Issue(r.Context(), h.opt.Store, k)
	if err != nil {
		h.fail(w, err)
		return
	}
	h.changed(r.Context())
	writeJSON(w, http.StatusCreated, Issued{Key: View(rec, h.now()), Secret: secret})
}

func (h *Handler) showKey(w http.ResponseWriter, r *http.Request) {
	k, err := h.opt.Store.GetKey(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	v := View(k, h.now())
	rows, err := h.opt.Store.Summary(r.Context(), usage.Filter{Since: keys.PeriodStart(k.BudgetPeriod, h.now()), KeyID: k.ID, GroupBy: []string{"key"}})
	if err == nil {
		spent := 0.0
		for _, row := range rows {
			spent += row.CostUSD
		}
		// The budget is enforced against the limiter's count, which is
		// never below the ledger's (the larger wins) and is ahead of it by
		// records not yet written: show that figure, and what requests in
		// flight hold, so that spent + reserved is what the budget sees.
		if h.opt.Spend != nil && k.BudgetUSD > 0 {
			if settled, reserved, err := h.opt.Spend(r.Context(), k); err == nil {
				spent = max(spent, settled)
				v.ReservedUSD = &reserved
			} else {
				h.opt.Logger.Warn("limiter spend unavailable for key show; showing the ledger's", "key", k.ID, "err", err)
			}
		}
		v.SpentUSD = &spent
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *Handler) updateKey(w http.ResponseWriter, r *http.Request) {
	spec, err := decodeSpec(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	k, err := h.opt.Store.GetKey(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	if err := spec.Apply(k); err != nil {
		h.fail(w, badRequest("%v", err))
		return
	}
	if err := h.opt.Store.UpdateKey(r.Context(), k); err != nil {
		h.fail(w, err)
		return
	}
	h.changed(r.Context())
	writeJSON(w, http.StatusOK, View(k, h.now()))
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.opt.Store.RevokeKey(r.Context(), id, h.now()); err != nil {
		h.fail(w, err)
		return
	}
	h.changed(r.Context())
	k, err := h.opt.Store.GetKey(r.Context(), id)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, View(k, h.now()))
}

func (h *Handler) rotateKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	secret, err := keys.Rotate(r.Context(), h.opt.Store, id)
	if err != nil {
		h.fail(w, err)
		return
	}
	h.changed(r.Context())
	k, err := h.opt.Store.GetKey(r.Context(), id)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Issued{Key: View(k, h.now()), Secret: secret})
}

// ParseSince reads a --since/since= value: a duration back from now (24h,
// 7d, 90m) or an RFC 3339 time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now.Add(-24 * time.Hour), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := ParseAge(s)
	if err != nil {
		return time.Time{}, err
	}
	return now.Add(-d), nil
}

// ParseAge accepts Go durations plus a "d" suffix for days.
func ParseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid duration %q: use 30d, 12h or 90m", s)
		}
		return time.Duration(n * 24 * float64(time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid duration %q: use 30d, 12h or 90m", s)
	}
	return d, nil
}

func (h *Handler) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := h.now()
	since, err := ParseSince(q.Get("since"), now)
	if err != nil {
		h.fail(w, badRequest("since: %v", err))
		return
	}
	f := usage.Filter{Since: since, KeyID: q.Get("key"), Model: q.Get("model"), GroupBy: splitList(q.Get("by"))}
	if u := q.Get("until"); u != "" {
		if f.Until, err = ParseSince(u, now); err != nil {
			h.fail(w, badRequest("until: %v", err))
			return
		}
	}
	for _, g := range f.GroupBy {
		if g != "key" && g != "model" && g != "backend" && g != "day" {
			h.fail(w, badRequest("by: unknown group %q: use key, model, backend or day (comma-separated)", g))
			return
		}
	}
	rows, err := h.opt.Store.Summary(r.Context(), f)
	if err != nil {
		h.fail(w, err)
		return
	}
	if rows == nil {
		rows = []usage.SummaryRow{}
	}
	switch q.Get("format") {
	case "", "json":
		writeJSON(w, http.StatusOK, rows)
	case "csv":
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		_ = WriteCSV(w, rows, f.GroupBy)
	default:
		h.fail(w, badRequest("format must be json or csv"))
	}
}

// csvMetricColumns are the figures WriteCSV writes after the groups.
var csvMetricColumns = []string{"requests", "errors", "prompt_tokens", "cached_tokens", "completion_tokens",
	"cost_usd", "estimated_records", "p50_latency_ms", "p95_latency_ms"}

// CSVHeader names the columns WriteCSV writes for a grouping (empty: key
// and model): the groups' columns, in order (key is key_id and key_name),
// then the figures. A dimension the rows are not grouped by has no column,
// rather than one left empty on every row.
func CSVHeader(group []string) []string {
	var h []string
	for _, g := range defaultGroup(group) {
		if g == "key" {
			h = append(h, "key_id", "key_name")
		} else {
			h = append(h, g)
		}
	}
	return append(h, csvMetricColumns...)
}

func defaultGroup(group []string) []string {
	if len(group) == 0 {
		return []string{"key", "model"}
	}
	return group
}

// WriteCSV writes summary rows grouped by group as CSV with a header line.
func WriteCSV(w io.Writer, rows []usage.SummaryRow, group []string) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader(group))
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	f64 := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range rows {
		var rec []string
		for _, g := range defaultGroup(group) {
			switch g {
			case "key":
				rec = append(rec, r.KeyID, r.KeyName)
			case "model":
				rec = append(rec, r.Model)
			case "backend":
				rec = append(rec, r.Backend)
			case "day":
				rec = append(rec, r.Day)
			}
		}
		_ = cw.Write(append(rec, i64(r.Requests), i64(r.Errors), i64(r.PromptTokens),
			i64(r.CachedTokens), i64(r.CompletionTokens), f64(r.CostUSD), i64(r.Estimated), f64(r.P50LatencyMS), f64(r.P95LatencyMS)))
	}
	cw.Flush()
	return cw.Error()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
