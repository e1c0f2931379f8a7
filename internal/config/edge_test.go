package config

import (
	"strings"
	"testing"
	"time"
)

// The edge's settings: connections are capped at DefaultMaxConnections
// unless max_connections says otherwise (0 = no cap).
func TestLoad_EdgeSettingsDefaults(t *testing.T) {
	cfg, err := LoadWithEnv(strings.NewReader("backends:\n  a: {url: http://127.0.0.1:8000}\n"), "x.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnectionLimit() != DefaultMaxConnections || len(cfg.Warnings) != 0 {
		t.Fatalf("defaults: connection limit %d, warnings %q", cfg.ConnectionLimit(), cfg.Warnings)
	}
	for src, want := range map[string]int{"max_connections: 0\n": 0, "max_connections: 100\n": 100} {
		cfg, err = LoadWithEnv(strings.NewReader(src), "x.yaml", env(nil))
		if err != nil || cfg.ConnectionLimit() != want {
			t.Fatalf("%q gives %d (%v), want %d", src, cfg.ConnectionLimit(), err, want)
		}
	}
}

// A config written for an earlier version, naming the removed transport
// switches (http_server, socket_io, upstream_client, at the top or in a
// backend), still loads: each line gets a warning naming it and saying it
// is ignored, whatever its value.
func TestLoad_RetiredTransportSettingsWarnAndLoad(t *testing.T) {
	src := "http_server: builtin\nsocket_io: raw\nupstream_client: stdlib\nbackends:\n  a:\n    url: http://127.0.0.1:8000\n    upstream_client: nonsense\n"
	cfg, err := LoadWithEnv(strings.NewReader(src), "x.yaml", env(nil))
	if err != nil {
		t.Fatalf("a config with retired settings does not load: %v", err)
	}
	want := []string{"x.yaml:1: http_server: is ignored now", "x.yaml:2: socket_io: is ignored now", "x.yaml:3: upstream_client: is ignored now",
		"x.yaml:7: backends.a.upstream_client: is ignored now"}
	if len(cfg.Warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", cfg.Warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(cfg.Warnings[i], w) || !strings.Contains(cfg.Warnings[i], "delete the line") {
			t.Errorf("warning %d = %q, want it to start with %q and say to delete the line", i, cfg.Warnings[i], w)
		}
	}
	if cfg.Backends["a"].BaseURL != "http://127.0.0.1:8000/v1" {
		t.Fatalf("the rest of the file was not applied: backend a = %+v", cfg.Backends["a"])
	}
}

func TestLoad_EdgeSettingsErrorsNameKeyAndLine(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"negative max_connections", "max_connections: -1\n", `x.yaml:1: max_connections: must be a number of connections, or 0 for no cap`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadWithEnv(strings.NewReader(c.src), "x.yaml", env(nil))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestShutdownTimeout_DefaultAndSet: shutdown_timeout bounds how long a
// stopping gateway waits for requests in flight.
func TestShutdownTimeout_DefaultAndSet(t *testing.T) {
	cfg, err := LoadWithEnv(strings.NewReader("listen: 127.0.0.1:4000\n"), "x.yaml", env(nil))
	if err != nil || cfg.ShutdownWait() != DefaultShutdownTimeout {
		t.Fatalf("default: %v %v", cfg.ShutdownWait(), err)
	}
	cfg, err = LoadWithEnv(strings.NewReader("shutdown_timeout: 2m\n"), "x.yaml", env(nil))
	if err != nil || cfg.ShutdownWait() != 2*time.Minute {
		t.Fatalf("2m: %v %v", cfg.ShutdownWait(), err)
	}
	if _, err = LoadWithEnv(strings.NewReader("shutdown_timeout: -1s\n"), "x.yaml", env(nil)); err == nil || !strings.Contains(err.Error(), "x.yaml:1: shutdown_timeout: must not be negative") {
		t.Fatalf("negative: %v", err)
	}
}
