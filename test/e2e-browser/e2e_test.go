// Package e2ebrowser drives the web console in a real browser: Debian's
// chromium controlled by playwright-core (npm), against `llmgate serve
// --demo`. Outside CI the test skips, loudly, when node_modules or
// chromium are missing; in CI (CI=true) that is a failure.
package e2ebrowser

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/testenv"
)

// prerequisites returns what is missing to run the browser test.
func prerequisites(chromium string) []string {
	var missing []string
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node (Node.js 20+)")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "playwright-core", "package.json")); err != nil {
		missing = append(missing, "node_modules/playwright-core (run: npm ci --prefix test/e2e-browser)")
	}
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium+" (run: apt-get install -y chromium)")
	}
	return missing
}

func TestConsole_BrowserSignInKeysUsagePlayground(t *testing.T) {
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if missing := prerequisites(chromium); len(missing) > 0 {
		msg := "browser end-to-end test cannot run; missing: " + strings.Join(missing, "; ")
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED (not CI): " + msg)
	}
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := testenv.SharedLLMGate(t)

	addr := freeAddr(t)
	var rb [18]byte
	_, _ = rand.Read(rb[:])
	master := "sk-lg-e2e-" + hex.EncodeToString(rb[:])
	var serverLog bytes.Buffer
	srv := exec.Command(bin, "serve", "--demo", "--listen", addr, "--data", filepath.Join(tmp, "data"))
	srv.Env = append(os.Environ(), "LLMGATE_MASTER_KEY="+master)
	srv.Stdout, srv.Stderr = &serverLog, &serverLog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	defer func() {
		_ = srv.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", serverLog.String())
		}
	}()
	base := "http://" + addr
	waitHealthy(t, base, exited)

	screens := os.Getenv("SCREENS_DIR")
	if screens == "" {
		screens = filepath.Join(root, ".ci", "out", "screens")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "e2e.mjs")
	node.Env = append(os.Environ(), "BASE_URL="+base, "MASTER_KEY="+master, "SCREENS_DIR="+screens, "CHROMIUM="+chromium)
	out, err := node.CombinedOutput()
	t.Logf("browser run:\n%s", out)
	if err != nil {
		t.Fatalf("browser test failed: %v", err)
	}
	if !strings.Contains(string(out), "[e2e] PASS") {
		t.Fatal("browser test ended without PASS")
	}
	shots, _ := filepath.Glob(filepath.Join(screens, "*.png"))
	if len(shots) < 8 {
		t.Fatalf("want at least 8 screenshots in %s, got %d", screens, len(shots))
	}
	t.Logf("screenshots: %s", screens)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHealthy(t *testing.T, base string, exited <-chan error) {
	t.Helper()
	if _, ok := testenv.Poll(30*time.Second, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("llmgate serve --demo exited early: %v", err)
		default:
		}
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); !ok {
		t.Fatalf("gateway at %s not healthy after 30s", base)
	}
}
