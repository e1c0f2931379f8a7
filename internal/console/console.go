// Package console serves llmgate's web console at /ui: a dashboard, keys,
// models and backends with health, a usage explorer with CSV export, recent
// requests and a playground that streams one prompt to several models side
// by side. The pages are static files embedded in the binary (no build
// step); they talk to a small JSON API under /ui/api/ guarded by a session
// cookie, CSRF tokens and a strict Content-Security-Policy.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/store"
	"llmgate/internal/usage"
)

//go:embed static
var staticFS embed.FS

// Prefix is where the console is mounted.
const Prefix = "/ui"

// Store is what the console reads and changes: keys, usage and the
// sign-in sessions every replica shares.
type Store interface {
	keys.Store
	usage.Querier
	store.Sessions
}

// Options connect the console to a running gateway. Store, Verify and API
// are required; the rest add information when present.
type Options struct {
	Store Store
	// Verify checks a key typed at sign-in (the gateway's verifier).
	Verify func(secret string) (keys.Principal, error)
	// MasterHash returns the current master key's hex SHA-256; admin
	// sessions are bound to it, so changing the master key ends them.
	MasterHash func() string
	// API serves the gateway's OpenAI-compatible endpoints; the playground
	// sends its requests through it in-process, as the signed-in key.
	API http.Handler
	// KeysChanged is called after a key is created, revoked or rotated so
	// the change applies at once (the verifier's reload).
	KeysChanged func(ctx context.Context) error
	// Models lists the public model names.
	Models func() []string
	// Health returns the routing table's model health (router.Table.Health).
	Health func() any
	// Engines returns local engine states (engine.Manager.List).
	Engines func() any
	// Spend, when set, returns what the limiter counts against a key's
	// budget in its current period (settled spend and reservations in
	// flight), as the admin API's key view shows it.
	Spend func(ctx context.Context, k *keys.Key) (settledUSD, reservedUSD float64, err error)
	// Stats returns live figures for the dashboard (in-flight requests,
	// ledger queue depth).
	Stats  func() map[string]float64
	Logger *slog.Logger
	// SessionTTL is how long a sign-in lasts (default 12h).
	SessionTTL time.Duration
	// Now is the clock (tests).
	Now func() time.Time
}

// Console is the /ui handler.
type Console struct {
	opt    Options
	log    *slog.Logger
	static http.Handler
	index  []byte
	mux    *http.ServeMux
}

// CSP allows scripts, styles, images and fetches from the console's own
// origin only; no inline script, no frames, no plugins.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// New returns the console handler, to be mounted at /ui and /ui/.
func New(opt Options) *Console {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.SessionTTL <= 0 {
		opt.SessionTTL = 12 * time.Hour
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	sub, _ := fs.Sub(staticFS, "static")
	index, _ := fs.ReadFile(sub, "index.html")
	c := &Console{opt: opt, log: opt.Logger, index: index,
		static: http.StripPrefix(Prefix+"/static/", http.FileServerFS(sub))}
	c.routes()
	return c
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /ui/api/login", c.handleLogin)
	m.HandleFunc("POST /ui/api/logout", c.session(false, c.handleLogout))
	m.HandleFunc("GET /ui/api/me", c.session(false, c.handleMe))
	m.HandleFunc("GET /ui/api/overview", c.session(false, c.handleOverview))
	m.HandleFunc("GET /ui/api/keys", c.session(false, c.handleKeys))
	m.HandleFunc("POST /ui/api/keys", c.session(true, c.handleCreateKey))
	m.HandleFunc("POST /ui/api/keys/{id}/revoke", c.session(true, c.handleRevokeKey))
	m.HandleFunc("POST /ui/api/keys/{id}/rotate", c.session(true, c.handleRotateKey))
	m.HandleFunc("GET /ui/api/models", c.session(false, c.handleModels))
	m.HandleFunc("GET /ui/api/usage", c.session(false, c.handleUsage))
	m.HandleFunc("GET /ui/api/recent", c.session(false, c.handleRecent))
	m.HandleFunc("POST /ui/api/chat", c.session(false, c.handleChat))
	m.HandleFunc("/ui/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such console endpoint: "+r.Method+" "+r.URL.Path)
	})
	m.Handle("GET /ui/static/", c.static)
	m.HandleFunc("GET /ui/{$}", c.handleIndex)
	m.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusFound)
	})
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found", http.StatusNotFound)
	})
	c.mux = m
}

// ServeHTTP sets the security headers every console response carries and
// dispatches.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), clipboard-write=(self)")
	if strings.HasPrefix(r.URL.Path, Prefix+"/api/") || r.URL.Path == Prefix+"/" {
		h.Set("Cache-Control", "no-store")
	} else {
		h.Set("Cache-Control", "no-cache") // revalidate: assets change with the binary
	}
	c.mux.ServeHTTP(w, r)
}

func (c *Console) handleIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(c.index)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "status": status}})
}

// unavailable answers a request the database failed: a 503 that says to
// retry and names the request id; the database's own words (its address,
// user and database names) go to the log under that id, never to the page.
func (c *Console) unavailable(w http.ResponseWriter, what string, err error) {
	id := w.Header().Get("X-Request-Id")
	c.log.Warn("console: "+what+": database unavailable", "request_id", id, "err", err)
	e := apierror.DatabaseUnavailable(id, err)
	for k, v := range e.Header {
		w.Header()[k] = v
	}
	writeJSON(w, e.Status, map[string]any{"error": map[string]any{"message": e.Message, "status": e.Status, "code": e.Code}})
}
