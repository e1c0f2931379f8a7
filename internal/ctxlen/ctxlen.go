// Package ctxlen learns each model's context length (prompt plus output
// tokens) from the servers that serve it, so the gateway can fit a
// client's output limit into the context instead of passing on the
// engine's refusal — agents such as Claude Code and opencode ask for 32000
// output tokens whatever the model. Sources, in order:
//
//   - the model's context_window in the config;
//   - GET {base}/models: max_model_len (vLLM, SGLang), context_length or
//     context_window (other OpenAI-compatible servers) of the entry whose
//     id is the upstream model;
//   - GET {root}/props: llama.cpp's per-slot n_ctx;
//   - GET {root}/get_model_info, then /get_server_info: SGLang's
//     context_length;
//   - POST {root}/api/show: Ollama's num_ctx parameter, else the model's
//     <arch>.context_length.
//
// {root} is the base URL without its trailing /v1. Answers are cached; a
// server that gives none is asked again after a minute (an engine that was
// stopped, a backend that was down).
package ctxlen

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/provider"
)

// Length is a model's context length and where it was learned.
type Length struct {
	Tokens int
	Source string // "config", "/v1/models max_model_len", "llama.cpp /props n_ctx", ...
}

const (
	fetchTimeout = 2 * time.Second
	keepFor      = 10 * time.Minute
	retryAfter   = time.Minute
	maxAnswer    = 4 << 20
)

// Learner caches context lengths per deployment.
type Learner struct {
	now func() time.Time

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
	len   Length
	until time.Time
}

// New returns a Learner.
func New() *Learner {
	return &Learner{now: time.Now, cache: map[key]*entry{}}
}

// Lookup returns the context length of a model served by b as upstream:
// configured when positive (the model's context_window), else learned;
// Tokens is 0 when no source knows it. A first lookup asks the server
// (bounded by a short time-out); concurrent lookups share it.
func (l *Learner) Lookup(ctx context.Context, configured int, b *provider.Backend, upstream string) Length {
	if configured > 0 {
		return Length{Tokens: configured, Source: "config context_window"}
	}
	if b == nil || b.Dialect == config.DialectAnthropic {
		return Length{} // Anthropic's API lists no context lengths: configure context_window
	}
	k := key{b, upstream}
	for {
		l.mu.Lock()
		e := l.cache[k]
		now := l.now()
		if e != nil && e.once == nil && now.Before(e.until) {
			l.mu.Unlock()
			return e.len
		}
		if e != nil && e.once != nil { // a fetch is in flight
			wait := e.once
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return Length{}
			}
		}
		e = &entry{once: make(chan struct{})}
		l.cache[k] = e
		l.mu.Unlock()

		got := fetch(ctx, b, upstream)
		l.mu.Lock()
		e.len, e.until = got, l.now().Add(keepFor)
		if got.Tokens == 0 {
			e.until = l.now().Add(retryAfter)
		}
		close(e.once)
		e.once = nil
		l.mu.Unlock()
		return got
	}
}

// Learn asks the server in the background when nothing is known about the
// deployment yet (or the last answer was none, a minute ago); it returns
// at once. The request path calls it so that a model's context length is
// learned without the request waiting for it.
func (l *Learner) Learn(configured int, b *provider.Backend, upstream string) {
	if configured > 0 || b == nil || b.Dialect == config.DialectAnthropic {
		return
	}
	l.mu.Lock()
	e := l.cache[key{b, upstream}]
	due := e == nil || e.once == nil && !l.now().Before(e.until)
	l.mu.Unlock()
	if due {
		go l.Lookup(context.Background(), configured, b, upstream)
	}
}

// Known returns a configured or cached context length without asking any
// server.
func (l *Learner) Known(configured int, b *provider.Backend, upstream string) Length {
	if configured > 0 {
		return Length{Tokens: configured, Source: "config context_window"}
	}
	if b == nil {
		return Length{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.cache[key{b, upstream}]; e != nil && e.once == nil {
		return e.len
	}
	return Length{}
}

// fetch asks the server, source by source.
func fetch(ctx context.Context, b *provider.Backend, upstream string) Length {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	var list struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if get(ctx, b, "/models", false, nil, &list) {
		for _, m := range list.Data {
			var id string
			_ = json.Unmarshal(m["id"], &id)
			if id != upstream {
				continue
			}
			for _, k := range []string{"max_model_len", "context_window", "context_length"} { // the order connect trusts them in
				if n := number(m[k]); n > 0 {
					return Length{Tokens: n, Source: "/v1/models " + k}
				}
			}
		}
	}
	if ctx.Err() != nil {
		return Length{}
	}
	var props struct {
		NCtx    json.RawMessage `json:"n_ctx"`
		Default struct {
			NCtx json.RawMessage `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if get(ctx, b, "/props", true, nil, &props) {
		if n := number(props.Default.NCtx); n > 0 {
			return Length{Tokens: n, Source: "llama.cpp /props n_ctx"}
		}
		if n := number(props.NCtx); n > 0 {
			return Length{Tokens: n, Source: "llama.cpp /props n_ctx"}
		}
	}
	for _, path := range []string{"/get_model_info", "/get_server_info"} {
		var info map[string]json.RawMessage
		if get(ctx, b, path, true, nil, &info) {
			for _, k := range []string{"context_length", "max_model_len"} {
				if n := number(info[k]); n > 0 {
					return Length{Tokens: n, Source: "SGLang " + path + " " + k}
				}
			}
		}
	}
	var show struct {
		Parameters string                     `json:"parameters"`
		ModelInfo  map[string]json.RawMessage `json:"model_info"`
	}
	body, _ := json.Marshal(map[string]string{"model": upstream})
	if get(ctx, b, "/api/show", true, body, &show) {
		for _, line := range strings.Split(show.Parameters, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "num_ctx" {
				if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
					return Length{Tokens: n, Source: "Ollama /api/show num_ctx"}
				}
			}
		}
		for k, v := range show.ModelInfo {
			if strings.HasSuffix(k, ".context_length") {
				if n := number(v); n > 0 {
					return Length{Tokens: n, Source: "Ollama /api/show " + k}
				}
			}
		}
	}
	return Length{}
}

// get fetches one source into v (GET, or POST with body); root puts path
// at the server root instead of after the base URL.
func get(ctx context.Context, b *provider.Backend, path string, root bool, body []byte, v any) bool {
	req, err := b.NewRequest(ctx, "", body, "")
	if err != nil {
		return false
	}
	if root {
		req.URL.Path = strings.TrimSuffix(strings.TrimSuffix(req.URL.Path, "/"), "/v1") + path
	} else {
		req.URL.Path = strings.TrimSuffix(req.URL.Path, "/") + path
	}
	resp, err := b.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil || resp.StatusCode != http.StatusOK {
		return false
	}
	return json.Unmarshal(bytes.TrimSpace(raw), v) == nil
}

// number reads a positive integer (also when written as a float).
func number(raw json.RawMessage) int {
	var f float64
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil || f <= 0 || f > 1<<31 {
		return 0
	}
	return int(f)
}
