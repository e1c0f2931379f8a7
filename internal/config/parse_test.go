package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration_AcceptsGoSyntaxAndDays(t *testing.T) {
	day := 24 * time.Hour
	for in, want := range map[string]time.Duration{
		"90s":    90 * time.Second,
		"5m30s":  5*time.Minute + 30*time.Second,
		"2h":     2 * time.Hour,
		"250ms":  250 * time.Millisecond,
		"1h30m":  90 * time.Minute,
		"0":      0,
		"-1h":    -time.Hour,
		"7d":     7 * day,
		"1d12h":  36 * time.Hour,
		"1.5d":   36 * time.Hour,
		"2d30m":  2*day + 30*time.Minute,
		"-1d":    -day,
		"0d":     0,
		"90d":    90 * day,
		".5d":    12 * time.Hour,
		"1d0.5h": day + 30*time.Minute,
	} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestParseDuration_RejectsAnythingButGoSyntaxAndDays(t *testing.T) {
	for _, in := range []string{
		"10 seconds", "10 minutes", "2 hours", "5m30", "30", "1.5", "", " 5m", "5 m", "soon",
		"d", "1d1d", "12h1d", "1d-2h", "1d+2h", "1e3d", "inf", "0x10d", "1dd", "5 days",
	} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		} else if !strings.Contains(err.Error(), "use Go syntax such as 90s, 5m30s, 2h or 7d") {
			t.Errorf("ParseDuration(%q): error %q does not say what to write", in, err)
		}
	}
	if _, err := ParseDuration("30"); err == nil || !strings.Contains(err.Error(), "a number needs a unit, e.g. 30s") {
		t.Errorf("bare number: err = %v, want the unit hint", err)
	}
	if _, err := ParseDuration("200000d"); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("overflow: err = %v, want too long", err)
	}
}

func TestLoad_MalformedDurationNamesKeyAndLine(t *testing.T) {
	// Each of these used to be read as a number of seconds: 10 s, 10 s, 2 s and 5 s.
	base := `# llmgate.yaml
listen: 127.0.0.1:4000
database: llmgate.db

models:
  qwen: {backend: vllm}

backends:
  vllm:
    url: http://127.0.0.1:8000/v1
    connect_timeout: 5s
    timeout: VALUE
`
	for _, v := range []string{`"5m30"`, `10 seconds`, `"10 minutes"`, `"2 hours"`, `30`} {
		src := strings.Replace(base, "VALUE", v, 1)
		_, err := LoadWithEnv(strings.NewReader(src), "llmgate.yaml", env(nil))
		want := `llmgate.yaml:12: backends.vllm.timeout: "` + strings.Trim(v, `"`) + `" is not a duration: use Go syntax such as 90s, 5m30s, 2h or 7d`
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("timeout: %s\n got  %v\n want %s", v, err, want)
		}
	}
}

func TestLoad_EveryDurationSettingIsChecked(t *testing.T) {
	cases := []struct{ src, want string }{
		{"retention: 2 weeks\n", `x.yaml:1: retention: "2 weeks" is not a duration`},
		{"responses_ttl: 30 days\n", `x.yaml:1: responses_ttl: "30 days" is not a duration`},
		{"routing:\n  retry_backoff: 50\n", `x.yaml:2: routing.retry_backoff: "50" is not a duration`},
		{"routing:\n  circuit_breaker:\n    open_for: 5 s\n", `x.yaml:3: routing.circuit_breaker.open_for: "5 s" is not a duration`},
		{"backends:\n  a:\n    url: http://x\n    health_check: {interval: 10 sec}\n", `x.yaml:4: backends.a.health_check.interval: "10 sec" is not a duration`},
		{"engines:\n  e:\n    cmd: vllm --port ${PORT}\n    models: [m]\n    ttl: 30 min\n", `x.yaml:5: engines.e.ttl: "30 min" is not a duration`},
		{"backends:\n  a:\n    url: http://x\n    idle_timeout: [1, 2]\n", `x.yaml:4: backends.a.idle_timeout: must be a duration such as 90s, 5m30s, 2h or 7d, not a list`},
	}
	for _, c := range cases {
		_, err := LoadWithEnv(strings.NewReader(c.src), "x.yaml", env(nil))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got  %v\n want %s", c.src, err, c.want)
		}
	}
}

func TestLoad_DurationsInDays(t *testing.T) {
	src := "retention: 1d12h\nresponses_ttl: 7d\nbackends:\n  a: {url: http://x, timeout: 90s, first_byte_timeout: 1m30s}\n"
	cfg, err := LoadWithEnv(strings.NewReader(src), "x.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(cfg.Retention); got != 36*time.Hour {
		t.Errorf("retention = %v, want 36h", got)
	}
	if _, keep := cfg.ResponsesStorage(); keep != 7*24*time.Hour {
		t.Errorf("responses_ttl = %v, want 168h", keep)
	}
	if b := cfg.Backends["a"]; time.Duration(b.Timeout) != 90*time.Second || time.Duration(b.FirstByte) != 90*time.Second {
		t.Errorf("timeouts = %v, %v", time.Duration(b.Timeout), time.Duration(b.FirstByte))
	}
}

func TestLoad_UnsetVariableIsAnErrorNamingItAndTheLine(t *testing.T) {
	src := "listen: 127.0.0.1:4000\nbackends:\n  deepseek: {url: https://api.deepseek.com, api_key: ${DEEPSEEK_API_KEY}}\n"
	_, err := LoadWithEnv(strings.NewReader(src), "llmgate.yaml", env(nil))
	want := "llmgate.yaml:3: ${DEEPSEEK_API_KEY} is not set: set DEEPSEEK_API_KEY, or write ${DEEPSEEK_API_KEY:-default} (${DEEPSEEK_API_KEY:-} for an empty value)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	// Set but empty is what the user asked for, not an error.
	cfg, err := LoadWithEnv(strings.NewReader(src), "llmgate.yaml", env(map[string]string{"DEEPSEEK_API_KEY": ""}))
	if err != nil || cfg.Backends["deepseek"].APIKey != "" {
		t.Fatalf("empty variable: cfg=%v err=%v", cfg, err)
	}
}

func TestLoad_VariableDefaultsEscapesAndComments(t *testing.T) {
	src := `# api_key: ${NOT_SET_IN_A_COMMENT}
listen: ${LISTEN:-127.0.0.1:4100}   # ${ALSO_IN_A_COMMENT}
backends:
  a: {url: "http://${HOST:-127.0.0.1}:8000", api_key: ${KEY:-}}
  b: {url: http://x, headers: {X-Literal: $${NOT_EXPANDED}, X-Hash: "a # ${TAG}"}}
engines:
  e:
    cmd: vllm serve m --port ${PORT}
    models: [m]
`
	cfg, err := LoadWithEnv(strings.NewReader(src), "x.yaml", env(map[string]string{"TAG": "v1"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:4100" {
		t.Errorf("listen = %q, want the default", cfg.Listen)
	}
	if b := cfg.Backends["a"]; b.URL != "http://127.0.0.1:8000" || b.APIKey != "" {
		t.Errorf("backend a = %q, %q", b.URL, b.APIKey)
	}
	if h := cfg.Backends["b"].Headers; h["X-Literal"] != "${NOT_EXPANDED}" || h["X-Hash"] != "a # v1" {
		t.Errorf("headers = %q", h)
	}
	if got := strings.Join(cfg.Engines["e"].Cmd, " "); got != "vllm serve m --port ${PORT}" {
		t.Errorf("engine cmd = %q, want ${PORT} left for the engine manager", got)
	}
}

func TestLoad_YAMLSyntaxErrorsPointAtTheLineAtFault(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"key indented one space too few", "listen: 127.0.0.1:4000\nbackends:\n  a:\n    url: http://x\n   api_key: k\nmodels: {}\n",
			"x.yaml:5: invalid YAML: did not find expected key (this line's indentation does not line up with the keys above it)"},
		{"list item under a mapping", "backends:\n  a:\n    url: http://x\n\n  - b\n",
			"x.yaml:5: invalid YAML: did not find expected key"},
		{"key indented under a scalar", "listen: 127.0.0.1:4000\n  database: x.db\n",
			"x.yaml:2: invalid YAML: mapping values are not allowed in this context"},
		{"tab indentation", "listen: 127.0.0.1:4000\nbackends:\n\ta: {url: http://x}\n",
			"x.yaml:3: invalid YAML: found character that cannot start any token (this line is indented with a tab; YAML indents with spaces)"},
		{"unclosed flow list", "models:\n  m:\n    backend: a\n    fallbacks: [a, b\n    rpm: 3\n",
			"x.yaml:4: invalid YAML: did not find expected ',' or ']' (a quote or bracket opened here is not closed)"},
		{"unclosed quote", "listen: 127.0.0.1:4000\nbackends:\n  a: {url: \"http://x}\n\nmodels: {}\n",
			"x.yaml:3: invalid YAML: found unexpected end of stream"},
		{"key without colon after a multi-line flow list", "models:\n  m:\n    backend: a\n    fallbacks: [a,\n      b]\n  n\n",
			"x.yaml:6: invalid YAML: could not find expected ':'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadWithEnv(strings.NewReader(c.src), "x.yaml", env(nil))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("\n got  %v\n want %s", err, c.want)
			}
		})
	}
}

func TestLoad_TypeErrorsNameKeyAndLine(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"string for a number", "listen: 127.0.0.1:4000\nmax_body_bytes: lots\n", `x.yaml:2: max_body_bytes: must be a whole number, not "lots"`},
		{"string for a model limit", "backends:\n  a: {url: http://x}\nmodels:\n  m:\n    backend: a\n    rpm: many\n", `x.yaml:6: models.m.rpm: must be a whole number, not "many"`},
		{"string for a price", "backends:\n  a: {url: http://x}\nmodels:\n  m: {backend: a, input_price: free}\n", `x.yaml:4: models.m.input_price: must be a number, not "free"`},
		{"list for a map", "backends:\n  a:\n    url: http://x\n    headers: [X-A]\n", `x.yaml:4: backends.a.headers: must be a mapping, not a list`},
		{"string for a list", "backends:\n  a: {url: http://x}\nmodels:\n  m: {backend: a, fallbacks: n}\n", `x.yaml:4: models.m.fallbacks: must be a list, not "n"`},
		{"mapping for a string", "backends:\n  a:\n    url: {host: x}\n", `x.yaml:3: backends.a.url: must be a string, not a mapping`},
		{"string for a bool", "backends:\n  a: {url: https://x, tls_skip_verify: maybe}\n", `x.yaml:2: backends.a.tls_skip_verify: must be true or false, not "maybe"`},
		{"string for a section", "listen: 127.0.0.1:4000\nrouting: fast\n", `x.yaml:2: routing: must be a mapping of settings, not "fast"`},
		{"string for a nested section", "routing:\n  circuit_breaker: off\n", `x.yaml:2: routing.circuit_breaker: must be a mapping of settings, not "off"`},
		{"deployment weight", "backends:\n  a: {url: http://x}\nmodels:\n  m:\n    deployments:\n      - {backend: a, weight: heavy}\n", `x.yaml:6: models.m.deployments[0].weight: must be a whole number, not "heavy"`},
		{"health check word", "backends:\n  a: {url: http://x, health_check: sometimes}\n", `x.yaml:2: backends.a.health_check: must be true, false or a mapping {path, interval, timeout}, not "sometimes"`},
		{"engine command quote", "engines:\n  e:\n    cmd: \"vllm 'serve --port ${PORT}\"\n    models: [m]\n", `x.yaml:3: engines.e.cmd: unterminated single quote`},
		{"engine port", "engines:\n  e:\n    cmd: vllm\n    port: auto\n    models: [m]\n", `x.yaml:4: engines.e.port: must be a whole number, not "auto"`},
		{"key written twice", "listen: 127.0.0.1:4000\nlisten: 127.0.0.1:4001\n", `x.yaml:2: mapping key "listen" already defined at line 1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadWithEnv(strings.NewReader(c.src), "x.yaml", env(nil))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("\n got  %v\n want %s", err, c.want)
			}
		})
	}
}

// anthropic_billing_header: remove (the default) or keep, per model, or
// per engine for the models it lists; any other value is an error naming
// the key and line.
func TestLoad_AnthropicBillingHeaderIsRemoveOrKeep(t *testing.T) {
	src := `backends:
  vllm: {url: http://127.0.0.1:8000/v1}
engines:
  llama: {cmd: "llama-server --port ${PORT}", models: [local], anthropic_billing_header: keep}
models:
  plain: {backend: vllm}
  kept: {backend: vllm, anthropic_billing_header: keep}
  removed: {backend: vllm, anthropic_billing_header: remove}
`
	cfg, err := LoadWithEnv(strings.NewReader(src), "llmgate.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, keep := range map[string]bool{"plain": false, "kept": true, "removed": false, "local": true} {
		o, err := cfg.Models[name].ChatOptions()
		if err != nil || o.KeepBillingHeader != keep {
			t.Errorf("%s: KeepBillingHeader = %v (%v), want %v", name, o.KeepBillingHeader, err, keep)
		}
	}
	bad := strings.Replace(src, "kept: {backend: vllm, anthropic_billing_header: keep}", "kept: {backend: vllm, anthropic_billing_header: strip}", 1)
	_, err = LoadWithEnv(strings.NewReader(bad), "llmgate.yaml", env(nil))
	if err == nil || !strings.Contains(err.Error(), "llmgate.yaml:7: models.kept") || !strings.Contains(err.Error(), `anthropic_billing_header must be remove or keep, not "strip"`) {
		t.Errorf("bad value: %v", err)
	}
	bad = strings.Replace(src, "models: [local], anthropic_billing_header: keep", "models: [local], anthropic_billing_header: yes", 1)
	_, err = LoadWithEnv(strings.NewReader(bad), "llmgate.yaml", env(nil))
	if err == nil || !strings.Contains(err.Error(), "llmgate.yaml:4: engines.llama.anthropic_billing_header: must be remove or keep") {
		t.Errorf("bad engine value: %v", err)
	}
}
