package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"llmgate/internal/dialect"
)

// Engine defaults, chosen for real model servers: loading weights takes
// minutes, so the start-up time-out is long; the health poll is frequent
// because a swap should add little beyond the engine's own start-up.
const (
	DefaultEngineHealthPath     = "/health"
	DefaultEngineHealthInterval = 50 * time.Millisecond
	DefaultEngineStartupTimeout = 10 * time.Minute
	DefaultEngineStopGrace      = 10 * time.Second
	DefaultEngineDrainTimeout   = 30 * time.Second
	DefaultEngineMaxQueue       = 100
	DefaultEngineStopSignal     = "SIGTERM"
)

// PortPlaceholder is replaced by the engine's port in its command,
// environment and working directory. Config loading leaves it unexpanded.
const PortPlaceholder = "${PORT}"

// Engine is a local model server llmgate starts on demand. Each public
// model it serves is listed in Models; those names are the model names
// clients send and the names the engine itself must serve (for vLLM,
// --served-model-name). They must not also appear under models:.
type Engine struct {
	Name string `yaml:"-"`
	// Cmd is the program and its arguments, as a list or as one string
	// split like a shell would (quotes, backslashes; no pipes or variables
	// other than ${PORT}).
	Cmd     Command           `yaml:"cmd"`
	Env     map[string]string `yaml:"env"`
	Workdir string            `yaml:"workdir"`
	// Port is the engine's port; 0 picks a free one when the gateway starts.
	Port   int      `yaml:"port"`
	Models []string `yaml:"models"`
	// Group names engines that never run together (one GPU): starting one
	// stops the others after their requests finish.
	Group string `yaml:"group"`
	// TTL stops the engine after this long without requests; 0 = never.
	TTL      Duration `yaml:"ttl"`
	AlwaysOn bool     `yaml:"always_on"`
	// HealthPath answers 200 once the engine is ready (default /health).
	HealthPath     string   `yaml:"health_path"`
	HealthInterval Duration `yaml:"health_interval"`
	StartupTimeout Duration `yaml:"startup_timeout"`
	StopSignal     string   `yaml:"stop_signal"`
	StopGrace      Duration `yaml:"stop_grace"`
	// DrainTimeout bounds how long a swap waits for requests in flight on
	// the engine being stopped.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// MaxQueue bounds requests waiting per model while the engine starts.
	MaxQueue int `yaml:"max_queue"`
	// APIKey is sent to the engine (for engines started with --api-key).
	APIKey string `yaml:"api_key"`
	// AnthropicBillingHeader is the models' anthropic_billing_header
	// (their only place to set it: an engine's models are not listed
	// under models:).
	AnthropicBillingHeader string `yaml:"anthropic_billing_header"`
	line                   int
	// conflict records a backend of the same name found by ApplyDefaults.
	conflict bool
}

// Command is an argv that reads from a YAML list or a shell-like string.
type Command []string

// UnmarshalYAML accepts ["vllm", "serve", ...] or "vllm serve ...".
func (c *Command) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		var xs []string
		if err := n.Decode(&xs); err != nil {
			return err
		}
		*c = xs
		return nil
	}
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	args, err := SplitCommand(s)
	if err != nil {
		return err
	}
	*c = args
	return nil
}

// SplitCommand splits a command line into arguments with POSIX shell
// quoting rules (single quotes, double quotes, backslash escapes) but no
// expansion, so configs can paste the command they run by hand.
func SplitCommand(s string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inArg := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated single quote in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inArg = true
		case ch == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated double quote in %q", s)
			}
			inArg = true
		case ch == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' { // backslash-newline continues the line
				cur.WriteByte(s[i])
				inArg = true
			}
		case ch < 128 && unicode.IsSpace(rune(ch)):
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(ch)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}

// Signal returns the engine's stop signal.
func (e *Engine) Signal() syscall.Signal {
	s, _ := parseSignal(e.StopSignal)
	return s
}

// signals are the stop signals an engine may name (signals_unix.go adds
// the ones only Unix has).
var signals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT,
	"HUP": syscall.SIGHUP, "KILL": syscall.SIGKILL,
}

// signalNames lists the signals a stop_signal may name, for error messages.
func signalNames() string {
	names := make([]string, 0, len(signals))
	for n := range signals {
		names = append(names, "SIG"+n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func parseSignal(s string) (syscall.Signal, bool) {
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")]
	return sig, ok
}

// BaseURL is where the gateway sends the engine's requests.
func (e *Engine) BaseURL() string { return fmt.Sprintf("http://127.0.0.1:%d/v1", e.Port) }

// applyEngineDefaults fills in engine settings and adds a model entry for
// every model an engine serves, so routing treats them like other models.
func (c *Config) applyEngineDefaults() {
	for _, name := range sortedKeys(c.Engines) {
		e := c.Engines[name]
		if e == nil {
			e = &Engine{}
			c.Engines[name] = e
		}
		e.Name = name
		if e.HealthPath == "" {
			e.HealthPath = DefaultEngineHealthPath
		}
		if e.HealthInterval == 0 {
			e.HealthInterval = Duration(DefaultEngineHealthInterval)
		}
		if e.StartupTimeout == 0 {
			e.StartupTimeout = Duration(DefaultEngineStartupTimeout)
		}
		if e.StopGrace == 0 {
			e.StopGrace = Duration(DefaultEngineStopGrace)
		}
		if e.DrainTimeout == 0 {
			e.DrainTimeout = Duration(DefaultEngineDrainTimeout)
		}
		if e.StopSignal == "" {
			e.StopSignal = DefaultEngineStopSignal
		}
		if e.MaxQueue == 0 {
			e.MaxQueue = DefaultEngineMaxQueue
		}
		// The engine's backend starts at port 0 (or the fixed port); the
		// engine manager rewrites it with BindEngine once the port is known.
		if b, ok := c.Backends[name]; !ok {
			c.Backends[name] = &Backend{Name: name, URL: e.BaseURL(), Dialect: dialect.OpenAI, APIKey: e.APIKey, line: e.line}
		} else if b == nil || b.URL != e.BaseURL() {
			e.conflict = true
		}
		for _, m := range e.Models {
			if _, ok := c.Models[m]; !ok {
				c.Models[m] = &Model{Name: m, Backend: name, UpstreamModel: m, Engine: name, AnthropicBillingHeader: e.AnthropicBillingHeader, line: e.line}
			}
		}
	}
}

// validateEngines checks engine settings; model entries are checked here
// too because an engine's models must not collide with other models.
func (c *Config) validateEngines() error {
	ports := map[int]string{}
	groups := map[string][]string{}
	for _, name := range sortedKeys(c.Engines) {
		e := c.Engines[name]
		if err := c.validateEngineCommand(e, name, ports); err != nil {
			return err
		}
		if err := c.validateEngineModels(e, name); err != nil {
			return err
		}
		if err := c.validateEngineSettings(e); err != nil {
			return err
		}
		if e.Group != "" {
			groups[e.Group] = append(groups[e.Group], name)
		}
	}
	return c.validateEngineGroups(groups)
}

// engineErr is a LineError at engine e's key (".port", or "" for the
// engine itself).
func (c *Config) engineErr(e *Engine, key, format string, args ...any) error {
	return &LineError{Source: c.Source, Line: e.line, Key: "engines." + e.Name + key, Msg: fmt.Sprintf(format, args...)}
}

// validateEngineCommand checks the command and the port, which no other
// engine (ports, by port) may use.
func (c *Config) validateEngineCommand(e *Engine, name string, ports map[int]string) error {
	if len(e.Cmd) == 0 || e.Cmd[0] == "" {
		return c.engineErr(e, ".cmd", "is required: the command that starts the engine, e.g. \"vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name qwen2.5-7b --port ${PORT}\"")
	}
	if e.Port == 0 && !usesPort(e) {
		return c.engineErr(e, ".cmd", "does not mention ${PORT}: pass it to the engine (e.g. --port ${PORT}), or set a fixed port:")
	}
	if e.Port < 0 || e.Port > 65535 {
		return c.engineErr(e, ".port", "must be between 1 and 65535, or 0 for a free port")
	}
	if e.Port != 0 {
		if other, dup := ports[e.Port]; dup {
			return c.engineErr(e, ".port", "port %d is also used by engine %q", e.Port, other)
		}
		ports[e.Port] = name
	}
	return nil
}

// validateEngineModels checks that the engine serves models no other engine
// or models: entry claims, and that no backend has its name.
func (c *Config) validateEngineModels(e *Engine, name string) error {
	if len(e.Models) == 0 {
		return c.engineErr(e, ".models", "is required: list the model names this engine serves (clients send these names)")
	}
	for _, m := range e.Models {
		if m == "" {
			return c.engineErr(e, ".models", "contains an empty name")
		}
		if mod := c.Models[m]; mod != nil && mod.Engine != name {
			if mod.Engine != "" {
				return c.engineErr(e, ".models", "model %q is also served by engine %q; a model name can belong to one engine only", m, mod.Engine)
			}
			return c.engineErr(e, ".models", "model %q is also defined under models: (line %d); remove one of the two", m, mod.line)
		}
	}
	if e.conflict {
		return c.engineErr(e, "", "a backend has the same name; engines and backends share names, rename one")
	}
	return nil
}

// validateEngineSettings checks the health check, time-outs, stop signal,
// queue and billing header settings.
func (c *Config) validateEngineSettings(e *Engine) error {
	if !strings.HasPrefix(e.HealthPath, "/") {
		return c.engineErr(e, ".health_path", "must start with / (for example /health)")
	}
	if e.HealthInterval < 0 || e.StartupTimeout < 0 || e.StopGrace < 0 || e.DrainTimeout < 0 || e.TTL < 0 {
		return c.engineErr(e, "", "durations must not be negative")
	}
	if _, ok := parseSignal(e.StopSignal); !ok {
		return c.engineErr(e, ".stop_signal", "unknown signal %q: use one of %s", e.StopSignal, signalNames())
	}
	if e.MaxQueue < 0 {
		return c.engineErr(e, ".max_queue", "must be positive")
	}
	if h := e.AnthropicBillingHeader; h != "" && h != BillingHeaderRemove && h != BillingHeaderKeep {
		return c.engineErr(e, ".anthropic_billing_header", "must be %s or %s, not %q", BillingHeaderRemove, BillingHeaderKeep, h)
	}
	return nil
}

// validateEngineGroups checks that no always_on engine shares a group (a
// GPU) with another engine, which would swap it out.
func (c *Config) validateEngineGroups(groups map[string][]string) error {
	for g, members := range groups {
		if len(members) < 2 {
			continue
		}
		for _, name := range members {
			if e := c.Engines[name]; e.AlwaysOn {
				return c.engineErr(e, ".always_on", "an always_on engine cannot share group %q with %s: it would be swapped out", g, strings.Join(others(members, name), ", "))
			}
		}
	}
	return nil
}

func usesPort(e *Engine) bool {
	for _, a := range e.Cmd {
		if strings.Contains(a, PortPlaceholder) {
			return true
		}
	}
	for _, v := range e.Env {
		if strings.Contains(v, PortPlaceholder) {
			return true
		}
	}
	return false
}

func others(xs []string, not string) []string {
	var out []string
	for _, x := range xs {
		if x != not {
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// BindEngine records the engine's port and points the engine's backend
// (same name) at it. The engine manager calls it once ports are assigned,
// before the routing table is built.
func (c *Config) BindEngine(name string, port int) error {
	e := c.Engines[name]
	if e == nil {
		return fmt.Errorf("no engine %q", name)
	}
	b := c.Backends[name]
	if b == nil || b.URL != e.BaseURL() {
		return fmt.Errorf("engine %q has no backend of its own: call ApplyDefaults first", name)
	}
	e.Port = port
	b.URL = e.BaseURL()
	b.BaseURL = b.URL
	return nil
}

// SameAs reports whether two engine definitions start the same process
// with the same settings, ignoring where they were written and the port
// (assigned at start when the file leaves it out).
func (e *Engine) SameAs(o *Engine) bool {
	a, b := *e, *o
	a.line, b.line = 0, 0
	a.conflict, b.conflict = false, false
	a.Port, b.Port = 0, 0
	return reflect.DeepEqual(a, b)
}
