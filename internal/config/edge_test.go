package config

import (
	"strings"
	"testing"
	"time"
)

// The edge's settings: Go's net/http serves by default, connections are
// capped at DefaultMaxConnections unless max_connections says otherwise
// (0 = no cap), and a backend's upstream_client defaults to the top-level
// one, itself empty (the builtin client).
func TestLoad_EdgeSettingsDefaults(t *testing.T) {
	cfg, err := LoadWithEnv(strings.NewReader("backends:\n  a: {url: http://127.0.0.1:8000}\n"), "x.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPServer != HTTPServerStdlib || cfg.ConnectionLimit() != DefaultMaxConnections || cfg.Backends["a"].UpstreamClient != "" {
		t.Fatalf("defaults: http_server %q, connection limit %d, upstream_client %q", cfg.HTTPServer, cfg.ConnectionLimit(), cfg.Backends["a"].UpstreamClient)
	}

	src := "http_server: builtin\nmax_connections: 0\nupstream_client: stdlib\nbackends:\n  a: {url: http://127.0.0.1:8000}\n  b: {url: http://127.0.0.1:8001, upstream_client: builtin}\n"
	cfg, err = LoadWithEnv(strings.NewReader(src), "x.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPServer != HTTPServerBuiltin || cfg.ConnectionLimit() != 0 {
		t.Fatalf("http_server %q, connection limit %d", cfg.HTTPServer, cfg.ConnectionLimit())
	}
	if a, b := cfg.Backends["a"].UpstreamClient, cfg.Backends["b"].UpstreamClient; a != UpstreamClientStdlib || b != UpstreamClientBuiltin {
		t.Fatalf("upstream_client: a inherits %q (want stdlib), b keeps %q (want builtin)", a, b)
	}
	cfg, err = LoadWithEnv(strings.NewReader("max_connections: 100\n"), "x.yaml", env(nil))
	if err != nil || cfg.ConnectionLimit() != 100 {
		t.Fatalf("max_connections: 100 gives %d (%v)", cfg.ConnectionLimit(), err)
	}
}

func TestLoad_EdgeSettingsErrorsNameKeyAndLine(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"bad upstream_client", "listen: 127.0.0.1:4000\nupstream_client: curl\n", `x.yaml:2: upstream_client: must be builtin or stdlib, not "curl"`},
		{"bad backend upstream_client", "backends:\n  a: {url: http://x, upstream_client: curl}\n", `backends.a.upstream_client: must be builtin or stdlib, not "curl"`},
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
