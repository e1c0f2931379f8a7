// Package server is llmgate's HTTP edge: routes, method checks,
// authentication, reading the body within its limit, decoding it once into
// the client dialect's request value, and handing it to the relay. Errors
// raised here are rendered in the endpoint's own envelope. The relay, the
// response store and the table holder are made by the gateway and given
// to New.
package server

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/codec"
	"llmgate/internal/engineinfo"
	"llmgate/internal/jsonscan"
	"llmgate/internal/keys"
	"llmgate/internal/policy"
	"llmgate/internal/redact"
	"llmgate/internal/relay"
	"llmgate/internal/respstore"
	"llmgate/internal/router"
	"llmgate/internal/usage"
)

// Options configures a Server.
type Options struct {
	// Tables holds the routing table being served; each request runs on
	// the one it holds when the request arrives.
	Tables *router.Current
	// Relay serves each decoded model request: resolve, admission,
	// attempts, the ledger record.
	Relay        *relay.Relay
	Verifier     *keys.Verifier
	Logger       *slog.Logger
	MaxBodyBytes int64
	// Ready reports readiness for /readyz; nil means always ready.
	Ready func() error
	// Precheck, when set, refuses a key the admission just refused before
	// its body is read (policy.Prechecker).
	Precheck policy.Prechecker
	// Middleware wraps the whole handler, outermost first (request ids,
	// tracing, metrics).
	Middleware []func(http.Handler) http.Handler
	// Responses, when set, serves GET/DELETE /v1/responses/{id} from the
	// store the relay keeps Responses API answers in.
	Responses *respstore.Store
	// Engines knows what each deployment's engine said: /v1/models lists
	// the context lengths.
	Engines *engineinfo.Learner
	// BodyReadTimeout bounds the time a client takes to send a body
	// (default 60 s); MaxBodyReadsPerKey caps the bodies one key may be
	// sending at once (0: no cap).
	BodyReadTimeout    time.Duration
	MaxBodyReadsPerKey int
	// MaxLargeBodyMemory caps the bytes of request bodies of LargeBody or
	// more in flight at once (0: no cap); a body finding no room waits up
	// to BodyReadTimeout, then gets a 503.
	MaxLargeBodyMemory int64
	// AccessLog, when set, is called for every request that leaves no
	// ledger record (those with one reach the Observer): a refusal before
	// a model was resolved (401, 404, 400, 405), a models list, an unknown
	// route. Health checks, /metrics and the console's files are not
	// included.
	AccessLog func(AccessEntry)
}

// AccessEntry is what the access log says of a request without a ledger
// record. KeyID is "none" before a key was verified; the key itself is
// never included.
type AccessEntry struct {
	Method, Path, RequestID string
	Status                  int
	Code                    string // the error code, for a refusal
	KeyID                   string
	Latency                 time.Duration
}

// Server serves the gateway API.
type Server struct {
	tables    *router.Current
	verifier  *keys.Verifier
	log       *slog.Logger
	maxBody   int64
	ready     func() error
	mux       *http.ServeMux
	handler   http.Handler
	relay     *relay.Relay
	precheck  policy.Prechecker // refuses a key before its body is read; nil: none
	engines   *engineinfo.Learner
	accessLog func(AccessEntry)
	console   bool // the web console is mounted at /ui/
	bodyTime  time.Duration
	bodyReads perKey
	large     *largeBodies // nil: no cap
	started   time.Time
}

// New returns a Server.
func New(opt Options) *Server {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 32 << 20
	}
	if opt.BodyReadTimeout <= 0 {
		opt.BodyReadTimeout = 60 * time.Second
	}
	s := &Server{tables: opt.Tables, relay: opt.Relay, precheck: opt.Precheck, verifier: opt.Verifier, log: opt.Logger, maxBody: opt.MaxBodyBytes, engines: opt.Engines, accessLog: opt.AccessLog,
		bodyTime: opt.BodyReadTimeout, bodyReads: perKey{limit: opt.MaxBodyReadsPerKey}, large: newLargeBodies(opt.MaxLargeBodyMemory, opt.BodyReadTimeout),
		ready: opt.Ready, started: time.Now()}
	s.routes(opt.Responses)
	s.handler = s.identify(s.mux)
	if s.accessLog != nil {
		s.handler = s.logUnrecorded(s.handler)
	}
	for i := len(opt.Middleware) - 1; i >= 0; i-- {
		s.handler = opt.Middleware[i](s.handler)
	}
	return s
}

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
func (s *Server) Handle(pattern string, h http.Handler) {
	if strings.HasPrefix(pattern, "/ui") {
		s.console = true // GET / points to it
	}
	s.mux.Handle(pattern, h)
}

// Authenticate exposes the gateway's key check to mounted handlers.
func (s *Server) Authenticate(r *http.Request) (keys.Principal, error) { return s.authenticate(nil, r) }

func (s *Server) routes(responses *respstore.Store) {
	m := http.NewServeMux()
	for path, d := range map[string]codec.Dialect{
		"/v1/chat/completions":      codec.Chat,
		"/v1/completions":           codec.Completions,
		"/v1/embeddings":            codec.Embeddings,
		"/v1/rerank":                codec.Rerank,
		"/v2/rerank":                codec.Rerank, // Cohere's v2 path
		"/v1/responses":             codec.Responses,
		"/v1/messages":              codec.Messages,
		"/v1/messages/count_tokens": codec.CountTokens,
	} {
		m.Handle(path, s.endpoint(http.MethodPost, always(d), s.serveModel(d)))
	}
	// The models list answers OpenAI and Anthropic clients, each in its own
	// shape and error envelope.
	m.Handle("/v1/models", s.endpoint(http.MethodGet, modelsDialect, s.handleModels))
	m.Handle("/v1/models/", s.endpoint(http.MethodGet, modelsDialect, s.handleModel))
	m.Handle("/v1/responses/", respstore.Handler(responses, s.authenticate))
	m.HandleFunc("/healthz", s.handleHealth)
	m.HandleFunc("/readyz", s.handleReady)
	m.HandleFunc("/", s.handleNotFound)
	s.mux = m
}

func always(d codec.Dialect) func(*http.Request) codec.Dialect {
	return func(*http.Request) codec.Dialect { return d }
}

// modelsDialect is the dialect of a models request: Anthropic's when it
// carries anthropic-version.
func modelsDialect(r *http.Request) codec.Dialect {
	if anthropicRequest(r) {
		return codec.Messages
	}
	return codec.Chat
}

// endpoint wraps a handler with the method check and authentication, each
// refusal in the envelope of the request's dialect.
func (s *Server) endpoint(method string, dialect func(*http.Request) codec.Dialect, h func(http.ResponseWriter, *http.Request, keys.Principal)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := dialect(r)
		if r.Method != method {
			w.Header().Set("Allow", method)
			e := apierror.Newf(http.StatusMethodNotAllowed, apierror.KindInvalidRequest, "method_not_allowed",
				"%s %s is not supported: use %s", r.Method, r.URL.Path, method)
			refused(w, e)
			codec.WriteError(d, w, e)
			return
		}
		p, err := s.authenticate(w, r)
		if err != nil {
			refused(w, err)
			codec.WriteError(d, w, err)
			return
		}
		if aw, ok := w.(*accessWriter); ok {
			aw.keyID = p.KeyID()
		}
		h(w, r, p)
	})
}

// serveModel reads, decodes and relays a request of dialect d.
func (s *Server) serveModel(d codec.Dialect) func(http.ResponseWriter, *http.Request, keys.Principal) {
	return func(w http.ResponseWriter, r *http.Request, p keys.Principal) {
		c := &relay.Call{ID: s.idOf(w, r), ClientID: clientRequestID(r), Start: time.Now(), Principal: p, Table: s.tables.Load()}
		if c.ClientID != "" {
			c.ID = usage.NewID() // the ledger's key is never the client's
		}
		buf := getBuf()
		defer func() {
			// After the relay, since the request value points into the
			// buffer; and never when a backend's Transport got the bytes
			// as they are, which it may read after the answer came back.
			if c.BodyGiven() {
				return
			}
			putBuf(buf)
		}()
		var err error
		if s.precheck != nil && (r.ContentLength < 0 || r.ContentLength > precheckAbove) {
			// A large body from a key just refused: refused without being
			// read (and without a ledger record; the access log has it).
			err = s.precheck.Precheck(p)
		}
		if err == nil {
			err = s.readBody(w, r, buf, p)
			c.Read = time.Now()
		}
		if err == nil {
			// A large body takes its room once read, before it is decoded:
			// not from its declared length, or a client trickling a few
			// bodies it declared large would hold the room of everyone's
			// (reading is bounded per key, by max_body_reads_per_key).
			var release func()
			if release, err = s.large.take(r.Context(), int64(buf.Len())); release != nil {
				defer release()
			}
		}
		if err != nil {
			// The rest of the body is not read: the connection cannot be
			// reused, and the server must not wait to drain it.
			w.Header().Set("Connection", "close")
		} else {
			c.Req, err = codec.Decode(d, buf.Bytes())
		}
		if err != nil {
			refused(w, err)
			codec.WriteError(d, w, err)
			return
		}
		if d.Anthropic() {
			c.Req.AnthropicBeta = r.Header.Get("Anthropic-Beta")
		}
		s.relay.Serve(w, r, c)
		if aw, ok := w.(*accessWriter); ok {
			aw.recorded, aw.code = c.Recorded()
		}
	}
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuf() *bytes.Buffer {
	b := bufPool.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putBuf(b *bytes.Buffer) {
	if b.Cap() <= 1<<20 {
		bufPool.Put(b)
	}
}

// precheckAbove is the body size above which a key just refused for its
// limits is refused again before the body is read. Smaller bodies are read
// and decoded, so that their refusal names the model and has its ledger
// record.
const precheckAbove = 64 << 10

// firstBytes is how much of a body is read before the rest, to refuse a
// model outside the key's allow-list without reading a large body.
const firstBytes = 4 << 10

// readBody reads the request body into a pooled buffer. The buffer grows
// as bytes arrive, never from a declared Content-Length; the body must
// arrive within the body read time-out, and a key may be sending only so
// many bodies at once. A model outside the key's allow-list named in the
// first bytes is refused before the rest is read (the full reading checks
// it again).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer, p keys.Principal) error {
	if r.ContentLength > s.maxBody {
		return tooLarge(s.maxBody)
	}
	if r.ContentLength == 0 {
		return nil
	}
	done, err := s.bodyReads.take(p.KeyID())
	if err != nil {
		return err
	}
	defer done()
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.bodyTime)) == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	body := http.MaxBytesReader(w, r.Body, s.maxBody)
	if _, err := buf.ReadFrom(io.LimitReader(body, firstBytes)); err != nil {
		return s.bodyError(err)
	}
	if buf.Len() == firstBytes {
		if err := allowedPrefix(buf.Bytes(), p); err != nil {
			return err
		}
		if _, err := buf.ReadFrom(body); err != nil {
			return s.bodyError(err)
		}
	}
	return nil
}

// allowedPrefix refuses a model outside the key's allow-list when the
// first bytes of the body already name it as a top-level member.
func allowedPrefix(prefix []byte, p keys.Principal) error {
	if p.Master || p.Key == nil || len(p.Key.Models) == 0 {
		return nil
	}
	var model string
	_ = jsonscan.Members(prefix, func(key []byte, escaped bool, val jsonscan.Span) bool {
		if string(key) == "model" && !escaped {
			model, _ = jsonscan.String(prefix, val)
			return false
		}
		return true
	})
	if model == "" || p.Key.Allows(model) {
		return nil
	}
	return policy.NotAllowed(p, model)
}

func (s *Server) bodyError(err error) error {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return tooLarge(s.maxBody)
	case errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded):
		return apierror.Newf(http.StatusRequestTimeout, apierror.KindTimeout, "body_read_timeout",
			"the request body did not arrive within %s: send it at once, or raise body_read_timeout in the config", s.bodyTime)
	}
	return apierror.InvalidRequest("body_read_error",
		"could not read the whole request body (%v): the body was shorter than its Content-Length, its chunked encoding was malformed, or the connection closed mid-body; send the complete body", err)
}

// perKey counts the bodies each key is sending.
type perKey struct {
	limit int
	mu    sync.Mutex
	n     map[string]int
}

// take counts one more body for key, or refuses when the key is at its cap.
func (b *perKey) take(key string) (done func(), err error) {
	if b.limit <= 0 {
		return func() {}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n[key] >= b.limit {
		e := apierror.Newf(http.StatusTooManyRequests, apierror.KindRateLimit, "too_many_bodies",
			"this key is already sending %d request bodies at once (max_body_reads_per_key): wait for them to finish", b.limit)
		e.Header = http.Header{"Retry-After": {"1"}}
		return nil, e
	}
	if b.n == nil {
		b.n = map[string]int{}
	}
	b.n[key]++
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.n[key]--; b.n[key] <= 0 {
			delete(b.n, key)
		}
	}, nil
}

func tooLarge(limit int64) error {
	return apierror.Newf(http.StatusRequestEntityTooLarge, apierror.KindInvalidRequest, "body_too_large",
		"request body is larger than the gateway's limit of %d MiB: send a smaller request, or raise max_body_bytes in the config", limit>>20)
}

// idOf returns the id the answer's X-Request-Id echoes, setting it the
// first time: the client's own when it sent a sane one, else a new
// gateway-made id (which then also keys the request's ledger record).
func (s *Server) idOf(w http.ResponseWriter, r *http.Request) string {
	h := w.Header()
	if v := h["X-Request-Id"]; len(v) == 1 {
		return v[0]
	}
	id := clientRequestID(r)
	if id == "" {
		id = usage.NewID()
	}
	h["X-Request-Id"] = []string{id}
	return id
}

// clientRequestID returns the client's X-Request-Id when it is sane
// (printable ASCII, at most 128 bytes), else "".
func clientRequestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 && printable(id) {
		return id
	}
	return ""
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		if err := s.ready(); err != nil {
			// /readyz needs no key; the reason (which may name files) is
			// shown to the master key and always logged.
			msg := "not ready: the usage ledger cannot write to its database (the gateway log says why; ask with the master key to see it here)"
			if p, aerr := s.authenticate(w, r); aerr == nil && p.Master {
				msg = "not ready: " + redact.Secrets(err.Error())
			}
			openai.WriteError(w, apierror.New(http.StatusServiceUnavailable, apierror.KindOverloaded, "not_ready", msg))
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ready"}`))
}

// accessWriter notes what the access log says of a request that leaves no
// ledger record.
type accessWriter struct {
	http.ResponseWriter
	status   int
	code     string
	keyID    string
	recorded bool // the relay settled a record: the Observer logs it
}

func (a *accessWriter) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
	a.ResponseWriter.WriteHeader(status)
}

func (a *accessWriter) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (a *accessWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// refused notes the error code of a refusal for the access log.
func refused(w http.ResponseWriter, err error) {
	if aw, ok := w.(*accessWriter); ok {
		aw.code = apierror.From(err).Code
	}
}

// identify gives every answer its X-Request-Id before a handler runs (all
// but the health probe and the metrics scrape), so that any error, from
// the API, the admin API, the console or the stored responses, can name the
// request whose log line holds the cause.
func (s *Server) identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p != "/healthz" && p != "/metrics" {
			s.idOf(w, r)
		}
		next.ServeHTTP(w, r)
	})
}

// quietPaths are not access-logged: probes and scrapes every few seconds.
func quietPath(p string) bool {
	return p == "/healthz" || p == "/readyz" || p == "/metrics" || strings.HasPrefix(p, "/ui/") || p == "/ui"
}

// logUnrecorded gives every request without a ledger record its access
// log line.
func (s *Server) logUnrecorded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if quietPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		id := s.idOf(w, r)
		aw := &accessWriter{ResponseWriter: w, keyID: "none"}
		next.ServeHTTP(aw, r)
		if aw.recorded {
			return
		}
		if aw.status == 0 {
			aw.status = http.StatusOK
		}
		s.accessLog(AccessEntry{Method: r.Method, Path: r.URL.Path, RequestID: id, Status: aw.status,
			Code: aw.code, KeyID: aw.keyID, Latency: time.Since(start)})
	})
}
