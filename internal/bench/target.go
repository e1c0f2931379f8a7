package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Endpoint names the OpenAI API a target is benchmarked through.
const (
	EndpointChat        = "chat"
	EndpointCompletions = "completions"
)

// Target is one model behind one OpenAI-compatible base URL: the unit the
// matrix compares (the same model direct and through a gateway are two
// targets).
type Target struct {
	// Name labels the target in every report; defaults to the model name.
	Name string `json:"name" yaml:"name"`
	// BaseURL is the API root, e.g. http://127.0.0.1:8000/v1.
	BaseURL string `json:"base_url" yaml:"base_url"`
	// APIKey is sent as a Bearer token. It is never written to reports.
	APIKey string `json:"-" yaml:"api_key"`
	// APIKeyEnv names an environment variable holding the key.
	APIKeyEnv string `json:"api_key_env,omitempty" yaml:"api_key_env"`
	// Model is the model name sent in each request.
	Model string `json:"model" yaml:"model"`
	// Endpoint is "chat" (default) or "completions".
	Endpoint string `json:"endpoint" yaml:"endpoint"`
	// Headers are extra HTTP headers sent with every request.
	Headers map[string]string `json:"-" yaml:"headers"`
	// Server names the serving software (vllm, sglang, llamacpp, ...). When
	// empty it is read from the model list's owned_by field.
	Server string `json:"server,omitempty" yaml:"server"`
	// Direct, on a target that goes through a gateway, names the target
	// that serves the same model directly: bench then reports what the
	// gateway adds (see PairTargets, which also infers obvious pairs).
	Direct string `json:"direct,omitempty" yaml:"direct"`
	// IsGateway is set when the target is a gateway: it names a Direct
	// partner, or its server answered as llmgate does.
	IsGateway bool `json:"gateway,omitempty" yaml:"-"`
}

// URL returns the full request URL for the target's endpoint.
func (t *Target) URL() string {
	base := strings.TrimRight(t.BaseURL, "/")
	if t.Endpoint == EndpointCompletions {
		return base + "/completions"
	}
	return base + "/chat/completions"
}

// Backend is a short label for the server behind the target, such as
// "vllm@127.0.0.1:8000", used in the CSV's backend column.
func (t *Target) Backend() string {
	host := t.BaseURL
	if u, err := url.Parse(t.BaseURL); err == nil && u.Host != "" {
		host = u.Host
	}
	if t.Server != "" {
		return t.Server + "@" + host
	}
	return host
}

// StatusError is a server's answer other than 200, with the message of
// its error body.
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

// ListModels returns the model ids served at baseURL (GET {base}/models),
// used when no model is named, as vLLM's bench does.
func ListModels(ctx context.Context, baseURL, apiKey string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/models", nil)
	if err != nil {
		return nil, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	tr := newTransport(1)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return nil, fmt.Errorf("list models: %w", &StatusError{Status: resp.StatusCode, Message: errorMessage(b)})
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// detectServer fills Server from GET {base}/models: engines report
// themselves in owned_by ("vllm", "sglang", "llamacpp", ...). Failure is
// not an error; the label just stays the host.
func (t *Target) detectServer(ctx context.Context, client *http.Client) {
	if t.Server != "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(t.BaseURL, "/")+"/models", nil)
	if err != nil {
		return
	}
	if t.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+t.APIKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list) != nil {
		return
	}
	for _, m := range list.Data {
		if m.ID == t.Model && m.OwnedBy != "" && len(m.OwnedBy) <= 40 {
			t.Server = m.OwnedBy
			return
		}
	}
}

// Normalize fills defaults and resolves the API key: an explicit key wins,
// then api_key_env, then LLMGATE_API_KEY, then OPENAI_API_KEY.
func (t *Target) Normalize(getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	if t.BaseURL == "" {
		return errors.New("target has no base_url: set --base-url or base_url in the config")
	}
	u, err := url.Parse(t.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("base_url %q is not an http(s) URL such as http://127.0.0.1:8000/v1", t.BaseURL)
	}
	if t.Model == "" {
		return fmt.Errorf("target %q has no model: set --model or model in the config", t.BaseURL)
	}
	switch t.Endpoint {
	case "", "chat", "chat/completions":
		t.Endpoint = EndpointChat
	case "completions":
		t.Endpoint = EndpointCompletions
	default:
		return fmt.Errorf("target %q: endpoint %q must be chat or completions", t.Model, t.Endpoint)
	}
	if t.Name == "" {
		t.Name = t.Model
	}
	if t.APIKey == "" && t.APIKeyEnv != "" {
		t.APIKey = getenv(t.APIKeyEnv)
		if t.APIKey == "" {
			return fmt.Errorf("target %q: environment variable %s named by api_key_env is empty", t.Name, t.APIKeyEnv)
		}
	}
	if t.APIKey == "" {
		t.APIKey = getenv("LLMGATE_API_KEY")
	}
	if t.APIKey == "" {
		t.APIKey = getenv("OPENAI_API_KEY")
	}
	return nil
}

// FileConfig is the layout of a --config file (YAML or JSON).
type FileConfig struct {
	Targets []Target `yaml:"targets"`
}

// LoadTargets parses a YAML or JSON config listing targets. Unknown fields
// are an error so a misspelt key is not silently ignored.
func LoadTargets(r io.Reader, getenv func(string) string) ([]Target, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var fc FileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config is empty: list targets under \"targets:\"")
		}
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if len(fc.Targets) == 0 {
		return nil, errors.New("config lists no targets: add entries under \"targets:\"")
	}
	seen := map[string]bool{}
	for i := range fc.Targets {
		if err := fc.Targets[i].Normalize(getenv); err != nil {
			return nil, fmt.Errorf("targets[%d]: %w", i, err)
		}
		if seen[fc.Targets[i].Name] {
			return nil, fmt.Errorf("targets[%d]: duplicate name %q; give each target a unique name", i, fc.Targets[i].Name)
		}
		seen[fc.Targets[i].Name] = true
	}
	for i, t := range fc.Targets {
		if t.Direct == "" {
			continue
		}
		if t.Direct == t.Name || !seen[t.Direct] {
			return nil, fmt.Errorf("targets[%d]: direct: %q must name another target of this file (the same model served without the gateway)", i, t.Direct)
		}
		for _, d := range fc.Targets {
			if d.Name == t.Direct && d.Direct != "" {
				return nil, fmt.Errorf("targets[%d]: direct: %q names a target that itself goes through a gateway (it has direct: %q)", i, t.Direct, d.Direct)
			}
		}
	}
	return fc.Targets, nil
}

// TargetsFromFlags builds one target per model at one base URL.
func TargetsFromFlags(baseURL, apiKey string, models []string, endpoint string, getenv func(string) string) ([]Target, error) {
	if len(models) == 0 {
		return nil, errors.New("no model given: pass --model (repeatable) or --config")
	}
	var out []Target
	for _, m := range models {
		t := Target{BaseURL: baseURL, APIKey: apiKey, Model: m, Endpoint: endpoint}
		if err := t.Normalize(getenv); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
