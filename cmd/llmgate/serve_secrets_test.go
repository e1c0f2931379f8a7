package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/testenv"
)

// The start-up log names the database without its password: a
// postgres:// URL with user:password@ (the test server trusts loopback, so
// any password connects).
func TestServe_StartUpLogHidesTheDatabasePassword(t *testing.T) {
	cleanCLIEnv(t)
	u, err := url.Parse(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-pw"
	u.User = url.UserPassword(u.User.Username(), secret)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "llmgate.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\ndatabase: %q\nspool_dir: %q\nbackends:\n  up: {url: http://127.0.0.1:9/v1}\nmodels:\n  m: {backend: up}\n",
		u.String(), filepath.Join(dir, "spool"))), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &testenv.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, serveFlags{config: cfg}, out) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "llmgate listening") {
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", out)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	log := out.String()
	if strings.Contains(log, secret) {
		t.Fatalf("the start-up log shows the database password:\n%s", log)
	}
	if !strings.Contains(log, u.Scheme+"://"+u.User.Username()+":xxxxx@"+u.Host) {
		t.Fatalf("the start-up log does not name the database (password hidden):\n%s", log)
	}
}
