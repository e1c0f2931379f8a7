package config

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"llmgate/internal/preset"
)

// Balancing strategies among deployments of equal priority.
const (
	BalanceLeastOutstanding = "least_outstanding"
	BalanceWeightedRandom   = "weighted_random"
	BalanceLowestLatency    = "lowest_latency"
	// BalanceCacheAware prefers the deployment holding the longest prefix
	// of the request's prompt, within a load bound (engine metrics, else
	// requests in flight).
	BalanceCacheAware = "cache_aware"
	// BalanceLeastLoad prefers the least loaded engine by its own
	// metrics (requests waiting and running), else by requests in flight.
	BalanceLeastLoad = "least_load"
	// BalanceSession pins a conversation (a session header, the user
	// field, Anthropic metadata.user_id) to one deployment.
	BalanceSession = "session"
)

// Balancings lists the balancing strategies a model may name.
var Balancings = []string{BalanceLeastOutstanding, BalanceWeightedRandom, BalanceLowestLatency, BalanceCacheAware, BalanceLeastLoad, BalanceSession}

// Defaults of the engine-aware balancing settings.
const (
	DefaultEngineMetricsInterval = time.Second
	DefaultLoadFactor            = 1.25
	DefaultSessionHeader         = "X-Session-Id"
)

// Default active health check settings.
const (
	DefaultHealthInterval = 10 * time.Second
	DefaultHealthTimeout  = 2 * time.Second
)

// Deployment is one place a public model is served.
type Deployment struct {
	Backend       string `yaml:"backend"`
	UpstreamModel string `yaml:"upstream_model"` // default: the model's upstream name
	// Weight shares traffic among deployments of equal priority (default 1).
	Weight int `yaml:"weight"`
	// Priority orders groups of deployments: lower numbers are tried first;
	// higher ones only when every lower one failed or is unhealthy.
	Priority int `yaml:"priority"`
	// MaxConcurrency caps the requests this gateway has in flight to the
	// deployment (0: no cap); beyond it requests wait in the gateway's
	// fair queue, served in turn across keys by their priority.
	MaxConcurrency int `yaml:"max_concurrency"`
	// QueueTimeout bounds a request's wait in that queue (default 30s),
	// after which it is refused with 429 and Retry-After.
	QueueTimeout Duration `yaml:"queue_timeout"`
	// QueueWhenWaiting holds requests in the gateway's queue, even below
	// MaxConcurrency, while the engine reports more than this many
	// requests waiting in its own queue (0: off; needs the engine's
	// metrics).
	QueueWhenWaiting int `yaml:"queue_when_waiting"`
	// QueueReserve keeps this many of MaxConcurrency's slots for keys
	// with nothing in flight while more than one key is active, so that a
	// quiet key's request starts at once instead of waiting for another
	// key's requests to end (0: none).
	QueueReserve int `yaml:"queue_reserve"`
	line         int
	// fromModel marks a deployment made from the single-backend form, so
	// that errors name the key the user wrote.
	fromModel bool
}

// HealthCheck configures active health checks of a backend.
type HealthCheck struct {
	// Enabled defaults to true when the block is present.
	Enabled *bool `yaml:"enabled"`
	// Path is an absolute path on the backend's host ("/health"); the
	// default is the engine preset's health path, else the base URL's
	// /models.
	Path     string   `yaml:"path"`
	Interval Duration `yaml:"interval"`
	Timeout  Duration `yaml:"timeout"`
}

// UnmarshalYAML accepts "health_check: true" (checks with the defaults)
// as well as the mapping form.
func (h *HealthCheck) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var on bool
		if err := n.Decode(&on); err != nil {
			return fmt.Errorf("health_check must be true, false or a mapping {path, interval, timeout}, not %q", n.Value)
		}
		h.Enabled = &on
		return nil
	}
	type plain HealthCheck
	return n.Decode((*plain)(h))
}

// On reports whether active checks are enabled.
func (h *HealthCheck) On() bool { return h != nil && (h.Enabled == nil || *h.Enabled) }

// applyPreset fills what a provider or engine preset knows and the file left
// out: URL, dialect and the API key from the preset's variable.
func (c *Config) applyPreset(b *Backend) {
	if p, ok := preset.LookupProvider(b.Provider); ok {
		if b.URL == "" {
			b.URL = p.BaseURL
		}
		if b.Dialect == "" {
			b.Dialect = p.Dialect
		}
		if b.DropParams == nil {
			b.DropParams = p.DropParams
		}
		if b.APIKey == "" && p.APIKeyEnv != "" {
			lookup := c.lookup
			if lookup == nil {
				lookup = os.LookupEnv
			}
			if v, ok := lookup(p.APIKeyEnv); ok {
				b.APIKey = strings.TrimSpace(v)
			}
		}
	}
	if e, ok := preset.LookupEngine(b.Engine); ok {
		if b.URL == "" {
			b.URL = e.LocalURL()
		}
		if b.HealthCheck.On() && b.HealthCheck.Path == "" {
			b.HealthCheck.Path = e.HealthPath
		}
	}
	if h := b.HealthCheck; h != nil {
		if h.Interval <= 0 {
			h.Interval = Duration(DefaultHealthInterval)
		}
		if h.Timeout <= 0 {
			h.Timeout = Duration(DefaultHealthTimeout)
		}
	}
}

// validatePreset checks provider and engine names and that a cloud
// provider has a key.
func (c *Config) validatePreset(b *Backend, key string) error {
	le := func(k, format string, args ...any) error {
		return &LineError{Source: c.Source, Line: b.line, Key: key + k, Msg: fmt.Sprintf(format, args...)}
	}
	if b.Provider != "" && b.Engine != "" {
		return le("", "set provider (a cloud API) or engine (a local server), not both")
	}
	if b.Provider != "" {
		p, ok := preset.LookupProvider(b.Provider)
		if !ok {
			return le(".provider", "unknown provider %q%s; known: %s", b.Provider, didYouMean(b.Provider, preset.ProviderNames()), strings.Join(preset.ProviderNames(), ", "))
		}
		if b.APIKey == "" {
			return le(".api_key", "provider %s needs an API key: set %s or api_key", p.Name, p.APIKeyEnv)
		}
	}
	if b.Engine != "" {
		if _, ok := preset.LookupEngine(b.Engine); !ok {
			return le(".engine", "unknown engine %q%s; known: %s", b.Engine, didYouMean(b.Engine, preset.EngineNames()), strings.Join(preset.EngineNames(), ", "))
		}
	}
	if b.IdleTimeout < 0 || b.FirstByte < 0 || b.Timeout < 0 || b.ConnectTimeout < 0 {
		return le("", "time-outs must not be negative")
	}
	if h := b.HealthCheck; h.On() && h.Path != "" && !strings.HasPrefix(h.Path, "/") {
		return le(".health_check.path", "must be an absolute path such as /health, not %q", h.Path)
	}
	return nil
}

func didYouMean(s string, names []string) string {
	if near := Nearest(s, names); near != "" {
		return fmt.Sprintf(" (did you mean %q?)", near)
	}
	return ""
}

// DefaultQueueTimeout is how long a request waits in a deployment's fair
// queue when queue_timeout is not set.
const DefaultQueueTimeout = 30 * time.Second

// applyDeploymentDefaults turns the single-backend form into a deployment
// and fills weights and upstream names.
func (m *Model) applyDeploymentDefaults(backends map[string]*Backend) {
	if len(m.Deployments) == 0 && m.Backend != "" {
		m.Deployments = []*Deployment{{Backend: m.Backend, UpstreamModel: m.UpstreamModel, Weight: 1, line: m.line, fromModel: true}}
	}
	for _, d := range m.Deployments {
		if d == nil {
			continue
		}
		if d.UpstreamModel == "" {
			d.UpstreamModel = m.UpstreamModel
		}
		if d.Weight == 0 {
			d.Weight = 1
		}
		if d.QueueTimeout == 0 {
			d.QueueTimeout = Duration(DefaultQueueTimeout)
		}
		if d.line == 0 {
			d.line = m.line
		}
	}
	if m.Balancing == "" {
		m.Balancing = DefaultBalancing(m.Deployments, backends)
	}
}

// metricsEngines are the engine presets whose /metrics report their
// queues, which cache_aware balancing reads.
var metricsEngines = []string{"vllm", "sglang", "llamacpp"}

// DefaultBalancing is the balancing of a model that names none:
// cache_aware when it has several replicas (several deployments, or a
// backend whose replicas DNS discovery finds), all on engines that
// report their queues (engine: vllm, sglang or llamacpp), where it
// measured several times lower time to first token on agent workloads
// and about the same without shared prefixes (docs/routing.md); else
// least_outstanding.
func DefaultBalancing(deps []*Deployment, backends map[string]*Backend) string {
	replicas := len(deps) >= 2
	for _, d := range deps {
		if d == nil {
			return BalanceLeastOutstanding
		}
		b := backends[d.Backend]
		if b == nil || !slices.Contains(metricsEngines, b.Engine) {
			return BalanceLeastOutstanding
		}
		replicas = replicas || b.Discovery != ""
	}
	if !replicas {
		return BalanceLeastOutstanding
	}
	return BalanceCacheAware
}

// validateRouting checks a model's deployments, fallbacks and balancing.
func (c *Config) validateRouting(m *Model, key string, backendNames []string) error {
	le := func(line int, k, format string, args ...any) error {
		return &LineError{Source: c.Source, Line: line, Key: k, Msg: fmt.Sprintf(format, args...)}
	}
	if len(m.Deployments) == 0 {
		return le(m.line, key+".backend", "is required: name one of the backends (%s), or list deployments:", strings.Join(backendNames, ", "))
	}
	if m.Backend != "" && !m.Deployments[0].fromModel {
		return le(m.line, key, "set backend: or deployments:, not both")
	}
	for i, d := range m.Deployments {
		dk := fmt.Sprintf("%s.deployments[%d]", key, i)
		if d == nil {
			return le(m.line, dk, "is empty: give at least backend:")
		}
		if d.fromModel {
			dk = key
		}
		if d.Backend == "" {
			return le(d.line, dk+".backend", "is required: name one of the backends (%s)", strings.Join(backendNames, ", "))
		}
		if _, ok := c.Backends[d.Backend]; !ok {
			msg := fmt.Sprintf("unknown backend %q", d.Backend)
			if near := Nearest(d.Backend, backendNames); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			} else if len(backendNames) > 0 {
				msg += fmt.Sprintf("; defined backends: %s", strings.Join(backendNames, ", "))
			} else {
				msg += "; add it under backends:"
			}
			return le(d.line, dk+".backend", "%s", msg)
		}
		if d.Weight < 0 {
			return le(d.line, dk+".weight", "must be positive, not %d", d.Weight)
		}
		if d.Priority < 0 {
			return le(d.line, dk+".priority", "must be 0 or more (0 is tried first), not %d", d.Priority)
		}
		if d.MaxConcurrency < 0 {
			return le(d.line, dk+".max_concurrency", "must be 0 (no cap) or the requests the engine serves at once, not %d", d.MaxConcurrency)
		}
		if d.QueueTimeout < 0 {
			return le(d.line, dk+".queue_timeout", "must be positive (such as 30s), not %s", time.Duration(d.QueueTimeout))
		}
		if d.QueueReserve < 0 || d.QueueReserve > 0 && d.QueueReserve >= d.MaxConcurrency {
			return le(d.line, dk+".queue_reserve", "must be 0 (none) or fewer than max_concurrency (%d) slots kept for keys with nothing in flight, not %d", d.MaxConcurrency, d.QueueReserve)
		}
		if d.QueueWhenWaiting < 0 {
			return le(d.line, dk+".queue_when_waiting", "must be 0 (off) or a number of requests waiting in the engine, not %d", d.QueueWhenWaiting)
		}
	}
	if !slices.Contains(Balancings, m.Balancing) {
		return le(m.line, key+".balancing", "must be one of %s, not %q%s", strings.Join(Balancings, ", "), m.Balancing, didYouMean(m.Balancing, Balancings))
	}
	var modelNames []string // candidates for "did you mean", not the model itself
	for _, n := range sortedKeys(c.Models) {
		if n != m.Name {
			modelNames = append(modelNames, n)
		}
	}
	seen := map[string]bool{}
	for _, f := range m.Fallbacks {
		if f == m.Name {
			return le(m.line, key+".fallbacks", "a model cannot fall back to itself")
		}
		if _, ok := c.Models[f]; !ok {
			return le(m.line, key+".fallbacks", "unknown model %q%s; fallbacks name other public models", f, didYouMean(f, modelNames))
		}
		if seen[f] {
			return le(m.line, key+".fallbacks", "%q is listed twice", f)
		}
		seen[f] = true
	}
	return nil
}

// checkNested checks the keys of deployments and health_check blocks.
func checkNested(body *yaml.Node, kind, path, source string, check func(m *yaml.Node, kind, path string) error) error {
	if body.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(body.Content); i += 2 {
		k, v := body.Content[i], body.Content[i+1]
		switch {
		case kind == "model" && k.Value == "deployments":
			if v.Kind != yaml.SequenceNode {
				return &LineError{Source: source, Line: v.Line, Key: path + ".deployments", Msg: "must be a list of {backend, upstream_model, weight, priority}"}
			}
			for j, item := range v.Content {
				if err := check(item, "deployment", fmt.Sprintf("%s.deployments[%d]", path, j)); err != nil {
					return err
				}
			}
		case kind == "model" && k.Value == "reasoning" && v.Kind == yaml.MappingNode:
			if err := check(v, "reasoning", path+".reasoning"); err != nil {
				return err
			}
		case kind == "backend" && k.Value == "health_check" && v.Kind == yaml.MappingNode:
			if err := check(v, "health_check", path+".health_check"); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordDeploymentLines remembers where each deployment was written.
func recordDeploymentLines(body *yaml.Node, m *Model) {
	if body.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(body.Content); i += 2 {
		if body.Content[i].Value != "deployments" || body.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for j, item := range body.Content[i+1].Content {
			if j < len(m.Deployments) && m.Deployments[j] != nil {
				m.Deployments[j].line = item.Line
			}
		}
	}
}

// SameSettings reports whether two backends would behave identically,
// ignoring where in the file they were written; a reload keeps the
// connections and health state of a backend whose settings are the same.
// The TLS configuration is derived from the settings (ca_file and the
// rest) and holds functions no two loads share, so it is not compared
// itself.
func (b Backend) SameSettings(o Backend) bool {
	b.line, o.line = 0, 0
	b.TLS, o.TLS = nil, nil
	return reflect.DeepEqual(b, o)
}

// Routing tunes how failed attempts are retried and when a deployment is
// taken out of rotation. Every field is optional: zero keeps the default.
type Routing struct {
	// RetryBackoff is the first pause before trying the next deployment,
	// doubled per attempt with jitter (default 20ms).
	RetryBackoff   Duration       `yaml:"retry_backoff"`
	CircuitBreaker CircuitBreaker `yaml:"circuit_breaker"`
	// EngineMetricsInterval is how often the /metrics of engines behind
	// cache_aware and least_load models are read (default 1s); a reading
	// older than three intervals is not used.
	EngineMetricsInterval Duration `yaml:"engine_metrics_interval"`
	// LoadFactor bounds cache_aware's affinity: a deployment keeps the
	// requests whose prefix it holds while its load stays within this
	// many times its share of the group's load (default 1.25; at least 1).
	LoadFactor float64 `yaml:"load_factor"`
	// PrefixCacheTokens is the KV-cache capacity, in tokens, assumed per
	// engine when it does not report its own; it sizes the record of the
	// prefixes sent there (default 262144).
	PrefixCacheTokens int `yaml:"prefix_cache_tokens"`
	// SessionHeader names the request header whose value pins a
	// conversation under session balancing (default X-Session-Id).
	SessionHeader string `yaml:"session_header"`
}

// CircuitBreaker configures the per-deployment breakers (router.BreakerConfig).
type CircuitBreaker struct {
	// Enabled defaults to true; false never takes a deployment out for
	// failures (a 429's Retry-After is still honoured).
	Enabled *bool `yaml:"enabled"`
	// ConsecutiveFailures in a row open the breaker (default 5).
	ConsecutiveFailures float64 `yaml:"consecutive_failures"`
	// FailureRate (0–1] of recent requests opens it once MinRequests recent
	// requests were seen (defaults 0.5 and 10).
	FailureRate float64 `yaml:"failure_rate"`
	MinRequests float64 `yaml:"min_requests"`
	// HalfLife is how fast old outcomes fade (default 30s).
	HalfLife Duration `yaml:"half_life"`
	// OpenFor is the first open period (default 5s), doubled on repeated
	// trips up to OpenMax (default 2m).
	OpenFor Duration `yaml:"open_for"`
	OpenMax Duration `yaml:"open_max"`
	// TimeoutWeight is what one time-out counts as a failure, 0–1
	// (default 0.5: a slow backend is busy rather than broken).
	TimeoutWeight *float64 `yaml:"timeout_weight"`
	// RateLimitWait is how long a deployment rests after a 429 without
	// Retry-After (default 1s); RateLimitMax caps any Retry-After (1m).
	RateLimitWait Duration `yaml:"rate_limit_wait"`
	RateLimitMax  Duration `yaml:"rate_limit_max"`
}

// checkRoutingKeys checks the keys of the routing block and its
// circuit_breaker block.
func checkRoutingKeys(v *yaml.Node, check func(m *yaml.Node, kind, path string) error) error {
	if err := check(v, "routing", "routing"); err != nil {
		return err
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		if v.Content[i].Value == "circuit_breaker" && v.Content[i+1].Kind == yaml.MappingNode {
			if err := check(v.Content[i+1], "circuit_breaker", "routing.circuit_breaker"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Routing) validate(source string) error {
	le := func(key, format string, args ...any) error {
		return &LineError{Source: source, Key: "routing." + key, Msg: fmt.Sprintf(format, args...)}
	}
	cb := &r.CircuitBreaker
	for _, d := range []struct {
		key string
		v   Duration
	}{{"retry_backoff", r.RetryBackoff}, {"circuit_breaker.half_life", cb.HalfLife},
		{"circuit_breaker.open_for", cb.OpenFor}, {"circuit_breaker.open_max", cb.OpenMax},
		{"circuit_breaker.rate_limit_wait", cb.RateLimitWait}, {"circuit_breaker.rate_limit_max", cb.RateLimitMax}} {
		if d.v < 0 {
			return le(d.key, "must not be negative")
		}
	}
	if cb.ConsecutiveFailures < 0 {
		return le("circuit_breaker.consecutive_failures", "must not be negative (0 keeps the default, 5)")
	}
	if cb.FailureRate < 0 || cb.FailureRate > 1 {
		return le("circuit_breaker.failure_rate", "must be a share between 0 and 1, like 0.5, not %v", cb.FailureRate)
	}
	if cb.MinRequests < 0 {
		return le("circuit_breaker.min_requests", "must not be negative")
	}
	if w := cb.TimeoutWeight; w != nil && (*w < 0 || *w > 1) {
		return le("circuit_breaker.timeout_weight", "must be between 0 and 1, not %v", *w)
	}
	if cb.OpenFor > 0 && cb.OpenMax > 0 && cb.OpenMax < cb.OpenFor {
		return le("circuit_breaker.open_max", "(%s) must be at least open_for (%s)", time.Duration(cb.OpenMax), time.Duration(cb.OpenFor))
	}
	if r.EngineMetricsInterval < 0 {
		return le("engine_metrics_interval", "must not be negative")
	}
	if i := time.Duration(r.EngineMetricsInterval); i > 0 && i < 100*time.Millisecond {
		return le("engine_metrics_interval", "%s would read every engine's /metrics more than ten times a second; use 1s or so", i)
	}
	if r.LoadFactor != 0 && r.LoadFactor < 1 {
		return le("load_factor", "must be at least 1 (1 allows no imbalance, 1.25 is the default), not %v", r.LoadFactor)
	}
	if r.PrefixCacheTokens < 0 {
		return le("prefix_cache_tokens", "must not be negative (0 keeps the default, 262144)")
	}
	if time.Duration(r.RetryBackoff) > 10*time.Second {
		return le("retry_backoff", "%s is longer than a client will wait between attempts; use milliseconds, like 50ms", time.Duration(r.RetryBackoff))
	}
	return nil
}
