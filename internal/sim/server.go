package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxBodyBytes bounds request bodies; long-context prompts stay far below.
const maxBodyBytes = 32 << 20

// Server is an in-process simulated vLLM server. It implements
// http.Handler; Close stops its engine loops.
type Server struct {
	cfg    Config
	models []*engine
	byName map[string]*engine
	mux    *http.ServeMux
	start  time.Time
	closed chan struct{}
	once   sync.Once

	rngMu sync.Mutex
	rng   *mrand.Rand

	llama llamaCpp // the llama.cpp face's state (Config.Engine llamacpp)
}

// New validates cfg and starts one engine loop per model.
func New(cfg Config) (*Server, error) {
	cfg.Models = append([]ModelConfig(nil), cfg.Models...)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	s := &Server{cfg: cfg, byName: map[string]*engine{}, start: time.Now(),
		closed: make(chan struct{}), rng: mrand.New(mrand.NewPCG(uint64(seed), uint64(seed)>>1|1))}
	for _, mc := range cfg.Models {
		e := newEngine(mc)
		s.models = append(s.models, e)
		s.byName[mc.Name] = e
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /ping", s.handleHealth)
	mux.HandleFunc("GET /version", s.handleVersion)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	if s.llamaCpp() {
		mux.HandleFunc("GET /v1/models", s.auth(s.handleLlamaModels))
		mux.HandleFunc("POST /tokenize", s.handleLlamaTokenize)
		s.mountLlamaCpp(mux)
	} else {
		mux.HandleFunc("GET /v1/models", s.auth(s.handleModels))
		// vLLM serves its tokenizer at the root, outside /v1 (and outside
		// --api-key's protection).
		mux.HandleFunc("POST /tokenize", s.handleTokenize)
	}
	mux.HandleFunc("POST /v1/chat/completions", s.auth(s.handleChat))
	mux.HandleFunc("POST /v1/completions", s.auth(s.handleCompletion))
	mux.HandleFunc("POST /v1/embeddings", s.auth(s.handleEmbeddings))
	for _, p := range []string{"/v1/rerank", "/rerank", "/v2/rerank"} {
		mux.HandleFunc("POST "+p, s.auth(s.handleRerank))
	}
	mux.HandleFunc("/", s.auth(func(w http.ResponseWriter, r *http.Request) {
		// FastAPI's answers for unknown routes and wrong methods.
		switch r.URL.Path {
		case "/health", "/ping", "/version", "/metrics", "/v1/models", "/tokenize", "/v1/rerank", "/rerank", "/v2/rerank",
			"/v1/chat/completions", "/v1/completions", "/v1/embeddings":
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
		default:
			writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		}
	}))
	s.mux = mux
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops the engine loops. Requests in flight end: streams are cut
// and waiting non-streaming requests get a 503. Close is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closed)
		for _, e := range s.models {
			e.close()
		}
	})
}

// Models returns the served model configurations after defaults.
func (s *Server) Models() []ModelConfig {
	out := make([]ModelConfig, len(s.models))
	for i, e := range s.models {
		out[i] = e.mc
	}
	return out
}

// Load returns the running and waiting request counts of a model, as
// vllm:num_requests_running and vllm:num_requests_waiting report them.
func (s *Server) Load(model string) (running, waiting int, ok bool) {
	e := s.byName[model]
	if e == nil {
		return 0, 0, false
	}
	running, waiting = e.m.load()
	return running, waiting, true
}

// Ready reports whether the startup delay has elapsed.
func (s *Server) Ready() bool { return time.Since(s.start) >= s.cfg.StartupDelay }

// Listen serves a new simulator on addr (for example "127.0.0.1:0") until
// ctx is cancelled or stop is called. It returns the address actually bound.
// stop shuts the HTTP server down gracefully (in-flight requests get up to
// five seconds) and then closes the engines; it is safe to call twice.
func Listen(ctx context.Context, addr string, cfg Config) (bound string, stop func(), err error) {
	s, err := New(cfg)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.Close()
		return "", nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
			s.Close()
			_ = hs.Close()
		})
	}
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-s.closed:
		}
	}()
	return ln.Addr().String(), stop, nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !s.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.cfg.Version})
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	ms := make([]*modelMetrics, len(s.models))
	for i, e := range s.models {
		ms[i] = e.m
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if s.llamaCpp() {
		_ = writeLlamaMetrics(w, ms[0])
		return
	}
	_ = writeMetrics(w, ms)
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	now := time.Now().Unix()
	list := modelList{Object: "list", Data: []modelCard{}}
	for _, e := range s.models {
		list.Data = append(list.Data, modelCard{
			ID: e.mc.Name, Object: "model", Created: now, OwnedBy: "vllm", Root: e.mc.Root,
			MaxModelLen: e.mc.MaxModelLen,
			Permission: []modelPermission{{
				ID: "modelperm-" + randomHex(), Object: "model_permission", Created: now,
				AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
			}},
		})
	}
	writeJSON(w, http.StatusOK, list)
}

// auth enforces the API key the way vLLM does: only on /v1 paths, with a
// plain {"error": "Unauthorized"} body.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.APIKey == "" {
		return h
	}
	want := []byte("Bearer " + s.cfg.APIKey)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodOptions && (strings.HasPrefix(r.URL.Path, "/v1") || strings.HasPrefix(r.URL.Path, "/v2")) &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
			return
		}
		h(w, r)
	}
}

// apiError is an error rendered in vLLM's ErrorResponse envelope.
type apiError struct {
	status int
	typ    string
	msg    string
	param  string
	header http.Header
	// prompt and nCtx are llama.cpp's n_prompt_tokens and n_ctx on a
	// request that does not fit the context.
	prompt, nCtx int
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: fmt.Sprintf(format, args...), param: param}
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	for k, v := range e.header {
		w.Header()[k] = v
	}
	body := errorResponse{Error: errorInfo{Message: e.msg, Type: e.typ, Code: e.status, NPromptTokens: e.prompt, NCtx: e.nCtx}}
	if e.param != "" {
		p := e.param
		body.Error.Param = &p
	}
	writeJSON(w, e.status, body)
}

// marshal encodes v like Python's json module does for vLLM: without
// escaping <, > and & as \u003c and friends, and without a trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		http.Error(w, `{"error":{"message":"internal error encoding the response","type":"InternalServerError","param":null,"code":500}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// decodeBody reads a JSON request body into v.
func decodeBody(r *http.Request, v any) *apiError {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return badRequest("", "could not read the request body: %v", err)
	}
	if len(body) > maxBodyBytes {
		return badRequest("", "request body exceeds %d bytes", maxBodyBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		var se stopError
		if errors.As(err, &se) {
			return badRequest("stop", "%s", se.Error())
		}
		return badRequest("", "invalid JSON body: %v", err)
	}
	return nil
}

// precheck answers requests that cannot run: still loading, or shut down.
func (s *Server) precheck() *apiError {
	select {
	case <-s.closed:
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError",
			msg: "the simulated engine is shutting down"}
	default:
	}
	if !s.Ready() {
		left := s.cfg.StartupDelay - time.Since(s.start)
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError",
			msg:    fmt.Sprintf("the simulated engine is still loading weights (startup delay, %.1fs left); poll /health until it returns 200", left.Seconds()),
			header: http.Header{"Retry-After": {fmt.Sprint(int(left.Seconds()) + 1)}}}
	}
	return nil
}

// modelRequest is a request body that names a model.
type modelRequest interface{ model() string }

func (r *chatRequest) model() string       { return r.Model }
func (r *completionRequest) model() string { return r.Model }
func (r *embeddingRequest) model() string  { return r.Model }
func (r *tokenizeRequest) model() string   { return r.Model }

// begin runs the checks every model endpoint starts with: the engine can
// take requests, the body decodes into req, and its model is served. On a
// failure it has answered the client and returns nil.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, req modelRequest) *engine {
	if e := s.precheck(); e != nil {
		writeAPIError(w, e)
		return nil
	}
	if e := decodeBody(r, req); e != nil {
		writeAPIError(w, e)
		return nil
	}
	eng, e := s.lookup(req.model())
	if e != nil {
		writeAPIError(w, e)
		return nil
	}
	return eng
}

// lookup resolves the requested model; an empty name means the first
// served model, as in vLLM.
func (s *Server) lookup(name string) (*engine, *apiError) {
	if name == "" || s.llamaCpp() { // llama.cpp serves its model whatever the name
		return s.models[0], nil
	}
	if e := s.byName[name]; e != nil {
		return e, nil
	}
	return nil, &apiError{status: http.StatusNotFound, typ: "NotFoundError",
		msg: fmt.Sprintf("The model `%s` does not exist.", name), param: "model"}
}

// injectFault draws the 429 and 500 fault rates.
func (s *Server) injectFault() *apiError {
	f := s.cfg.Faults
	if f.Fail429Rate == 0 && f.Fail500Rate == 0 {
		return nil
	}
	x := s.float()
	switch {
	case x < f.Fail429Rate:
		return &apiError{status: http.StatusTooManyRequests, typ: "TooManyRequestsError",
			msg:    "Too many requests (injected by the simulator's --fail-429-rate); retry after the Retry-After delay",
			header: http.Header{"Retry-After": {"1"}}}
	case x < f.Fail429Rate+f.Fail500Rate:
		return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError",
			msg: "Internal server error (injected by the simulator's --fail-500-rate)"}
	}
	return nil
}

func (s *Server) float() float64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64()
}

func (s *Server) uint64() uint64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Uint64()
}

func (s *Server) intN(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.IntN(n)
}

func (s *Server) queueFull(e *engine) *apiError {
	typ := "ServiceUnavailableError"
	if s.cfg.QueueFullStatus == http.StatusTooManyRequests {
		typ = "TooManyRequestsError"
	}
	return &apiError{status: s.cfg.QueueFullStatus, typ: typ,
		msg: fmt.Sprintf("The waiting queue of model `%s` is full (%d requests waiting, --max-queue %d); retry later or lower the request rate",
			e.mc.Name, e.mc.MaxQueue, e.mc.MaxQueue),
		header: http.Header{"Retry-After": {"1"}}}
}

// randomHex returns 32 hex digits, like Python's uuid4().hex.
func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}
