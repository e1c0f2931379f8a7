// Package discover builds a configuration when the user gives none: it
// probes the ports local engines use by default and picks up cloud API keys
// from the environment.
package discover

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
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
}

// DefaultPorts are probed by zero-config start.
var DefaultPorts = []LocalPort{
	{8000, "vllm"}, {30000, "sglang"}, {8080, "llamacpp"}, {11434, "ollama"},
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
}

// Probe asks each local port for /v1/models concurrently, with a short
// time-out, and returns the ones that answered.
func Probe(ctx context.Context, host string, ports []LocalPort, timeout time.Duration) []Found {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: nil}}
	var mu sync.Mutex
	var out []Found
	var wg sync.WaitGroup
	for _, p := range ports {
		wg.Add(1)
		go func(p LocalPort) {
			defer wg.Done()
			base := fmt.Sprintf("http://%s:%d/v1", host, p.Port)
			models, err := listModels(ctx, client, base)
			if err != nil {
				return
			}
			mu.Lock()
			out = append(out, Found{Backend: fmt.Sprintf("%s-%d", p.Engine, p.Port), URL: base,
				Source: fmt.Sprintf("probe %s:%d", host, p.Port), Models: models})
			mu.Unlock()
		}(p)
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].URL < out[j].URL })
	return out
}

func listModels(ctx context.Context, c *http.Client, base string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, nil
}

// Build returns a configuration with the found local backends and the cloud
// backends whose keys are set. A model served by several places keeps the
// first (local before cloud).
func Build(local []Found, lookup func(string) (string, bool), clouds []Cloud) (*config.Config, []Found) {
	cfg := &config.Config{Backends: map[string]*config.Backend{}, Models: map[string]*config.Model{}, Source: "zero-config"}
	found := append([]Found(nil), local...)
	for _, f := range local {
		cfg.Backends[f.Backend] = &config.Backend{URL: f.URL}
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
	return cfg, found
}
