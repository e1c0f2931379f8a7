// Package config loads llmgate's YAML configuration: ${ENV} expansion,
// defaults, backend URL normalization and validation with errors that name
// the key and the line.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"llmgate/internal/dialect"
)

// Defaults applied when the file leaves a setting out.
const (
	DefaultListen       = "127.0.0.1:4000"
	DefaultDatabase     = "llmgate.db"
	DefaultMaxBodyBytes = 32 << 20
)

// DefaultShutdownTimeout is how long a stopping gateway lets requests in
// flight finish when shutdown_timeout is not set.
const DefaultShutdownTimeout = 30 * time.Second

// ShutdownWait is the configured shutdown_timeout, or its default.
func (c *Config) ShutdownWait() time.Duration {
	if c == nil || c.ShutdownTimeout <= 0 {
		return DefaultShutdownTimeout
	}
	return time.Duration(c.ShutdownTimeout)
}

// DefaultMaxConnections caps the client connections open at once when
// max_connections is not set.
const DefaultMaxConnections = 4096

// Config is the whole gateway configuration. Models, backends and engines
// live here; keys and usage live in the database.
type Config struct {
	Listen   string `yaml:"listen"`
	Database string `yaml:"database"`
	// MaxBodyBytes limits request bodies (default 32 MiB).
	MaxBodyBytes int64  `yaml:"max_body_bytes"`
	LogFormat    string `yaml:"log_format"` // text (default) or json
	// MaxConnections caps the client connections open at once (default
	// DefaultMaxConnections; 0 = no cap): more wait to be accepted.
	MaxConnections *int `yaml:"max_connections"`
	// TLSCertFile and TLSKeyFile (PEM) make the listener serve HTTPS; the
	// files are read again when they change (certificate renewal).
	TLSCertFile string              `yaml:"tls_cert_file"`
	TLSKeyFile  string              `yaml:"tls_key_file"`
	Backends    map[string]*Backend `yaml:"backends"`
	Models      map[string]*Model   `yaml:"models"`
	// Engines are local model servers started on demand (see engines.go).
	Engines map[string]*Engine `yaml:"engines"`
	// Redis (redis://host:port/db) shares rate-limit counters, concurrency
	// slots and budget spend across replicas; empty = in process memory.
	Redis string `yaml:"redis"`
	// RedisPrefix starts every Redis key (default "llmgate:"), so several
	// gateway deployments can share one Redis.
	RedisPrefix string `yaml:"redis_prefix"`
	// RedisFailOpen admits requests without any limit or budget while Redis
	// is unreachable, instead of each replica enforcing its share of each
	// limit locally (the default).
	RedisFailOpen bool `yaml:"redis_fail_open"`
	// RedisReplicas fixes the number of replicas sharing the limits, which
	// sets each one's local share while Redis is unreachable; 0 (default)
	// counts live replicas through heartbeats in Redis.
	RedisReplicas int `yaml:"redis_replicas"`
	// Retention deletes raw usage records older than this (hourly rollups
	// are kept); zero keeps everything.
	Retention Duration `yaml:"retention"`
	// ResponsesTTL is how long Responses API responses are kept for
	// previous_response_id and GET /v1/responses/{id} (default 30 days;
	// a conversation in use is kept as long as its newest response).
	ResponsesTTL Duration `yaml:"responses_ttl"`
	// StoreResponses turns that storage off when false (then only full
	// conversations in input work, as with store: false).
	StoreResponses *bool `yaml:"store_responses"`
	// SpoolDir is the usage ledger's journal: every record is appended
	// there before the answer's last byte, and waits there while the
	// database is unreachable (default: named after a SQLite database
	// file, beside it - llmgate.db.spool -, else ./llmgate-spool). One
	// gateway process per directory.
	SpoolDir string `yaml:"spool_dir"`
	// SpoolFsync fsyncs every journal append, so records also survive a
	// power loss or kernel crash, not only a killed process (default
	// false: a disk flush per group of requests costs milliseconds).
	SpoolFsync bool `yaml:"spool_fsync"`
	// ShutdownTimeout bounds how long a stopping gateway (SIGTERM, SIGINT)
	// lets requests in flight, streams included, finish before it closes
	// them; zero means DefaultShutdownTimeout.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// Routing tunes retries and the per-deployment circuit breakers.
	Routing Routing `yaml:"routing"`
	// Features switch the access log, console and metrics key.
	Features `yaml:",inline"`

	// Source names where the configuration came from, for messages.
	Source string `yaml:"-"`
	// Warnings are what the file says that is accepted but ignored (the
	// settings of earlier versions, see retiredKeys), one message each,
	// naming the line; the gateway logs them at start and reload.
	Warnings []string `yaml:"-"`
	// lookup reads the environment for preset API key variables.
	lookup func(string) (string, bool)
	// lines holds the line of each top-level key (see accounting.go).
	lines map[string]int
}

// Backend is one upstream server or cloud API.
type Backend struct {
	Name    string            `yaml:"-"`
	URL     string            `yaml:"url"`
	APIKey  string            `yaml:"api_key"`
	Dialect dialect.Dialect   `yaml:"dialect"` // openai (default) or anthropic
	Headers map[string]string `yaml:"headers"`
	// Timeouts; zero means the default.
	ConnectTimeout Duration `yaml:"connect_timeout"` // default 5s
	FirstByte      Duration `yaml:"first_byte_timeout"`
	Timeout        Duration `yaml:"timeout"` // whole request, default none
	// IdleTimeout bounds the gap between two stream events; zero for none.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// Provider and Engine name presets (see internal/preset) that fill in
	// the URL, dialect, API key variable and health path.
	Provider    string       `yaml:"provider"`
	Engine      string       `yaml:"engine"`
	HealthCheck *HealthCheck `yaml:"health_check"`
	// CAFile (PEM) adds certificate authorities to the system's for an
	// https:// backend with a private CA; ClientCertFile and ClientKeyFile
	// (PEM) present a client certificate (mutual TLS); TLSSkipVerify turns
	// certificate checks off (testing only: anyone on the path can then
	// read the API key).
	CAFile         string `yaml:"ca_file"`
	ClientCertFile string `yaml:"client_cert_file"`
	ClientKeyFile  string `yaml:"client_key_file"`
	TLSSkipVerify  bool   `yaml:"tls_skip_verify"`
	// DropParams are top-level request members removed before a request
	// goes to this backend: parameters it rejects, such as top_k on
	// OpenAI's API ("Unrecognized request argument"). Unset, the provider
	// preset's list applies (openai: top_k); [] removes nothing. Fields the
	// gateway decides on (GatewayDecidedFields) cannot be listed.
	DropParams []string `yaml:"drop_params"`
	// Discovery finds the backend's replicas in DNS (discovery.go): "dns"
	// resolves the URL's host to its addresses, "srv" looks up the SRV
	// records _<DiscoverySRV>._tcp.<host>; each address becomes a
	// deployment of the backend's models. Empty: the URL is one server.
	Discovery string `yaml:"discovery"`
	// DiscoveryInterval is how often the name is resolved again (default
	// 10s).
	DiscoveryInterval Duration `yaml:"discovery_interval"`
	// DiscoverySRV is the SRV service (a Kubernetes port name) that
	// discovery: srv looks up (default "http").
	DiscoverySRV string `yaml:"discovery_srv"`
	// DiscoveryResolver is a DNS server (host:port) to ask instead of the
	// system's resolver.
	DiscoveryResolver string `yaml:"discovery_resolver"`
	// InferenceExtension sends the Gateway API Inference Extension's
	// headers (x-gateway-inference-fairness-id, -objective) to the backend.
	InferenceExtension bool `yaml:"inference_extension"`
	// HostName, Address and Unavailable are set on the backends discovery
	// makes (never in the file): the name the URL had (sent as the Host
	// header and the TLS server name), the address that replaced it, and,
	// for a name that resolved to no address, why the backend takes no
	// requests.
	HostName    string `yaml:"-"`
	Address     string `yaml:"-"`
	Unavailable string `yaml:"-"`
	// BaseURL is URL after normalization (set by Validate).
	BaseURL string `yaml:"-"`
	// TLS is the client TLS configuration those settings make (set by
	// Validate; nil for the defaults).
	TLS  *tls.Config `yaml:"-"`
	line int
}

// Model is one public model name and where it is served: either one
// backend (backend/upstream_model) or a list of deployments.
type Model struct {
	Name          string `yaml:"-"`
	Backend       string `yaml:"backend"`
	UpstreamModel string `yaml:"upstream_model"` // default: the public name
	// Engine names the engine serving this model, for the models an engine
	// lists; never set in the file.
	Engine string `yaml:"-"`
	// Deployments lists every place the model is served. ApplyDefaults
	// turns the single-backend form into one deployment.
	Deployments []*Deployment `yaml:"deployments"`
	// Fallbacks are other public models tried in order when every
	// deployment failed.
	Fallbacks []string `yaml:"fallbacks"`
	// Balancing picks among deployments of equal priority:
	// least_outstanding (default), weighted_random or lowest_latency.
	Balancing string `yaml:"balancing"`
	// Prices in USD per 1M tokens; every ledger record carries its cost.
	InputPrice       float64 `yaml:"input_price"`
	OutputPrice      float64 `yaml:"output_price"`
	CachedInputPrice float64 `yaml:"cached_input_price"` // default: InputPrice
	// Limits for the model across all keys; zero = unlimited.
	RPM            int64 `yaml:"rpm"`
	TPM            int64 `yaml:"tpm"`
	MaxConcurrency int64 `yaml:"max_concurrency"`
	// ContextWindow is the model's context length in tokens (prompt plus
	// output); zero when unknown. It bounds the budget reservation of a
	// request that sets no output limit.
	ContextWindow int `yaml:"context_window"`
	// FitOutputLimit lowers a request's output limit to what the context
	// leaves after its prompt (default on); off, such a request is a 400
	// naming the numbers.
	FitOutputLimit *bool `yaml:"fit_output_limit"`
	// Reasoning and SystemMessages shape the requests translated for the
	// model (see translation.go).
	Reasoning      *Reasoning `yaml:"reasoning"`
	SystemMessages string     `yaml:"system_messages"`
	// AnthropicBillingHeader is "remove" (default) or "keep": whether
	// Claude Code's x-anthropic-billing-header line stays in the system
	// prompt of the model's requests translated for a chat backend.
	AnthropicBillingHeader string `yaml:"anthropic_billing_header"`
	line                   int
}

// FitsOutput reports whether output limits are fitted to the context.
func (m *Model) FitsOutput() bool { return m.FitOutputLimit == nil || *m.FitOutputLimit }

// tlsSettingError names the backend setting at fault (".ca_file") and why.
type tlsSettingError struct{ key, msg string }

// clientTLS builds the backend's client TLS configuration, or nil when it
// uses the defaults.
func (b *Backend) clientTLS() (*tls.Config, *tlsSettingError) {
	if b.CAFile == "" && b.ClientCertFile == "" && b.ClientKeyFile == "" && !b.TLSSkipVerify {
		return nil, nil
	}
	if !strings.HasPrefix(b.BaseURL, "https://") {
		return nil, &tlsSettingError{"", "ca_file, client_cert_file, client_key_file and tls_skip_verify apply to https:// backends only; this one is " + b.BaseURL}
	}
	cfg := &tls.Config{InsecureSkipVerify: b.TLSSkipVerify}
	if b.CAFile != "" {
		pem, err := os.ReadFile(b.CAFile)
		if err != nil {
			return nil, &tlsSettingError{".ca_file", err.Error()}
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &tlsSettingError{".ca_file", fmt.Sprintf("%s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", b.CAFile)}
		}
		cfg.RootCAs = pool
	}
	if (b.ClientCertFile == "") != (b.ClientKeyFile == "") {
		return nil, &tlsSettingError{".client_cert_file", "client_cert_file and client_key_file go together: give both"}
	}
	if b.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(b.ClientCertFile, b.ClientKeyFile)
		if err != nil {
			return nil, &tlsSettingError{".client_cert_file", fmt.Sprintf("cannot load the client certificate and key: %v", err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ConnectionLimit is the cap on client connections open at once, 0 for none.
func (c *Config) ConnectionLimit() int {
	if c.MaxConnections == nil {
		return DefaultMaxConnections
	}
	return *c.MaxConnections
}

// DefaultResponsesTTL is how long stored responses are kept by default
// (what OpenAI keeps them for).
const DefaultResponsesTTL = 30 * 24 * time.Hour

// ResponsesStorage reports whether Responses API responses are stored and
// for how long.
func (c *Config) ResponsesStorage() (bool, time.Duration) {
	if c.StoreResponses != nil && !*c.StoreResponses {
		return false, 0
	}
	if c.ResponsesTTL > 0 {
		return true, time.Duration(c.ResponsesTTL)
	}
	return true, DefaultResponsesTTL
}

// LineError is a configuration error tied to a line of the file.
type LineError struct {
	Source string
	Line   int
	Key    string
	Msg    string
}

func (e *LineError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
	} else {
		b.WriteString("config")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads, expands, defaults and validates a configuration. source names
// the file in error messages.
func Load(r io.Reader, source string) (*Config, error) {
	return LoadWithEnv(r, source, os.LookupEnv)
}

// LoadWithEnv is Load with an injectable environment lookup.
func LoadWithEnv(r io.Reader, source string, lookup func(string) (string, bool)) (*Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", source, err)
	}
	data, err = expandText(data, source, lookup)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, syntaxError(data, err, source)
	}
	cfg := &Config{Source: source, lookup: lookup}
	if len(root.Content) == 0 { // empty file
		if err := cfg.ApplyEnv(lookup); err != nil {
			return nil, err
		}
		cfg.ApplyDefaults()
		return cfg, cfg.Validate()
	}
	doc := root.Content[0]
	warnings, err := checkKnownKeys(doc, source)
	if err != nil {
		return nil, err
	}
	if err := checkTypes(doc, source); err != nil {
		return nil, err
	}
	if err := doc.Decode(cfg); err != nil {
		return nil, decodeError(err, source)
	}
	cfg.Source = source
	cfg.lookup = lookup
	cfg.Warnings = warnings
	recordLines(doc, cfg)
	if err := cfg.ApplyEnv(lookup); err != nil {
		return nil, err
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// GatewayDecidedFields are the request members the gateway decides on
// (routing, allow-lists, limits, prices): drop_params may not remove them.
// The codec's decision fields must all be here (a codec test checks).
var GatewayDecidedFields = []string{"model", "stream", "stream_options", "max_tokens", "max_completion_tokens",
	"max_output_tokens", "max_new_tokens", "n_predict", "n", "best_of", "n_cmpl", "tools", "tool_choice", "thinking",
	"previous_response_id", "store", "prompt", "input"}

// blockTypes are the struct types behind each kind of block checkKnownKeys
// and checkNested walk: "" is the top level.
var blockTypes = map[string]reflect.Type{
	"":                reflect.TypeFor[Config](),
	"routing":         reflect.TypeFor[Routing](),
	"circuit_breaker": reflect.TypeFor[CircuitBreaker](),
	"backend":         reflect.TypeFor[Backend](),
	"model":           reflect.TypeFor[Model](),
	"deployment":      reflect.TypeFor[Deployment](),
	"health_check":    reflect.TypeFor[HealthCheck](),
	"engine":          reflect.TypeFor[Engine](),
	"reasoning":       reflect.TypeFor[Reasoning](),
}

// knownKeys are the keys each kind of block takes: the yaml tags of its
// struct type, read once, so that a setting is known as soon as its field
// is tagged.
var knownKeys = func() map[string][]string {
	keys := make(map[string][]string, len(blockTypes))
	for kind, t := range blockTypes {
		keys[kind] = yamlKeys(t)
	}
	return keys
}()

// yamlKeys lists the keys yaml.v3 decodes into the struct type t, in field
// order, with the keys of inlined structs in their place.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case name == "" && strings.Contains(","+opts+",", ",inline,"):
			keys = append(keys, yamlKeys(f.Type)...)
		case name == "":
			keys = append(keys, strings.ToLower(f.Name))
		default:
			keys = append(keys, name)
		}
	}
	return keys
}

// retiredKeys are settings of earlier versions that no longer do anything,
// by the kind of block they were in, with what replaced them. A file that
// names one still loads: its warning names the line and says it is ignored.
var retiredKeys = map[string]map[string]string{
	"": {
		"http_server":     "llmgate always serves with Go's net/http; the builtin server was removed",
		"socket_io":       "llmgate always uses Go's own socket I/O; the raw system calls were removed",
		"upstream_client": "backends are always called through Go's net/http Transport; the builtin client was removed",
	},
	"backend": {
		"upstream_client": "backends are always called through Go's net/http Transport; the builtin client was removed",
	},
}

// checkKnownKeys rejects misspelled keys with the line and the nearest name,
// because a silently ignored key costs hours. Retired keys are let through
// with a warning each, since a config that worked should not stop a start.
func checkKnownKeys(doc *yaml.Node, source string) (warnings []string, _ error) {
	if doc.Kind != yaml.MappingNode {
		return nil, &LineError{Source: source, Line: doc.Line, Msg: "the top level must be a mapping of settings"}
	}
	check := func(m *yaml.Node, kind, path string) error {
		if m.Kind != yaml.MappingNode {
			return &LineError{Source: source, Line: m.Line, Key: path, Msg: "must be a mapping"}
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := m.Content[i]
			if why, ok := retiredKeys[kind][k.Value]; ok {
				w := &LineError{Source: source, Line: k.Line, Key: joinKey(path, k.Value), Msg: "is ignored now (" + why + "): delete the line"}
				warnings = append(warnings, w.Error())
				continue
			}
			if !contains(knownKeys[kind], k.Value) {
				msg := fmt.Sprintf("unknown key %q", k.Value)
				if near := Nearest(k.Value, knownKeys[kind]); near != "" {
					msg += fmt.Sprintf("; did you mean %q?", near)
				}
				return &LineError{Source: source, Line: k.Line, Key: joinKey(path, k.Value), Msg: msg}
			}
		}
		return nil
	}
	if err := check(doc, "", ""); err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		if k.Value == "routing" && v.Kind == yaml.MappingNode {
			if err := checkRoutingKeys(v, check); err != nil {
				return nil, err
			}
			continue
		}
		kind := map[string]string{"backends": "backend", "models": "model", "engines": "engine"}[k.Value]
		if kind == "" {
			continue
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if v.Kind != yaml.MappingNode {
			return nil, &LineError{Source: source, Line: v.Line, Key: k.Value, Msg: "must be a mapping of names to settings"}
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			name, body := v.Content[j], v.Content[j+1]
			if err := check(body, kind, k.Value+"."+name.Value); err != nil {
				return nil, err
			}
			if err := checkNested(body, kind, k.Value+"."+name.Value, source, check); err != nil {
				return nil, err
			}
		}
	}
	return warnings, nil
}

// recordLines remembers where each backend and model was defined.
func recordLines(doc *yaml.Node, cfg *Config) {
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		cfg.noteLine(k.Value, k.Line)
		for j := 0; j+1 < len(v.Content); j += 2 {
			name := v.Content[j]
			switch k.Value {
			case "backends":
				if b := cfg.Backends[name.Value]; b != nil {
					b.line = name.Line
				}
			case "engines":
				if e := cfg.Engines[name.Value]; e != nil {
					e.line = name.Line
				}
			case "models":
				if m := cfg.Models[name.Value]; m != nil {
					m.line = name.Line
					recordDeploymentLines(v.Content[j+1], m)
				}
			}
		}
	}
}

// ApplyDefaults fills in every setting the file left out.
func (c *Config) ApplyDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Backends == nil {
		c.Backends = map[string]*Backend{}
	}
	if c.Models == nil {
		c.Models = map[string]*Model{}
	}
	c.applyEngineDefaults()
	for name, b := range c.Backends {
		if b == nil {
			b = &Backend{}
			c.Backends[name] = b
		}
		b.Name = name
		c.applyPreset(b)
		if b.Dialect == "" {
			b.Dialect = dialect.OpenAI
		}
	}
	for name, m := range c.Models {
		if m == nil {
			m = &Model{}
			c.Models[name] = m
		}
		m.Name = name
		if m.UpstreamModel == "" {
			m.UpstreamModel = name
		}
		m.applyDeploymentDefaults(c.Backends)
	}
}

// Validate checks the configuration and normalizes backend URLs. It checks
// what ApplyDefaults made of the file (a model's backend: is its one
// deployment by then), so call that first; Load does. It is safe to call
// more than once. Each section has its own validator; the first error found
// is returned.
func (c *Config) Validate() error {
	for _, validate := range []func() error{
		c.validateEngines,
		c.validateAccounting,
		func() error { return c.Routing.validate(c.Source) },
		c.validateServer,
		c.validateBackends,
		c.validateModels,
	} {
		if err := validate(); err != nil {
			return err
		}
	}
	return nil
}

// lineErr is a LineError of this configuration's file.
func (c *Config) lineErr(line int, key, format string, args ...any) error {
	return &LineError{Source: c.Source, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)}
}

// validateServer checks the top-level settings of the gateway's own
// server: body limits, TLS, logging and time-outs.
func (c *Config) validateServer() error {
	if c.MaxBodyBytes < 0 {
		return c.lineErr(0, "max_body_bytes", "must be positive")
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if c.ResponsesTTL < 0 {
		return c.lineErr(c.Line("responses_ttl"), "responses_ttl", "must not be negative (to store no responses, set store_responses: false)")
	}
	if c.LogFormat != "" && c.LogFormat != "text" && c.LogFormat != "json" {
		return c.lineErr(c.Line("log_format"), "log_format", "must be text or json, not %q", c.LogFormat)
	}
	if c.ShutdownTimeout < 0 {
		return c.lineErr(c.Line("shutdown_timeout"), "shutdown_timeout", "must not be negative (for example 60s; unset or 0 means the default %s)", DefaultShutdownTimeout)
	}
	if c.BodyReadTimeout < 0 {
		return c.lineErr(c.Line("body_read_timeout"), "body_read_timeout", "must not be negative (for example 60s; unset or 0 means the default %s)", DefaultBodyReadTimeout)
	}
	if c.MaxBodyReadsPerKey != nil && *c.MaxBodyReadsPerKey < 0 {
		return c.lineErr(c.Line("max_body_reads_per_key"), "max_body_reads_per_key", "must be a number of bodies, or 0 for no cap (default %d)", DefaultMaxBodyReadsPerKey)
	}
	if c.MaxLargeBodyMemory != nil && *c.MaxLargeBodyMemory < 0 {
		return c.lineErr(c.Line("max_large_body_memory"), "max_large_body_memory", "must be a number of bytes, or 0 for no cap (default %d, 64 MiB)", DefaultMaxLargeBodyMemory)
	}
	if c.MaxConnections != nil && *c.MaxConnections < 0 {
		return c.lineErr(c.Line("max_connections"), "max_connections", "must be a number of connections, or 0 for no cap (default %d)", DefaultMaxConnections)
	}
	return nil
}

// validateTLS checks that the listener's certificate and key come
// together and load.
func (c *Config) validateTLS() error {
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		k, other := "tls_key_file", "tls_cert_file"
		if c.TLSCertFile == "" {
			k, other = other, k
		}
		return c.lineErr(c.Line(k), k, "is required with %s: give both the certificate and its private key (PEM files)", other)
	}
	if c.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile); err != nil {
			return c.lineErr(c.Line("tls_cert_file"), "tls_cert_file", "cannot load the certificate and key (%s, %s): %v", c.TLSCertFile, c.TLSKeyFile, err)
		}
	}
	return nil
}

// validateBackends checks each backend and normalizes its URL and TLS
// settings.
func (c *Config) validateBackends() error {
	for _, name := range sortedKeys(c.Backends) {
		if err := c.validateBackend(c.Backends[name], "backends."+name); err != nil {
			return err
		}
	}
	return nil
}

// validateBackend checks one backend (key is "backends.<name>") and sets
// its BaseURL and TLS.
func (c *Config) validateBackend(b *Backend, key string) error {
	if err := c.validatePreset(b, key); err != nil {
		return err
	}
	if b.URL == "" {
		return c.lineErr(b.line, key+".url", "is required (for example http://127.0.0.1:8000/v1)")
	}
	if !b.Dialect.Valid() {
		return c.lineErr(b.line, key+".dialect", "must be openai or anthropic, not %q", b.Dialect)
	}
	for _, p := range b.DropParams {
		if p == "" {
			return c.lineErr(b.line, key+".drop_params", "lists an empty name; list the top-level request members this backend rejects, such as top_k")
		}
		if slices.Contains(GatewayDecidedFields, p) {
			return c.lineErr(b.line, key+".drop_params", "cannot remove %q: the gateway checks and prices requests on it, so the backend must get it as checked", p)
		}
	}
	base, err := NormalizeBaseURL(b.URL, b.Dialect)
	if err != nil {
		return c.lineErr(b.line, key+".url", "%v", err)
	}
	b.BaseURL = base
	if err := b.validateDiscovery(); err != nil {
		return c.lineErr(b.line, key+err.key, "%s", err.msg)
	}
	if strings.Contains(b.APIKey, "${") {
		return c.lineErr(b.line, key+".api_key", "unexpanded reference %q", b.APIKey)
	}
	tlsCfg, terr := b.clientTLS()
	if terr != nil {
		return c.lineErr(b.line, key+terr.key, "%s", terr.msg)
	}
	b.TLS = tlsCfg
	return nil
}

// validateModels checks each model: its translation options, context
// window and where it is served.
func (c *Config) validateModels() error {
	backendNames := sortedKeys(c.Backends)
	for _, name := range sortedKeys(c.Models) {
		if err := c.validateModel(c.Models[name], "models."+name, backendNames); err != nil {
			return err
		}
	}
	return nil
}

// validateModel checks one model (key is "models.<name>").
func (c *Config) validateModel(m *Model, key string, backendNames []string) error {
	if _, err := m.ChatOptions(); err != nil {
		return c.lineErr(m.line, key, "%v", err)
	}
	if m.ContextWindow < 0 {
		return c.lineErr(m.line, key+".context_window", "must be the model's context length in tokens (for example 32768), or unset to learn it from the backend")
	}
	return c.validateRouting(m, key, backendNames)
}

// NormalizeBaseURL returns the base URL requests are joined to. For the
// OpenAI dialect a bare host (no path) gets "/v1"; a path ending in "/v1" or
// any other explicit path (e.g. "/api/paas/v4") is kept; "/v1/v1" is fixed.
// For the Anthropic dialect the base has no "/v1": paths are "/v1/messages".
func NormalizeBaseURL(raw string, d dialect.Dialect) (string, error) {
	raw = strings.TrimSpace(raw)
	if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
		return "", fmt.Errorf("URL %q must start with http:// or https://", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid URL %q: %v", raw, err)
	}
	if u.Host == "" {
		return "", fmt.Errorf("URL %q has no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("URL %q must not have a query or fragment", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	for strings.HasSuffix(p, "/v1/v1") {
		p = strings.TrimSuffix(p, "/v1")
	}
	if d == dialect.Anthropic {
		p = strings.TrimSuffix(p, "/v1")
	} else if p == "" {
		p = "/v1"
	}
	u.Path = p
	u.RawPath = ""
	return u.String(), nil
}

func joinKey(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
