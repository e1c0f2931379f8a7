// Package server is llmgate's HTTP edge: routes, authentication, request
// parsing just deep enough to route, relaying to backends with usage
// capture, and error rendering in the client's protocol envelope.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/router"
	"llmgate/internal/store"
	"llmgate/internal/usage"
)

// Ledger receives one record per served request.
type Ledger interface {
	Add(usage.Record) error
}

// Admission decides whether a request may proceed (rate limits,
// concurrency, budgets) and settles it afterwards.
type Admission interface {
	// Admit is called once the route and key are known. A refusal is an
	// *apierror.Error (429 with rate-limit headers, 402/429 for budgets).
	Admit(ctx context.Context, req AdmitRequest) (Ticket, error)
}

// AdmitRequest describes a request about to be forwarded.
type AdmitRequest struct {
	Principal keys.Principal
	Model     string
	Endpoint  string
	// Body is the client's JSON body (read-only), for estimating tokens.
	Body []byte
}

// Ticket is an admitted request. Done is called exactly once with the final
// ledger record, before it is written; it may set the record's cost.
type Ticket interface {
	Done(rec *usage.Record)
}

// RateLimitTicket is a Ticket of a request under rate limits (a key's, a
// model's). The server calls RateLimitHeaders once, right after admission
// and before anything is written, so every answer to the request - a
// success, a stream, an error after admission - carries OpenAI's
// x-ratelimit-* headers with the figures as of admission, as the 429 of a
// refusal does. It adds nothing when no rate limit applies.
type RateLimitTicket interface {
	Ticket
	RateLimitHeaders(h http.Header)
}

// Options configures a Server.
type Options struct {
	Table        *router.Table
	Verifier     *keys.Verifier
	Ledger       Ledger
	Logger       *slog.Logger
	MaxBodyBytes int64
	// Ready reports readiness for /readyz; nil means always ready.
	Ready func() error
	// Admission, when set, admits every model request (limits, budgets).
	Admission Admission
	// Middleware wraps the whole handler, outermost first (request ids,
	// tracing, metrics).
	Middleware []func(http.Handler) http.Handler
	// Responses, when set, stores Responses API responses for
	// previous_response_id and GET/DELETE /v1/responses/{id}, each kept
	// for ResponsesTTL (default 30 days).
	Responses    store.Responses
	ResponsesTTL time.Duration
}

// Server serves the gateway API.
type Server struct {
	table    atomic.Pointer[router.Table]
	verifier *keys.Verifier
	ledger   Ledger
	log      *slog.Logger
	maxBody  int64
	ready    func() error
	mux      *http.ServeMux
	handler  http.Handler
	admit    Admission
	started  time.Time

	idPrefix string
	idSeq    atomic.Uint64

	noTokenize tokenizeMemo   // backends without POST /tokenize (count_tokens)
	responses  *responseStore // nil: the Responses API is stateless
}

// New returns a Server.
func New(opt Options) *Server {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 32 << 20
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	s := &Server{verifier: opt.Verifier, ledger: opt.Ledger, log: opt.Logger, maxBody: opt.MaxBodyBytes,
		ready: opt.Ready, admit: opt.Admission, started: time.Now(), idPrefix: "req_" + hex.EncodeToString(rb[:]) + "_"}
	s.table.Store(opt.Table)
	if opt.Responses != nil {
		if opt.ResponsesTTL <= 0 {
			opt.ResponsesTTL = 30 * 24 * time.Hour
		}
		s.responses = &responseStore{st: opt.Responses, ttl: opt.ResponsesTTL}
	}
	s.routes()
	s.handler = http.Handler(s.mux)
	for i := len(opt.Middleware) - 1; i >= 0; i-- {
		s.handler = opt.Middleware[i](s.handler)
	}
	return s
}

// SetTable swaps the routing table atomically; requests in flight finish on
// the table they started with.
func (s *Server) SetTable(t *router.Table) { s.table.Store(t) }

// Table returns the current routing table.
func (s *Server) Table() *router.Table { return s.table.Load() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic in handler", "path", r.URL.Path, "panic", v)
			openai.WriteError(w, apierror.From(nil))
		}
	}()
	s.handler.ServeHTTP(w, r)
}

// Handle mounts an extra handler (admin API, console, metrics) on the
// server's mux. Call it before serving.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Authenticate exposes the gateway's key check to mounted handlers.
func (s *Server) Authenticate(r *http.Request) (keys.Principal, error) { return s.authenticate(r) }

func (s *Server) routes() {
	m := http.NewServeMux()
	m.Handle("/v1/chat/completions", s.api(http.MethodPost, s.proxy(endpointChat)))
	m.Handle("/v1/completions", s.api(http.MethodPost, s.proxy(endpointCompletions)))
	m.Handle("/v1/embeddings", s.api(http.MethodPost, s.proxy(endpointEmbeddings)))
	m.Handle("/v1/rerank", s.api(http.MethodPost, s.proxy(endpointRerank)))
	m.Handle("/v2/rerank", s.api(http.MethodPost, s.proxy(endpointRerank))) // Cohere's v2 path
	m.Handle("/v1/models", s.api(http.MethodGet, s.handleModels))
	m.Handle("/v1/models/", s.api(http.MethodGet, s.handleModel))
	m.Handle("/v1/messages", s.anthropicAPI(s.handleMessages))
	m.Handle("/v1/messages/count_tokens", s.anthropicAPI(s.handleCountTokens))
	m.Handle("/v1/responses", s.api(http.MethodPost, s.handleResponses))
	m.HandleFunc("/v1/responses/", s.handleResponseLookup)
	m.HandleFunc("/healthz", s.handleHealth)
	m.HandleFunc("/readyz", s.handleReady)
	m.HandleFunc("/", s.handleNotFound)
	s.mux = m
}

// requestID returns the client's x-request-id when it is sane, else a new one.
func (s *Server) requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 && printable(id) {
		return id
	}
	return s.newID()
}

func (s *Server) newID() string {
	return s.idPrefix + strconv.FormatUint(s.idSeq.Add(1), 36)
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

type ctxKey int

const principalKey ctxKey = 0

// api wraps an OpenAI-dialect handler with method checking and
// authentication.
func (s *Server) api(method string, h func(http.ResponseWriter, *http.Request, keys.Principal)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			openai.WriteError(w, apierror.Newf(http.StatusMethodNotAllowed, apierror.KindInvalidRequest, "method_not_allowed",
				"%s %s is not supported: use %s", r.Method, r.URL.Path, method))
			return
		}
		p, err := s.authenticate(r)
		if err != nil {
			openai.WriteError(w, err)
			return
		}
		h(w, r, p)
	})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		if err := s.ready(); err != nil {
			openai.WriteError(w, apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "not_ready", "not ready: %v", err))
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ready"}`))
}

// route resolves model for p and applies the key's model allow-list: a
// model outside it is a 403 naming the models the key may use, and for a
// key with a list an unknown model's 404 suggests and lists only those.
func (s *Server) route(p keys.Principal, model string) (*router.Route, error) {
	t := s.Table()
	r, err := t.Route(model)
	if err != nil {
		if !p.Master && p.Key != nil && len(p.Key.Models) > 0 {
			return nil, t.NotFoundFor(model, p.Key.Allows)
		}
		return nil, err
	}
	if !p.Master && !p.Key.Allows(model) {
		return nil, apierror.Newf(http.StatusForbidden, apierror.KindPermission, "model_not_allowed",
			"API key %q may not use model %q; it may use: %s", p.Key.Name, model, strings.Join(p.Key.Models, ", "))
	}
	return r, nil
}
