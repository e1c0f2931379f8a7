package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEngines_ConfigDefinesModelsAndKeepsPortPlaceholder(t *testing.T) {
	src := `
engines:
  vllm-7b:
    cmd: vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name qwen2.5-7b --port ${PORT} --api-key '${SECRET}'
    env: {CUDA_VISIBLE_DEVICES: "0"}
    models: [qwen2.5-7b]
    group: gpu0
    ttl: 10m
  llama:
    cmd: ["llama-server", "-m", "/models/q.gguf", "--port", "${PORT}", "--alias", "qwen-small"]
    models: [qwen-small]
    group: gpu0
    stop_signal: SIGINT
    startup_timeout: 2m
`
	cfg, err := LoadWithEnv(strings.NewReader(src), "t.yaml", func(k string) (string, bool) {
		if k == "SECRET" {
			return "s3cret", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Engines["vllm-7b"]
	want := []string{"vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--served-model-name", "qwen2.5-7b", "--port", "${PORT}", "--api-key", "s3cret"}
	if !reflect.DeepEqual([]string(e.Cmd), want) {
		t.Fatalf("cmd = %q, want %q", e.Cmd, want)
	}
	if e.HealthPath != "/health" || time.Duration(e.HealthInterval) != DefaultEngineHealthInterval || time.Duration(e.TTL) != 10*time.Minute ||
		e.MaxQueue != DefaultEngineMaxQueue || e.Signal().String() != "terminated" {
		t.Fatalf("defaults: %+v", e)
	}
	if cfg.Engines["llama"].Signal().String() != "interrupt" {
		t.Fatalf("stop_signal SIGINT read as %v", cfg.Engines["llama"].Signal())
	}
	m := cfg.Models["qwen2.5-7b"]
	if m == nil || m.Engine != "vllm-7b" || m.Backend != "vllm-7b" || m.UpstreamModel != "qwen2.5-7b" {
		t.Fatalf("engine model: %+v", m)
	}
	b := cfg.Backends["vllm-7b"]
	if b == nil || b.BaseURL != "http://127.0.0.1:0/v1" {
		t.Fatalf("engine backend before binding: %+v", b)
	}
	if err := cfg.BindEngine("vllm-7b", 45123); err != nil {
		t.Fatal(err)
	}
	if b.BaseURL != "http://127.0.0.1:45123/v1" || cfg.Engines["vllm-7b"].Port != 45123 {
		t.Fatalf("after binding: backend %s, port %d", b.BaseURL, cfg.Engines["vllm-7b"].Port)
	}
	// Defaults and validation run again on reload-like paths without harm.
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("validate after binding: %v", err)
	}
}

func TestEngines_ValidationNamesKeyAndLine(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"no cmd", "engines:\n  e1:\n    models: [m]\n", "t.yaml:2: engines.e1.cmd: is required"},
		{"no port", "engines:\n  e1:\n    cmd: vllm serve x\n    models: [m]\n", "t.yaml:2: engines.e1.cmd: does not mention ${PORT}"},
		{"no models", "engines:\n  e1:\n    cmd: x --port ${PORT}\n", "t.yaml:2: engines.e1.models: is required"},
		{"typo", "engines:\n  e1:\n    cmd: x --port ${PORT}\n    modles: [m]\n", `t.yaml:4: engines.e1.modles: unknown key "modles"; did you mean "models"?`},
		{"model twice", "backends:\n  b: {url: http://h:1}\nmodels:\n  m: {backend: b}\nengines:\n  e1:\n    cmd: x --port ${PORT}\n    models: [m]\n",
			`t.yaml:6: engines.e1.models: model "m" is also defined under models: (line 4)`},
		{"two engines", "engines:\n  e1:\n    cmd: x --port ${PORT}\n    models: [m]\n  e2:\n    cmd: y --port ${PORT}\n    models: [m]\n",
			`t.yaml:5: engines.e2.models: model "m" is also served by engine "e1"`},
		{"backend name", "backends:\n  e1: {url: http://h:1}\nengines:\n  e1:\n    cmd: x --port ${PORT}\n    models: [m]\n",
			"t.yaml:4: engines.e1: a backend has the same name"},
		{"signal", "engines:\n  e1:\n    cmd: x --port ${PORT}\n    models: [m]\n    stop_signal: SIGFOO\n", `engines.e1.stop_signal: unknown signal "SIGFOO"`},
		{"always_on in group", "engines:\n  e1:\n    cmd: x --port ${PORT}\n    models: [m]\n    group: g\n    always_on: true\n  e2:\n    cmd: y --port ${PORT}\n    models: [n]\n    group: g\n",
			`engines.e1.always_on: an always_on engine cannot share group "g" with e2`},
		{"quote", "engines:\n  e1:\n    cmd: x --port ${PORT} 'unterminated\n    models: [m]\n", "unterminated single quote"},
	}
	for _, c := range cases {
		_, err := Load(strings.NewReader(c.src), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestSplitCommand_QuotesLikeAShell(t *testing.T) {
	got, err := SplitCommand(`trtllm-serve "/models/Qwen 7B" --host 127.0.0.1 --port ${PORT} --extra 'a b' c\ d "say \"hi\"" \` + "\n" + ` --last`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"trtllm-serve", "/models/Qwen 7B", "--host", "127.0.0.1", "--port", "${PORT}", "--extra", "a b", "c d", `say "hi"`, "--last"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
