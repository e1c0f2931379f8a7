// Package discover builds a configuration when the user gives none: it
// probes the ports local engines use by default and picks up cloud API keys
// from the environment.
package discover

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/dialect"
)

// LocalPort is a port a local engine listens on by default.
type LocalPort struct {
	Port   int
	Engine string
	// KeyEnv is the variable the engine reads its --api-key from when the
	// flag is not given (vLLM VLLM_API_KEY, llama.cpp LLAMA_API_KEY): set
	// in the gateway's environment too, it is sent to an engine that
	// refuses the probe without a key.
	KeyEnv string
}

// DefaultPorts are probed by zero-config start.
var DefaultPorts = []LocalPort{
	{8000, "vllm", "VLLM_API_KEY"}, {30000, "sglang", ""}, {8080, "llamacpp", "LLAMA_API_KEY"}, {11434, "ollama", ""},
}

// Cloud is a cloud API recognised by its key variable.
type Cloud struct {
	Name    string
	EnvKey  string
	URL     string
	Dialect dialect.Dialect
	Models  []string // registered public models
}

// DefaultClouds lists the cloud backends registered when their key is set.
var DefaultClouds = []Cloud{
	{"openai", "OPENAI_API_KEY", "https://api.openai.com/v1", dialect.OpenAI, []string{"gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini"}},
	{"deepseek", "DEEPSEEK_API_KEY", "https://api.deepseek.com/v1", dialect.OpenAI, []string{"deepseek-chat", "deepseek-reasoner"}},
	{"dashscope", "DASHSCOPE_API_KEY", "https://dashscope.aliyuncs.com/compatible-mode/v1", dialect.OpenAI, []string{"qwen-plus", "qwen-max", "qwen-turbo"}},
}

// Found is one discovered backend and its models.
type Found struct {
	Backend string
	URL     string
	Source  string // "probe 127.0.0.1:8000" or "env DEEPSEEK_API_KEY"
	Models  []string
	// APIKey is the key the engine wanted, from its KeyEnv ("" for none).
	APIKey string
}

// ServedAs returns the names cfg serves f's models under, in f's order:
// a model id that is a file path (llama-server -m /models/x.gguf, vllm
// serve /models/x) is served under its ShortName when Build gave it one.
func ServedAs(cfg *config.Config, f Found) []string {
	names := make([]string, 0, len(f.Models))
	for _, id := range f.Models {
		name := id
		if short := ShortName(id); short != "" {
			if m := cfg.Models[short]; m != nil && m.Backend == f.Backend && m.UpstreamModel == id {
				name = short
			}
		}
		names = append(names, name)
	}
	return names
}

// ShortName is the name a client can type for a model id that is a file
// path: its last element without a .gguf extension ("Qwen3-8B-Q4_K_M" for
// "/models/Qwen3-8B-Q4_K_M.gguf"), or "" when the id is not a path (a
// Hugging Face id such as "Qwen/Qwen3-8B" keeps its slash: it is not one).
func ShortName(id string) string {
	isGGUF := len(id) > 5 && strings.EqualFold(id[len(id)-5:], ".gguf")
	if !isGGUF && !strings.HasPrefix(id, "/") && !strings.Contains(id, `\`) {
		return ""
	}
	base := id[strings.LastIndexAny(id, `/\`)+1:]
	if len(base) > 5 && strings.EqualFold(base[len(base)-5:], ".gguf") {
		base = base[:len(base)-5]
	}
	if base == id || strings.TrimSpace(base) != base || strings.HasPrefix(base, ".") {
		return ""
	}
	return base
}

// Refused is a local port where an HTTP server answered GET /v1/models
// with something other than a model list: most often an engine started
// with an API key, which zero-config cannot use.
type Refused struct {
	Addr   string // 127.0.0.1:8080
	Engine string // the engine that port is the default of
	Reason string // what it answered, and what to do
}

// Probe asks each local port for /v1/models concurrently, with a short
// time-out, and returns the ones that answered with a model list, and the
// ones where an HTTP server answered otherwise (a closed port is neither).
// A port that refuses the probe without a key is asked again with its
// engine's key variable when lookup finds it set.
func Probe(ctx context.Context, host string, ports []LocalPort, timeout time.Duration, lookup func(string) (string, bool)) ([]Found, []Refused) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: nil}}
	// A gateway without a config probes every few seconds: each probe's
	// connections close with it rather than idle until the engine drops them.
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var out []Found
	var refused []Refused
	var wg sync.WaitGroup
	for _, p := range ports {
		wg.Add(1)
		go func(p LocalPort) {
			defer wg.Done()
			addr := net.JoinHostPort(host, strconv.Itoa(p.Port))
			base := "http://" + addr + "/v1"
			source := "probe " + addr
			models, status, err := listModels(ctx, client, base, "")
			key, tried := "", ""
			if status == http.StatusUnauthorized || status == http.StatusForbidden {
				if v, ok := lookupKey(lookup, p.KeyEnv); ok {
					key, tried = v, p.KeyEnv
					models, status, err = listModels(ctx, client, base, key)
					source += ", key from $" + p.KeyEnv
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out = append(out, Found{Backend: fmt.Sprintf("%s-%d", p.Engine, p.Port), URL: base,
					Source: source, Models: models, APIKey: key})
			case status != 0:
				refused = append(refused, Refused{Addr: addr, Engine: p.Engine, Reason: refusal(status, err, p, base, tried)})
			}
		}(p)
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].URL < out[j].URL })
	sort.Slice(refused, func(i, j int) bool { return refused[i].Addr < refused[j].Addr })
	return out, refused
}

// Merge updates known with a later probe's answers: a backend new in now
// is added; a known backend that answered now takes now's model list (a
// model it no longer lists is gone: llama-server serves whatever it has
// loaded under any name, so an old name must not stay); a known backend
// that did not answer keeps its models (it may be restarting). added and
// removed hold what changed, each backend with those models only.
func Merge(known, now []Found) (merged, added, removed []Found) {
	merged = append([]Found(nil), known...)
	for _, n := range now {
		i := slices.IndexFunc(merged, func(k Found) bool { return k.Backend == n.Backend })
		if i < 0 {
			merged = append(merged, n)
			added = append(added, n)
			continue
		}
		k := merged[i]
		fresh := slices.DeleteFunc(slices.Clone(n.Models), func(m string) bool { return slices.Contains(k.Models, m) })
		gone := slices.DeleteFunc(slices.Clone(k.Models), func(m string) bool { return slices.Contains(n.Models, m) })
		if len(fresh) == 0 && len(gone) == 0 && n.APIKey == k.APIKey {
			continue
		}
		merged[i] = n
		if len(fresh) > 0 || n.APIKey != k.APIKey {
			added = append(added, Found{Backend: n.Backend, URL: n.URL, Source: n.Source, Models: fresh, APIKey: n.APIKey})
		}
		if len(gone) > 0 {
			removed = append(removed, Found{Backend: k.Backend, URL: k.URL, Source: k.Source, Models: gone})
		}
	}
	sort.Slice(merged, func(i, j int) bool { return merged[i].URL < merged[j].URL })
	return merged, added, removed
}

// lookupKey returns the non-blank value of the variable name, if any.
func lookupKey(lookup func(string) (string, bool), name string) (string, bool) {
	if name == "" || lookup == nil {
		return "", false
	}
	v, ok := lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// refusal says what an HTTP answer other than a model list means.
// tried names the key variable whose key was refused too ("" for none).
func refusal(status int, err error, p LocalPort, base, tried string) string {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		if tried != "" {
			return fmt.Sprintf("GET /v1/models answered %d %s, also with the key in $%s: that is not the key the engine was started with",
				status, http.StatusText(status), tried)
		}
		also := ""
		if p.KeyEnv != "" {
			also = " (or export " + p.KeyEnv + " with the engine's key where the gateway starts)"
		}
		return fmt.Sprintf("GET /v1/models answered %d %s: the engine wants an API key (it was started with --api-key); "+
			"give it in a config file (backends: {%s-%d: {url: %q, api_key: ${ENGINE_API_KEY}}} and a model on that backend) "+
			"and run serve -c with it%s", status, http.StatusText(status), p.Engine, p.Port, base, also)
	case http.StatusOK:
		return "GET /v1/models answered 200 but not with an OpenAI model list (" + err.Error() + "): is this an inference engine?"
	default:
		return fmt.Sprintf("GET /v1/models answered %d %s: not an OpenAI-compatible engine, or one still loading", status, http.StatusText(status))
	}
}

// listModels returns the model ids base's GET /models lists, sending key
// when not empty; on an error, the HTTP status when a server answered (0
// when none did).
func listModels(ctx context.Context, c *http.Client, base, key string) ([]string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/models", nil)
	if err != nil {
		return nil, 0, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, fmt.Errorf("status %d", resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("unreadable model list: %v", err)
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, resp.StatusCode, nil
}

// Build returns a configuration with the found local backends and the cloud
// backends whose keys are set. A model served by several places keeps the
// first (local before cloud). A local model whose id is a file path is
// registered under its ShortName instead (its requests still name the id
// upstream), unless another model has that name (an id always wins over a
// short name, the first short name over a later one).
func Build(local []Found, lookup func(string) (string, bool), clouds []Cloud) (*config.Config, []Found) {
	cfg := &config.Config{Backends: map[string]*config.Backend{}, Models: map[string]*config.Model{}, Source: "zero-config"}
	found := append([]Found(nil), local...)
	for _, f := range local {
		cfg.Backends[f.Backend] = &config.Backend{URL: f.URL, APIKey: f.APIKey}
		for _, m := range f.Models {
			if _, dup := cfg.Models[m]; !dup {
				cfg.Models[m] = &config.Model{Backend: f.Backend}
			}
		}
	}
	for _, c := range clouds {
		key, ok := lookup(c.EnvKey)
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			continue
		}
		cfg.Backends[c.Name] = &config.Backend{URL: c.URL, APIKey: key, Dialect: c.Dialect}
		for _, m := range c.Models {
			if _, dup := cfg.Models[m]; !dup {
				cfg.Models[m] = &config.Model{Backend: c.Name}
			}
		}
		found = append(found, Found{Backend: c.Name, URL: c.URL, Source: "env " + c.EnvKey, Models: c.Models})
	}
	addShortNames(cfg, local)
	return cfg, found
}

// addShortNames renames each found local model whose id is a path to its
// short name, once every id is registered.
func addShortNames(cfg *config.Config, found []Found) {
	for _, f := range found {
		for _, id := range f.Models {
			short := ShortName(id)
			if short == "" {
				continue
			}
			if _, taken := cfg.Models[short]; taken {
				continue
			}
			if m := cfg.Models[id]; m == nil || m.Backend != f.Backend {
				continue // another backend serves this id
			}
			// The short name replaces the path: clients see one name per
			// model, and a request naming the path gets the 404 that
			// lists the short one.
			delete(cfg.Models, id)
			cfg.Models[short] = &config.Model{Backend: f.Backend, UpstreamModel: id}
		}
	}
}
