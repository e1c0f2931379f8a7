package mcpserver

import (
	"testing"
	"time"
)

func TestNormalizeBaseURL_AcceptsTheFormsPeoplePaste(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:4000", "http://127.0.0.1:4000/v1"},
		{"http://127.0.0.1:4000/", "http://127.0.0.1:4000/v1"},
		{"http://127.0.0.1:4000/v1", "http://127.0.0.1:4000/v1"},
		{"http://127.0.0.1:4000/v1/", "http://127.0.0.1:4000/v1"},
		{" 127.0.0.1:8000 ", "http://127.0.0.1:8000/v1"},
		{"localhost:11434/v1", "http://localhost:11434/v1"},
		{"http://127.0.0.1:4000/v1/chat/completions", "http://127.0.0.1:4000/v1"},
		{"https://api.groq.com/openai/v1", "https://api.groq.com/openai/v1"},
		{"https://generativelanguage.googleapis.com/v1beta/openai/", "https://generativelanguage.googleapis.com/v1beta/openai"},
		{"https://gw.example.com/v1?x=1#frag", "https://gw.example.com/v1"},
	}
	for _, tc := range tests {
		got, err := NormalizeBaseURL(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("NormalizeBaseURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNormalizeBaseURL_RejectsWhatCannotBeAnEndpoint(t *testing.T) {
	for _, in := range []string{"", "ftp://host/v1", "http://", "http://[::1"} {
		if got, err := NormalizeBaseURL(in); err == nil {
			t.Errorf("NormalizeBaseURL(%q) = %q, want an error", in, got)
		}
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfig_FlagsWinOverEnvironmentAndDefaultsFillTheRest(t *testing.T) {
	c := Config{Model: "from-flag"}
	err := c.FromEnv(env(map[string]string{EnvModel: "from-env", EnvAPIKey: " sk-lg-1 "}))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{BaseURL: DefaultBaseURL, APIKey: "sk-lg-1", Model: "from-flag", Timeout: DefaultTimeout}
	if c != want {
		t.Errorf("config = %+v, want %+v", c, want)
	}
}

func TestConfig_TimeoutFromEnvironmentInSecondsOrDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"90": 90 * time.Second, "2.5": 2500 * time.Millisecond, "3m": 3 * time.Minute} {
		var c Config
		if err := c.FromEnv(env(map[string]string{EnvTimeout: in})); err != nil || c.Timeout != want {
			t.Errorf("%s=%s: timeout %v, err %v; want %v", EnvTimeout, in, c.Timeout, err, want)
		}
	}
	for _, bad := range []string{"0", "-5", "soon"} {
		var c Config
		if err := c.FromEnv(env(map[string]string{EnvTimeout: bad})); err == nil {
			t.Errorf("%s=%s accepted", EnvTimeout, bad)
		}
	}
}
