package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"llmgate/internal/connect"
)

// ClineSettingsDirs are where the Cline VS Code extension keeps
// cline_mcp_settings.json, relative to the home directory (Linux, macOS);
// on Windows it is under %APPDATA%.
var ClineSettingsDirs = []string{
	".config/Code/User/globalStorage/saoudrizwan.claude-dev/settings",
	"Library/Application Support/Code/User/globalStorage/saoudrizwan.claude-dev/settings",
}

// clientFinding accumulates what one client configuration says.
type clientFinding struct {
	c Check
	// path is the file, shown at the start of the detail.
	path string
	// base is the OpenAI-style base URL the client will use, key its key.
	base, key, keyFrom string
}

func (f *clientFinding) note(status Status, detail, fix string) {
	f.c.Detail = joinNonEmpty(f.c.Detail, detail)
	if rank(status) > rank(f.c.Status) {
		f.c.Status, f.c.Fix = status, fix
	}
}

func rank(s Status) int {
	switch s {
	case StatusFail:
		return 3
	case StatusWarn:
		return 2
	case StatusPass:
		return 1
	}
	return 0
}

func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// readJSON reads a JSON file; ok is false when it does not exist.
func readJSON(path string, v any) (ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + strings.Count(string(b[:min(int(se.Offset), len(b))]), "\n")
			return true, fmt.Errorf("line %d: %w", line, err)
		}
		return true, err
	}
	return true, nil
}

// checkClients reads the client configuration files that exist and compares
// their endpoint and key with the one being diagnosed.
func (d *diagnosis) checkClients() {
	var found []*clientFinding
	found = append(found, d.claudeFindings()...)
	if f := d.codexFinding(); f != nil {
		found = append(found, f)
	}
	if f := d.clineFinding(); f != nil {
		found = append(found, f)
	}
	if f := d.clineMCPFinding(); f != nil {
		found = append(found, f)
	}
	if f := d.opencodeFinding(); f != nil {
		found = append(found, f)
	}
	if len(found) == 0 {
		d.add(Check{ID: "clients", Title: "client configs", Status: StatusSkip,
			Detail: "no Claude Code, Codex, Cline or opencode configuration found in " + d.opts.HomeDir})
		return
	}
	target := trimSlash(d.api)
	if target == "" {
		target = trimSlash(cleanValue(d.baseURL))
	}
	for _, f := range found {
		if f.c.Status == "" {
			f.c.Status = StatusPass
		}
		if f.base != "" && !sameURL(f.base, target) {
			f.note(StatusWarn, "points at "+f.base+", not at "+target,
				"Point it at the same endpoint (llmgate connect "+strings.TrimPrefix(f.c.ID, "clients.")+" rewrites it) or run doctor with --base-url "+f.base+".")
		}
		if f.key != "" && d.key != "" && cleanKey(f.key) != cleanKey(d.key) {
			f.note(StatusWarn, fmt.Sprintf("key %s (%s) differs from %s (%s)", Fingerprint(f.key), f.keyFrom, Fingerprint(d.key), d.keySrc),
				"Use one key everywhere, or expect different limits and usage per client.")
		}
		if f.c.Detail == "" {
			f.c.Detail = "matches the endpoint and key"
		}
		if f.path != "" {
			f.c.Detail = shortPath(f.path, d.opts.HomeDir) + ": " + f.c.Detail
		}
		d.add(f.c)
	}
}

// sameURL compares base URLs ignoring case of scheme and host, a trailing
// slash, and localhost versus 127.0.0.1.
func sameURL(a, b string) bool {
	norm := func(s string) string {
		u, err := url.Parse(trimSlash(cleanValue(s)))
		if err != nil {
			return s
		}
		host := strings.ToLower(u.Hostname())
		if host == "localhost" || host == "::1" {
			host = "127.0.0.1"
		}
		if p := u.Port(); p != "" {
			host += ":" + p
		}
		return strings.ToLower(u.Scheme) + "://" + host + u.Path
	}
	return norm(a) == norm(b)
}

// claudeFindings reads ~/.claude/settings.json and the project's
// .claude/settings.json and settings.local.json.
func (d *diagnosis) claudeFindings() []*clientFinding {
	paths := []string{
		filepath.Join(d.opts.HomeDir, ".claude", "settings.json"),
		filepath.Join(d.opts.WorkDir, ".claude", "settings.json"),
		filepath.Join(d.opts.WorkDir, ".claude", "settings.local.json"),
	}
	var out []*clientFinding
	seen := map[string]bool{}
	for i, p := range paths {
		if seen[p] {
			continue
		}
		seen[p] = true
		var s struct {
			Env map[string]string `json:"env"`
		}
		ok, err := readJSON(p, &s)
		if !ok {
			continue
		}
		id, title := "clients.claude-code", "Claude Code settings"
		if i > 0 {
			id, title = "clients.claude-code-project", "Claude Code project settings"
		}
		f := &clientFinding{c: Check{ID: id, Title: title}, path: p}
		out = append(out, f)
		if err != nil {
			f.note(StatusFail, "cannot parse: "+err.Error(), "Fix the JSON syntax; Claude Code ignores the whole file otherwise.")
			continue
		}
		env := s.Env
		if root := env["ANTHROPIC_BASE_URL"]; root != "" {
			root = trimSlash(cleanValue(root))
			if strings.HasSuffix(root, "/v1") {
				f.note(StatusFail, "ANTHROPIC_BASE_URL ends in /v1, so Claude Code requests /v1/v1/messages",
					"Set ANTHROPIC_BASE_URL to "+strings.TrimSuffix(root, "/v1")+"; Claude Code appends /v1/messages itself.")
				root = strings.TrimSuffix(root, "/v1")
			}
			f.base = root + "/v1"
			if sh, ok := d.lookup("ANTHROPIC_BASE_URL"); ok && !sameURL(sh, env["ANTHROPIC_BASE_URL"]) {
				f.note(StatusWarn, "overrides the shell's ANTHROPIC_BASE_URL="+sh, "Remove one of them; settings.json wins over the shell, which surprises people.")
			}
		}
		tok, key := env["ANTHROPIC_AUTH_TOKEN"], env["ANTHROPIC_API_KEY"]
		switch {
		case tok != "" && key != "":
			f.note(StatusWarn, "sets both ANTHROPIC_AUTH_TOKEN and ANTHROPIC_API_KEY, so both headers are sent",
				"Keep only ANTHROPIC_AUTH_TOKEN for a gateway.")
			f.key, f.keyFrom = tok, "ANTHROPIC_AUTH_TOKEN"
		case tok != "":
			f.key, f.keyFrom = tok, "ANTHROPIC_AUTH_TOKEN"
		case key != "":
			f.key, f.keyFrom = key, "ANTHROPIC_API_KEY"
		}
		for _, name := range []string{"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"} {
			if v, ok := env[name]; ok {
				if p, fix := valueProblem(v, name != "ANTHROPIC_BASE_URL"); p != "" {
					f.note(StatusFail, name+" "+p, strings.ToUpper(fix[:1])+strings.ReplaceAll(fix[1:], "NAME", name)+" (in the env block).")
				}
			}
		}
		if m := env["ANTHROPIC_MODEL"]; m != "" && len(d.models) > 0 && !contains(d.models, m) {
			f.note(StatusWarn, "ANTHROPIC_MODEL "+m+" is not served here", "Set ANTHROPIC_MODEL to a served model, e.g. "+firstOr(Nearest(m, d.models, 1), d.models[0])+".")
		}
	}
	return out
}

func firstOr(list []string, def string) string {
	if len(list) > 0 {
		return list[0]
	}
	return def
}

func shortPath(p, home string) string {
	if home != "" && strings.HasPrefix(p, home+string(filepath.Separator)) {
		return "~" + p[len(home):]
	}
	return p
}

// codexFinding reads $CODEX_HOME/config.toml (default ~/.codex) and auth.json.
func (d *diagnosis) codexFinding() *clientFinding {
	dir := filepath.Join(d.opts.HomeDir, ".codex")
	if v, ok := d.lookup("CODEX_HOME"); ok {
		dir = v
	}
	path := filepath.Join(dir, "config.toml")
	b, err := os.ReadFile(path)
	var auth struct {
		Key string `json:"OPENAI_API_KEY"`
	}
	authOK, authErr := readJSON(filepath.Join(dir, "auth.json"), &auth)
	if errors.Is(err, fs.ErrNotExist) && !authOK {
		return nil
	}
	f := &clientFinding{c: Check{ID: "clients.codex", Title: "Codex config"}, path: path}
	if authErr != nil {
		f.note(StatusFail, "cannot parse auth.json: "+authErr.Error(), "Fix auth.json or log in again with codex login.")
	}
	var cfg struct {
		Model          string `toml:"model"`
		ModelProvider  string `toml:"model_provider"`
		ModelProviders map[string]struct {
			BaseURL string `toml:"base_url"`
			EnvKey  string `toml:"env_key"`
			WireAPI string `toml:"wire_api"`
		} `toml:"model_providers"`
	}
	if err == nil {
		if perr := toml.Unmarshal(b, &cfg); perr != nil {
			f.note(StatusFail, "cannot parse config.toml: "+perr.Error(), "Fix the TOML syntax; Codex refuses to start with it.")
			return f
		}
	}
	p, custom := cfg.ModelProviders[cfg.ModelProvider]
	if !custom {
		// The built-in provider uses OPENAI_BASE_URL and auth.json's key.
		if v, ok := d.lookup("OPENAI_BASE_URL"); ok {
			f.base = v
		}
		if auth.Key != "" {
			f.key, f.keyFrom = auth.Key, "auth.json"
		}
		if cfg.ModelProvider == "" || cfg.ModelProvider == "openai" {
			f.c.Detail = "uses the built-in OpenAI provider"
		} else {
			f.note(StatusFail, "model_provider = "+cfg.ModelProvider+" has no [model_providers."+cfg.ModelProvider+"] table",
				"Add the table or run llmgate connect codex.")
		}
		return f
	}
	f.base = p.BaseURL
	if p.WireAPI != "responses" {
		f.note(StatusWarn, fmt.Sprintf("wire_api = %q; current Codex releases accept only \"responses\"", p.WireAPI),
			"Set wire_api = \"responses\" in [model_providers."+cfg.ModelProvider+"].")
	}
	if p.EnvKey != "" {
		if v, ok := d.lookup(p.EnvKey); ok {
			f.key, f.keyFrom = v, "$"+p.EnvKey
		} else {
			f.note(StatusFail, "env_key = "+p.EnvKey+" but $"+p.EnvKey+" is not set in this shell",
				"Export "+p.EnvKey+" before starting Codex; Codex reads the key only from that variable.")
		}
	}
	if m := cfg.Model; m != "" && len(d.models) > 0 && !contains(d.models, m) {
		f.note(StatusWarn, "model "+m+" is not served here", "Set model to a served name, e.g. "+firstOr(Nearest(m, d.models, 1), d.models[0])+".")
	}
	return f
}

// clineFinding reads the Cline CLI's OpenAI-compatible provider, where
// connect.ClineProvider settings live (providers.json).
func (d *diagnosis) clineFinding() *clientFinding {
	path, err := connect.DefaultPath(connect.Cline, connect.Options{HomeDir: d.opts.HomeDir, LookupEnv: d.lookup})
	if err != nil {
		return nil
	}
	var s struct {
		LastUsedProvider string `json:"lastUsedProvider"`
		Providers        map[string]struct {
			Settings struct {
				BaseURL string `json:"baseUrl"`
				APIKey  string `json:"apiKey"`
			} `json:"settings"`
		} `json:"providers"`
	}
	ok, err := readJSON(path, &s)
	if !ok {
		return nil
	}
	f := &clientFinding{c: Check{ID: "clients.cline", Title: "Cline CLI provider"}, path: path}
	if err != nil {
		f.note(StatusFail, "cannot parse: "+err.Error(), "Fix the JSON syntax, or run llmgate connect cline.")
		return f
	}
	p, has := s.Providers[connect.ClineProvider]
	if !has || p.Settings.BaseURL == "" {
		f.c.Status, f.c.Detail = StatusSkip, "no OpenAI-compatible provider configured"
		return f
	}
	f.base, f.key, f.keyFrom = p.Settings.BaseURL, p.Settings.APIKey, "apiKey"
	if s.LastUsedProvider != connect.ClineProvider {
		f.note(StatusWarn, "cline uses its "+s.LastUsedProvider+" provider, not this one",
			"Run cline with -P "+connect.ClineProvider+", or llmgate connect cline to make it the default.")
	}
	return f
}

// clineMCPFinding reads the llmgate entry of the Cline extension's MCP
// settings.
func (d *diagnosis) clineMCPFinding() *clientFinding {
	var paths []string
	for _, dir := range ClineSettingsDirs {
		paths = append(paths, filepath.Join(d.opts.HomeDir, filepath.FromSlash(dir), "cline_mcp_settings.json"))
	}
	if appdata, ok := d.lookup("APPDATA"); ok {
		paths = append(paths, filepath.Join(appdata, "Code", "User", "globalStorage", "saoudrizwan.claude-dev", "settings", "cline_mcp_settings.json"))
	}
	for _, path := range paths {
		var s struct {
			MCPServers map[string]struct {
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
			} `json:"mcpServers"`
		}
		ok, err := readJSON(path, &s)
		if !ok {
			continue
		}
		f := &clientFinding{c: Check{ID: "clients.cline-mcp", Title: "Cline MCP settings"}, path: path}
		if err != nil {
			f.note(StatusFail, "cannot parse: "+err.Error(), "Fix the JSON syntax; Cline shows no MCP servers otherwise.")
			return f
		}
		for _, srv := range s.MCPServers {
			if filepath.Base(srv.Command) == "llmgate" || srv.Env["LLMGATE_BASE_URL"] != "" {
				f.base, f.key, f.keyFrom = srv.Env["LLMGATE_BASE_URL"], srv.Env["LLMGATE_API_KEY"], "LLMGATE_API_KEY"
				return f
			}
		}
		f.c.Status, f.c.Detail = StatusSkip, "no llmgate MCP server configured"
		return f
	}
	return nil
}

// opencodeFinding reads the llmgate provider of opencode's global config.
func (d *diagnosis) opencodeFinding() *clientFinding {
	dir := filepath.Join(d.opts.HomeDir, ".config")
	if v, ok := d.lookup("XDG_CONFIG_HOME"); ok {
		dir = v
	}
	path := filepath.Join(dir, "opencode", "opencode.json")
	var s struct {
		Provider map[string]struct {
			Options struct {
				BaseURL string `json:"baseURL"`
				APIKey  string `json:"apiKey"`
			} `json:"options"`
		} `json:"provider"`
	}
	ok, err := readJSON(path, &s)
	if !ok {
		return nil
	}
	f := &clientFinding{c: Check{ID: "clients.opencode", Title: "opencode config"}, path: path}
	if err != nil {
		f.note(StatusFail, "cannot parse: "+err.Error(), "Fix the JSON syntax; opencode will not start otherwise.")
		return f
	}
	p, has := s.Provider["llmgate"]
	if !has {
		f.c.Status, f.c.Detail = StatusSkip, "no llmgate provider configured"
		return f
	}
	f.base = p.Options.BaseURL
	key := p.Options.APIKey
	if strings.HasPrefix(key, "{env:") && strings.HasSuffix(key, "}") {
		name := key[5 : len(key)-1]
		v, ok := d.lookup(name)
		if !ok {
			f.note(StatusFail, "apiKey reads $"+name+", which is not set", "Export "+name+" before starting opencode.")
			return f
		}
		f.key, f.keyFrom = v, "$"+name
	} else if key != "" {
		f.key, f.keyFrom = key, "options.apiKey"
	}
	return f
}
