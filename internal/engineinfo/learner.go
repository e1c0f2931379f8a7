// Package engineinfo learns what the gateway needs to know from the server
// behind each deployment, from that server itself: which engine it is
// (vLLM, SGLang, llama.cpp, Ollama, or another OpenAI-compatible server),
// the model's context length (prompt plus output tokens), and how to count
// a prompt with the engine's own tokenizer and chat template. The gateway
// never decides on a guess what the engine can tell it.
//
// Context length sources, in order:
//
//   - the model's context_window in the config;
//   - GET {base}/models: max_model_len (vLLM, SGLang), context_window or
//     context_length (other OpenAI-compatible servers) of the entry whose
//     id is the upstream model; owned_by names the engine;
//   - GET {root}/props: llama.cpp's per-slot n_ctx;
//   - GET {root}/get_model_info, then /get_server_info: SGLang's
//     context_length;
//   - POST {root}/api/show: Ollama's num_ctx parameter, else the model's
//     <arch>.context_length.
//
// {root} is the base URL without its trailing /v1. What is learned is kept
// until the engine behind the deployment changes: Refresh (a local engine
// that became ready) forgets and asks again at once, Recheck (a backend's
// passed health check) asks again while the old answer stays in use;
// otherwise answers are kept for ten minutes, and a server that gave none
// is asked again after a minute (an engine that was stopped, a backend
// that was down).
//
// Counting (Count) uses the engine's tokenizer endpoint, chosen by the
// engine found: vLLM and SGLang POST {root}/tokenize with the chat messages
// (chat template included), llama.cpp POST {root}/apply-template then
// POST {root}/tokenize with the rendered prompt. A server whose tokenizer
// cannot be used is logged once with the reason, shown in the models
// health listing, and asked again after ten minutes or a Refresh.
package engineinfo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"llmgate/internal/dialect"
	"llmgate/internal/provider"
)

// Length is a model's context length and where it was learned.
type Length struct {
	Tokens int
	Source string // "config context_window", "/v1/models max_model_len", "llama.cpp /props n_ctx", ...
}

// Kind names the engine behind a deployment, as far as it told.
type Kind string

// Engines the gateway tells apart. KindOther is an OpenAI-compatible
// server that did not say what it is.
const (
	KindOther    Kind = ""
	KindVLLM     Kind = "vllm"
	KindSGLang   Kind = "sglang"
	KindLlamaCpp Kind = "llamacpp"
	KindOllama   Kind = "ollama"
)

// Info is what is known of one deployment's engine.
type Info struct {
	Kind    Kind
	Context Length
	// Tokenizer is how prompts are counted there ("" until it has worked
	// once); NoTokenizer says why they cannot be, once that is known.
	Tokenizer   Method
	NoTokenizer string
	// Learned is when the engine was last asked (zero: never).
	Learned time.Time
}

const (
	fetchTimeout = 2 * time.Second
	keepFor      = 10 * time.Minute
	retryAfter   = time.Minute
	maxAnswer    = 4 << 20
)

// Options configure a Learner.
type Options struct {
	Logger *slog.Logger
	// OnKind, when set, hears (in its own goroutine) that a backend's
	// engine said what it is, when that changed: the router starts
	// reading the metrics of a vLLM, SGLang or llama.cpp server no
	// engine: preset named.
	OnKind func(backend string, k Kind)
}

// Learner caches what each deployment's engine said.
type Learner struct {
	now    func() time.Time
	log    *slog.Logger
	onKind func(backend string, k Kind)

	mu    sync.Mutex
	cache map[key]*entry
}

// key names a deployment: a backend (kept across reloads while its
// settings stay) and the model name it serves.
type key struct {
	b        *provider.Backend
	upstream string
}

type entry struct {
	once  chan struct{} // closed when the fetch in flight finished
	info  Info
	until time.Time
	// gen counts Refreshes, so that a fetch that started before one does
	// not overwrite what the refreshed fetch learned.
	gen int
	tok tokenizerState
}

// New returns a Learner.
func New(opt Options) *Learner {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Learner{now: time.Now, log: log, onKind: opt.OnKind, cache: map[key]*entry{}}
}

// KindOf returns the engine backend's server said it is ("" when it did
// not say, or was not asked yet).
func (l *Learner) KindOf(backend string) Kind {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.cache {
		if k.b.Name == backend && e.info.Kind != KindOther {
			return e.info.Kind
		}
	}
	return KindOther
}

// Lookup returns the context length of a model served by b as upstream:
// configured when positive (the model's context_window), else learned;
// Tokens is 0 when no source knows it. A first lookup asks the server
// (bounded by a short time-out); concurrent lookups share it.
func (l *Learner) Lookup(ctx context.Context, configured int, b *provider.Backend, upstream string) Length {
	if configured > 0 {
		return Length{Tokens: configured, Source: "config context_window"}
	}
	if b == nil || b.Dialect == dialect.Anthropic {
		return Length{} // Anthropic's API lists no context lengths: configure context_window
	}
	return l.lookup(ctx, b, upstream).Context
}

// lookup returns the deployment's info, asking the server when nothing
// current is known.
func (l *Learner) lookup(ctx context.Context, b *provider.Backend, upstream string) Info {
	k := key{b, upstream}
	for {
		l.mu.Lock()
		e := l.cache[k]
		now := l.now()
		if e != nil && e.once == nil && now.Before(e.until) {
			info := e.info
			l.mu.Unlock()
			return info
		}
		if e != nil && e.once != nil { // a fetch is in flight
			wait := e.once
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return Info{}
			}
		}
		if e == nil {
			e = &entry{}
			l.cache[k] = e
		}
		e.once = make(chan struct{})
		gen := e.gen
		l.mu.Unlock()
		l.fetchInto(ctx, e, gen, b, upstream)
	}
}

// fetchInto asks the server and stores the answer in e, unless a Refresh
// happened meanwhile (its own fetch then decides).
func (l *Learner) fetchInto(ctx context.Context, e *entry, gen int, b *provider.Backend, upstream string) {
	got := fetch(ctx, b, upstream)
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.gen == gen {
		l.storeLocked(e, got, b, upstream)
	}
	close(e.once)
	e.once = nil
}

// storeLocked keeps what the server said in e (l.mu held).
func (l *Learner) storeLocked(e *entry, got Info, b *provider.Backend, upstream string) {
	prev := e.info
	got.Tokenizer, got.NoTokenizer = prev.Tokenizer, prev.NoTokenizer
	if got.Kind != prev.Kind {
		got.Tokenizer, got.NoTokenizer = "", "" // another engine: its tokenizer is asked anew
		e.tok = tokenizerState{}
	}
	got.Learned = l.now()
	e.info, e.until = got, l.now().Add(keepFor)
	if got.Kind != prev.Kind && got.Kind != KindOther && l.onKind != nil {
		go l.onKind(b.Name, got.Kind)
	}
	if got.Context.Tokens == 0 {
		e.until = l.now().Add(retryAfter)
	}
	if prev.Context.Tokens != 0 && prev.Context.Tokens != got.Context.Tokens {
		l.log.Info("model context length changed", "backend", b.Name, "model", upstream,
			"was", prev.Context.Tokens, "now", got.Context.Tokens, "source", got.Context.Source)
	}
}

// Recheck asks b's server again about every model it was asked about,
// while lookups go on using what it said before: a passed health check
// calls it, so that a server restarted with another context (or another
// engine behind the same address) is known within one check interval,
// not when the ten minutes an answer is kept run out. A changed answer
// replaces the old one; an answer of nothing (the server did not say, or
// did not answer in time) keeps the old one until it expires. recovered
// says the backend was down before this check: a tokenizer that could not
// be used is then asked again at the next count. It returns when the
// answers are in or ctx ends.
func (l *Learner) Recheck(ctx context.Context, b *provider.Backend, recovered bool) {
	if b == nil || b.Dialect == dialect.Anthropic {
		return
	}
	type job struct {
		e        *entry
		gen      int
		upstream string
	}
	l.mu.Lock()
	var jobs []job
	for k, e := range l.cache {
		if k.b != b || e.once != nil { // an entry being asked now gets a current answer anyway
			continue
		}
		if recovered {
			e.tok.retryAt = time.Time{}
		}
		jobs = append(jobs, job{e, e.gen, k.upstream})
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := fetch(ctx, b, j.upstream)
			l.mu.Lock()
			defer l.mu.Unlock()
			if j.e.gen != j.gen || j.e.once != nil {
				return // a Refresh or lookup asked meanwhile: its answer is newer
			}
			if got.Context.Tokens == 0 && j.e.info.Context.Tokens != 0 {
				return // no answer is not news: keep what was said until it expires
			}
			l.storeLocked(j.e, got, b, j.upstream)
		}()
	}
	wg.Wait()
}

// Learn asks the server in the background when nothing is known about the
// deployment yet (or the last answer was none, a minute ago); it returns
// at once. The request path calls it so that a model's context length is
// learned without the request waiting for it.
func (l *Learner) Learn(configured int, b *provider.Backend, upstream string) {
	if configured > 0 || b == nil || b.Dialect == dialect.Anthropic {
		return
	}
	l.mu.Lock()
	e := l.cache[key{b, upstream}]
	due := e == nil || e.once == nil && !l.now().Before(e.until)
	l.mu.Unlock()
	if due {
		go l.lookup(context.Background(), b, upstream)
	}
}

// Refresh forgets what b's engine said and asks it again, for every
// model it was asked about: the engine behind b became ready, was
// restarted, or may have changed. It waits for the answers until ctx ends
// (pass a context that is already done, or use go, not to wait). Counts
// and fits made after it use what the engine says now.
func (l *Learner) Refresh(ctx context.Context, b *provider.Backend) {
	if b == nil || b.Dialect == dialect.Anthropic {
		return
	}
	l.mu.Lock()
	var models []string
	for k, e := range l.cache {
		if k.b != b {
			continue
		}
		e.gen++
		e.until = time.Time{}
		e.tok.retryAt = time.Time{}
		models = append(models, k.upstream)
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.lookup(context.WithoutCancel(ctx), b, m)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// RefreshNow is Refresh for one model, waiting for the answer (bounded by
// ctx): an engine that just became ready is asked before its first
// request is served, so that request is fitted with the engine's numbers.
func (l *Learner) RefreshNow(ctx context.Context, b *provider.Backend, upstream string) Info {
	if b == nil || b.Dialect == dialect.Anthropic {
		return Info{}
	}
	l.mu.Lock()
	if e := l.cache[key{b, upstream}]; e != nil {
		e.gen++
		e.until = time.Time{}
		e.tok.retryAt = time.Time{}
	}
	l.mu.Unlock()
	return l.lookup(ctx, b, upstream)
}

// Known returns a configured or cached context length without asking any
// server.
func (l *Learner) Known(configured int, b *provider.Backend, upstream string) Length {
	if configured > 0 {
		return Length{Tokens: configured, Source: "config context_window"}
	}
	return l.Info(b, upstream).Context
}

// Info returns what is known of a deployment's engine without asking it.
func (l *Learner) Info(b *provider.Backend, upstream string) Info {
	if b == nil {
		return Info{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.cache[key{b, upstream}]; e != nil && e.once == nil {
		return e.info
	}
	return Info{}
}

// fetch asks the server, source by source, until one names the model's
// context length: /v1/models (vLLM, SGLang, most OpenAI-compatible
// servers), then, for a server that did not say it is another engine,
// llama.cpp's /props, SGLang's native endpoints and Ollama's /api/show.
func fetch(ctx context.Context, b *provider.Backend, upstream string) Info {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	info := Info{Kind: presetKind(b.Engine)}
	if fromModels(ctx, b, upstream, &info) || ctx.Err() != nil {
		return info
	}
	if (info.Kind == KindOther || info.Kind == KindLlamaCpp) && fromProps(ctx, b, &info) {
		return info
	}
	if (info.Kind == KindOther || info.Kind == KindSGLang) && fromSGLang(ctx, b, &info) {
		return info
	}
	if info.Kind == KindOther || info.Kind == KindOllama {
		fromOllama(ctx, b, upstream, &info)
	}
	return info
}

// fromModels reads /v1/models: the engine its owned_by names, and the
// model's context length where the entry has one. It reports whether it
// found the length.
func fromModels(ctx context.Context, b *provider.Backend, upstream string, info *Info) bool {
	var list struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if !get(ctx, b, "/models", false, nil, &list) {
		return false
	}
	for _, m := range list.Data {
		var id, owner string
		_ = json.Unmarshal(m["id"], &id)
		if id != upstream && len(list.Data) > 1 {
			continue
		}
		_ = json.Unmarshal(m["owned_by"], &owner)
		if k := ownerKind(owner); k != KindOther && info.Kind == KindOther {
			info.Kind = k
		}
		if id != upstream {
			continue // llama.cpp serves its one model whatever the name: its context is in /props
		}
		for _, k := range []string{"max_model_len", "context_window", "context_length"} { // the order connect trusts them in
			if n := number(m[k]); n > 0 {
				info.Context = Length{Tokens: n, Source: "/v1/models " + k}
				return true
			}
		}
	}
	return false
}

// fromProps reads llama.cpp's /props (whose shape also says the server is
// llama.cpp).
func fromProps(ctx context.Context, b *provider.Backend, info *Info) bool {
	var props struct {
		NCtx    json.RawMessage `json:"n_ctx"`
		Default *struct {
			NCtx json.RawMessage `json:"n_ctx"`
		} `json:"default_generation_settings"`
		TotalSlots json.RawMessage `json:"total_slots"`
	}
	if !get(ctx, b, "/props", true, nil, &props) {
		return false
	}
	if props.Default != nil || len(props.TotalSlots) > 0 {
		info.Kind = KindLlamaCpp
	}
	n := 0
	if props.Default != nil {
		n = number(props.Default.NCtx)
	}
	if n <= 0 {
		n = number(props.NCtx)
	}
	if n <= 0 {
		return false
	}
	info.Context = Length{Tokens: n, Source: "llama.cpp /props n_ctx"}
	return true
}

// fromSGLang reads SGLang's /get_model_info, then /get_server_info.
func fromSGLang(ctx context.Context, b *provider.Backend, info *Info) bool {
	for _, path := range []string{"/get_model_info", "/get_server_info"} {
		var m map[string]json.RawMessage
		if !get(ctx, b, path, true, nil, &m) {
			continue
		}
		for _, k := range []string{"context_length", "max_model_len"} {
			if n := number(m[k]); n > 0 {
				info.Kind = KindSGLang
				info.Context = Length{Tokens: n, Source: "SGLang " + path + " " + k}
				return true
			}
		}
	}
	return false
}

// fromOllama reads Ollama's /api/show: the num_ctx the model runs with,
// else the context length of its architecture.
func fromOllama(ctx context.Context, b *provider.Backend, upstream string, info *Info) bool {
	var show struct {
		Parameters string                     `json:"parameters"`
		ModelInfo  map[string]json.RawMessage `json:"model_info"`
	}
	body, _ := json.Marshal(map[string]string{"model": upstream})
	if !get(ctx, b, "/api/show", true, body, &show) {
		return false
	}
	for _, line := range strings.Split(show.Parameters, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "num_ctx" {
			if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
				info.Kind = KindOllama
				info.Context = Length{Tokens: n, Source: "Ollama /api/show num_ctx"}
				return true
			}
		}
	}
	for k, v := range show.ModelInfo {
		if strings.HasSuffix(k, ".context_length") {
			if n := number(v); n > 0 {
				info.Kind = KindOllama
				info.Context = Length{Tokens: n, Source: "Ollama /api/show " + k}
				return true
			}
		}
	}
	return false
}

// presetKind is the engine a backend's engine: preset names.
func presetKind(preset string) Kind {
	switch preset {
	case "vllm":
		return KindVLLM
	case "sglang":
		return KindSGLang
	case "llamacpp":
		return KindLlamaCpp
	case "ollama":
		return KindOllama
	}
	return KindOther
}

// ownerKind is the engine a /v1/models owned_by names.
func ownerKind(owner string) Kind {
	switch strings.ToLower(owner) {
	case "vllm":
		return KindVLLM
	case "sglang":
		return KindSGLang
	case "llamacpp", "llama.cpp":
		return KindLlamaCpp
	case "ollama", "library":
		return KindOllama
	}
	return KindOther
}

// get fetches one source into v (GET, or POST with body); root puts path
// at the server root instead of after the base URL.
func get(ctx context.Context, b *provider.Backend, path string, root bool, body []byte, v any) bool {
	status, raw, err := call(ctx, b, path, root, body, maxAnswer)
	if err != nil || status != http.StatusOK {
		return false
	}
	return json.Unmarshal(bytes.TrimSpace(raw), v) == nil
}

// call sends one request to the server and reads at most limit bytes of
// its answer (more is an error).
func call(ctx context.Context, b *provider.Backend, path string, root bool, body []byte, limit int64) (int, []byte, error) {
	req, err := b.NewRequest(ctx, "", body, "")
	if err != nil {
		return 0, nil, err
	}
	if root {
		req.URL.Path = rootPath(req.URL.Path) + path
	} else {
		req.URL.Path = strings.TrimSuffix(req.URL.Path, "/") + path
	}
	resp, err := b.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return 0, nil, err
	}
	if int64(len(raw)) > limit {
		return 0, nil, errAnswerTooLarge
	}
	return resp.StatusCode, raw, nil
}

// rootPath is a base URL path without its trailing /v1.
func rootPath(p string) string {
	return strings.TrimSuffix(strings.TrimSuffix(p, "/"), "/v1")
}

// number reads a positive integer (also when written as a float).
func number(raw json.RawMessage) int {
	var f float64
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil || f <= 0 || f > 1<<31 {
		return 0
	}
	return int(f)
}
