// Package connect writes client configuration that points coding tools at an
// llmgate gateway: Claude Code's settings.json, Codex's config.toml, the
// Cline CLI's providers.json (and the Cline extension's MCP settings) and
// opencode's opencode.json, each in the tool's current
// format. It merges into the existing file (unrelated settings are kept),
// backs the old file up before changing it, and changes nothing when the file
// already says what it should, so running it twice is harmless.
//
// The configs are meant to work on small-context local models without hand
// edits. Given the gateway's model list (FetchModels reads GET /v1/models;
// a model's context length is its max_model_len, else context_window, else
// context_length; Options.ContextLength overrides it for the chosen model),
// opencode gets limit.context and limit.output per model, Claude Code
// CLAUDE_CODE_MAX_OUTPUT_TOKENS and CLAUDE_CODE_AUTO_COMPACT_WINDOW, and Codex
// model_context_window, Cline contextWindow and maxTokens; the output limit
// is OutputLimit's rule. Cline's MCP entry gets an absolute command path
// when one is known and a request timeout. Every
// Change lists what was assumed, so the user can check it.
package connect

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Target names a client tool.
type Target string

// The supported targets.
const (
	ClaudeCode Target = "claude-code"
	Codex      Target = "codex"
	Cline      Target = "cline"     // the Cline CLI's provider
	ClineMCP   Target = "cline-mcp" // an MCP server entry for the Cline extension
	OpenCode   Target = "opencode"
	Env        Target = "env"
)

// Targets lists every target in the order help text shows them.
var Targets = []Target{ClaudeCode, Codex, Cline, ClineMCP, OpenCode, Env}

// DefaultBaseURL is the gateway's default listen address.
const DefaultBaseURL = "http://127.0.0.1:4000"

// KeyEnv is the variable Codex and opencode are told to read the key from;
// the key itself is not written into their files.
const KeyEnv = "LLMGATE_API_KEY"

// ProviderID is the name of the provider entry written for each tool.
const ProviderID = "llmgate"

// Options says what to write. Zero values get defaults from the
// environment: LLMGATE_BASE_URL, LLMGATE_API_KEY, LLMGATE_MODEL.
type Options struct {
	// BaseURL is the gateway, with or without /v1; default DefaultBaseURL.
	BaseURL string
	APIKey  string
	Model   string
	// Path overrides the file written (for example a project's
	// .claude/settings.json).
	Path string
	// Command is the executable Cline starts for the MCP server; empty
	// means this executable's absolute path (see resolveCommand).
	Command string
	// Executable and LookPath find that path; nil means os.Executable and
	// exec.LookPath.
	Executable func() (string, error)
	LookPath   func(string) (string, error)
	// Models is the gateway's model list (read with FetchModels), from
	// which context lengths are taken; nil leaves per-model limits out.
	Models *Catalog
	// ModelsErr says why Models could not be read, for the assumptions
	// printed.
	ModelsErr error
	// ContextLength, when set, is Model's context length, overriding the
	// gateway's.
	ContextLength int
	// HTTPClient reads the model list; nil means a client with a 5-second
	// timeout.
	HTTPClient *http.Client
	// HomeDir is the user's home; empty means os.UserHomeDir.
	HomeDir string
	// LookupEnv reads the environment; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// GOOS picks the Cline settings location; empty means runtime.GOOS.
	GOOS string
	// Now stamps backups; nil means time.Now.
	Now func() time.Time
}

// Change is what connect did or would do to one file.
type Change struct {
	Target Target
	Path   string
	// Before is the file's content, nil when it did not exist.
	Before []byte
	After  []byte
	// Changed is false when the file already said the same thing.
	Changed bool
	// Backup is the copy of the previous file, when one was made.
	Backup string
	// Notes tell the user what else to do (export a variable, restart).
	Notes []string
	// Assumed lists what connect assumed or derived in writing the file:
	// where context lengths came from, the output limits chosen, the
	// command path.
	Assumed []string
}

// endpoint is the normalised gateway address.
type endpoint struct {
	root   string // http://host:port (Anthropic clients append /v1/messages)
	openai string // root + /v1
	key    string
	model  string
}

func (o *Options) defaults() error {
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.HomeDir == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("cannot find the home directory: %w", err)
		}
		o.HomeDir = h
	}
	if o.GOOS == "" {
		o.GOOS = runtime.GOOS
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Executable == nil {
		o.Executable = os.Executable
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	get := func(k string) string { v, _ := o.LookupEnv(k); return strings.TrimSpace(v) }
	if o.BaseURL == "" {
		o.BaseURL = get("LLMGATE_BASE_URL")
	}
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	if o.APIKey == "" {
		o.APIKey = get(KeyEnv)
	}
	if o.Model == "" {
		o.Model = get("LLMGATE_MODEL")
	}
	return nil
}

func (o *Options) endpoint() (endpoint, error) {
	raw := strings.TrimRight(strings.TrimSpace(o.BaseURL), "/")
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return endpoint{}, fmt.Errorf("base URL %q must look like %s", o.BaseURL, DefaultBaseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return endpoint{}, fmt.Errorf("base URL %q must not have a query or fragment", o.BaseURL)
	}
	root := strings.TrimSuffix(raw, "/v1")
	return endpoint{root: root, openai: root + "/v1", key: strings.TrimSpace(o.APIKey), model: strings.TrimSpace(o.Model)}, nil
}

// DefaultPath returns the file a target writes for these options.
func DefaultPath(t Target, o Options) (string, error) {
	if err := o.defaults(); err != nil {
		return "", err
	}
	return o.path(t)
}

func (o *Options) path(t Target) (string, error) {
	if o.Path != "" {
		return o.Path, nil
	}
	env := func(k string) string { v, _ := o.LookupEnv(k); return v }
	switch t {
	case ClaudeCode:
		return filepath.Join(o.HomeDir, ".claude", "settings.json"), nil
	case Codex:
		if d := env("CODEX_HOME"); d != "" {
			return filepath.Join(d, "config.toml"), nil
		}
		return filepath.Join(o.HomeDir, ".codex", "config.toml"), nil
	case Cline:
		// The Cline CLI's own lookup: CLINE_PROVIDER_SETTINGS_PATH, else
		// $CLINE_DATA_DIR/settings, else $CLINE_DIR (~/.cline)/data/settings.
		if p := strings.TrimSpace(env("CLINE_PROVIDER_SETTINGS_PATH")); p != "" {
			return p, nil
		}
		data := strings.TrimSpace(env("CLINE_DATA_DIR"))
		if data == "" {
			dir := strings.TrimSpace(env("CLINE_DIR"))
			if dir == "" {
				dir = filepath.Join(o.HomeDir, ".cline")
			}
			data = filepath.Join(dir, "data")
		}
		return filepath.Join(data, "settings", "providers.json"), nil
	case ClineMCP:
		const rel = "Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json"
		switch o.GOOS {
		case "darwin":
			return filepath.Join(o.HomeDir, "Library", "Application Support", filepath.FromSlash(rel)), nil
		case "windows":
			if d := env("APPDATA"); d != "" {
				return filepath.Join(d, filepath.FromSlash(rel)), nil
			}
			return filepath.Join(o.HomeDir, "AppData", "Roaming", filepath.FromSlash(rel)), nil
		}
		return filepath.Join(o.HomeDir, ".config", filepath.FromSlash(rel)), nil
	case OpenCode:
		if d := env("XDG_CONFIG_HOME"); d != "" {
			return filepath.Join(d, "opencode", "opencode.json"), nil
		}
		return filepath.Join(o.HomeDir, ".config", "opencode", "opencode.json"), nil
	}
	return "", fmt.Errorf("unknown target %q (want one of %s)", t, targetList())
}

func targetList() string {
	var s []string
	for _, t := range Targets {
		s = append(s, string(t))
	}
	return strings.Join(s, ", ")
}

// Plan computes the change for a file target without writing anything.
func Plan(t Target, o Options) (*Change, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if t == Env {
		return nil, errors.New("env prints exports; use Exports")
	}
	ep, err := o.endpoint()
	if err != nil {
		return nil, err
	}
	path, err := o.path(t)
	if err != nil {
		return nil, err
	}
	before, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		before = nil
	} else if err != nil {
		return nil, err
	}
	c := &Change{Target: t, Path: path, Before: before}
	only := ""
	if ep.model == "" && t != ClineMCP && o.Models != nil && len(o.Models.Models) == 1 {
		// One model behind the gateway: the tool can only mean that one.
		only = o.Models.Models[0].ID
		ep.model = only
	}
	sizes := o.sizes(ep)
	if only != "" {
		sizes.note("model %s: the only model %s lists (--model picks another)", only, sizes.source)
	}
	switch t {
	case ClaudeCode:
		c.After, c.Notes, err = claudeCode(before, ep, sizes)
	case Codex:
		c.After, c.Notes, err = codex(before, ep, sizes)
	case Cline:
		c.After, c.Notes, err = clineCLI(before, ep, sizes, o.Now())
	case ClineMCP:
		command, why := o.resolveCommand()
		sizes.assumed = []string{why}
		c.After, c.Notes, err = clineMCP(before, ep, command, sizes)
	case OpenCode:
		c.After, c.Notes, err = opencode(before, ep, sizes)
	}
	c.Assumed = sizes.assumed
	if err != nil {
		return nil, fmt.Errorf("%s: %w; the file was not changed", path, err)
	}
	c.Changed = before == nil || !bytes.Equal(before, c.After)
	return c, nil
}

// Apply computes the change and writes it: the old file is copied to
// PATH.bak-YYYYMMDDTHHMMSSZ first, the new one replaces it atomically. An
// unchanged file is not touched and gets no backup.
func Apply(t Target, o Options) (*Change, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c, err := Plan(t, o)
	if err != nil || !c.Changed {
		return c, err
	}
	dir := filepath.Dir(c.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Files that hold keys are private unless the user chose otherwise.
	mode := fs.FileMode(0o600)
	if st, err := os.Stat(c.Path); err == nil {
		mode = st.Mode().Perm()
	}
	if c.Before != nil {
		c.Backup, err = backup(c.Path, c.Before, mode, o.Now())
		if err != nil {
			return nil, err
		}
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(c.Path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	_, werr := tmp.Write(c.After)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), mode)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), c.Path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("writing %s: %w", c.Path, werr)
	}
	return c, nil
}

func backup(path string, content []byte, mode fs.FileMode, now time.Time) (string, error) {
	stamp := now.UTC().Format("20060102T150405Z")
	name := path + ".bak-" + stamp
	for i := 1; ; i++ {
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) {
			name = fmt.Sprintf("%s.bak-%s-%d", path, stamp, i)
			continue
		}
		if err != nil {
			return "", fmt.Errorf("backing up %s: %w", path, err)
		}
		_, err = f.Write(content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", fmt.Errorf("backing up %s: %w", path, err)
		}
		return name, nil
	}
}

// Exports returns shell lines that point OpenAI and Anthropic clients, and
// llmgate's own commands, at the gateway.
func Exports(o Options) (string, error) {
	if err := o.defaults(); err != nil {
		return "", err
	}
	ep, err := o.endpoint()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v)) }
	line("OPENAI_BASE_URL", ep.openai)
	line("ANTHROPIC_BASE_URL", ep.root)
	line("LLMGATE_BASE_URL", ep.openai)
	if ep.key == "" {
		b.WriteString("# no key: pass --api-key or set LLMGATE_API_KEY to add OPENAI_API_KEY and ANTHROPIC_AUTH_TOKEN\n")
	} else {
		line("OPENAI_API_KEY", ep.key)
		line("ANTHROPIC_AUTH_TOKEN", ep.key)
		line(KeyEnv, ep.key)
	}
	if ep.model != "" {
		line("ANTHROPIC_MODEL", ep.model)
		line("LLMGATE_MODEL", ep.model)
	}
	return b.String(), nil
}

// shellQuote quotes for POSIX shells only when needed.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
