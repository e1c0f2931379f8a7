package testenv

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The version stamp of the binaries BuildLLMGate and SharedLLMGate build:
// the -X flags of scripts/build.sh with known values, so that a test can
// check that each reaches `llmgate version` (the linker ignores a misspelt
// name silently).
const (
	StampVersion      = "v9.8.7-test"
	StampRevision     = "feedface0123"
	StampRevisionTime = "2030-01-02T03:04:05Z"
)

// buildFlags are the go command's flags for a test binary: stamped like a
// release (without VCS information, which would win over the stamped
// revision), and otherwise built as `go build` builds.
var buildFlags = []string{"-buildvcs=false", "-ldflags",
	"-X main.version=" + StampVersion + " -X main.revision=" + StampRevision +
		" -X main.revisionTime=" + StampRevisionTime + " -X main.modified=true"}

// buildEnv is the environment of the go command that builds the binary:
// the process's as it started, before any test's t.Setenv (a HOME of a
// test's own would send the go command to an empty build cache).
var buildEnv = os.Environ()

// BuildLLMGate builds the llmgate binary into dir and returns its path.
func BuildLLMGate(dir string) (string, error) {
	bin := filepath.Join(dir, "llmgate")
	cmd := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", bin, "llmgate/cmd/llmgate")...)
	cmd.Env = buildEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// shared is the binary SharedLLMGate returns, found or built once per test
// process.
var shared struct {
	once sync.Once
	dir  string // a directory of our own to remove, when one was needed
	bin  string
	err  error
}

// SharedLLMGate returns an llmgate binary for the source as it is now
// (stamped with StampVersion and the rest), the same path for every test of
// the process. It asks `go run -exec echo` for
// it: the go command caches the linked executable in its build cache (keyed
// by everything it was built from, as it keys compiled packages), so the
// packages of one `go test ./...` and later runs share one link instead of
// one each (a link of this 55 MB binary takes seconds on a busy machine). If
// the go command did not leave the executable in its cache, it is built
// into a temporary directory that RemoveSharedLLMGate removes; a package
// that uses SharedLLMGate calls that from TestMain after m.Run.
func SharedLLMGate(t testing.TB) string {
	t.Helper()
	bin, err := SharedLLMGateBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// SharedLLMGateBinary is SharedLLMGate for TestMain, which has no test to
// fail.
func SharedLLMGateBinary() (string, error) {
	shared.once.Do(func() { shared.bin, shared.err = sharedLLMGate() })
	return shared.bin, shared.err
}

func sharedLLMGate() (string, error) {
	// The first run links into a work directory the go command removes on
	// exit and stores the executable in its cache; the second finds it there.
	for range 2 {
		args := append(append([]string{"run"}, buildFlags...), "-exec", "echo", "llmgate/cmd/llmgate")
		cmd := exec.Command("go", args...)
		cmd.Env = buildEnv
		out, err := cmd.Output()
		if err != nil {
			break
		}
		bin := strings.TrimSpace(string(out))
		if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return bin, nil
		}
	}
	dir, err := os.MkdirTemp("", "llmgate-test-bin-")
	if err != nil {
		return "", err
	}
	shared.dir = dir
	return BuildLLMGate(dir)
}

// PrefetchSharedLLMGate starts getting the shared binary in the
// background when the whole package runs (neither -short nor -run), so that
// its link overlaps the tests that need no binary. TestMain calls it after
// flag.Parse.
func PrefetchSharedLLMGate() {
	if testing.Short() {
		return
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return
	}
	go func() { _, _ = SharedLLMGateBinary() }()
}

// RemoveSharedLLMGate removes the binary SharedLLMGate built, if it built
// one outside the go command's cache (waiting for a build under way).
func RemoveSharedLLMGate() {
	shared.once.Do(func() {})
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
}

// SyncBuffer is a bytes.Buffer a process may write while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns a loopback address nothing listens on at the moment.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Gateway is one `llmgate serve` process started by a test.
type Gateway struct {
	Name string
	Addr string // host:port it listens on
	Base string // http://Addr
	Log  *SyncBuffer
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, set before done closes
}

// StartGateway runs `bin serve --config config --listen <a free address>`
// with the master key master and the console off, waits until /healthz
// answers 200 (30 s at most) and stops it gracefully when the test ends.
// env entries (KEY=value) are added to the environment.
func StartGateway(t testing.TB, bin, name, config, master string, env ...string) *Gateway {
	t.Helper()
	g := &Gateway{Name: name, Addr: FreeAddr(t), Log: &SyncBuffer{}, done: make(chan struct{})}
	g.Base = "http://" + g.Addr
	g.cmd = exec.Command(bin, "serve", "--config", config, "--listen", g.Addr)
	g.cmd.Env = append(append(os.Environ(), "LLMGATE_MASTER_KEY="+master, "LLMGATE_CONSOLE=off"), env...)
	g.cmd.Stdout, g.cmd.Stderr = g.Log, g.Log
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		g.err = g.cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() { g.Stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(g.Base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
		select {
		case <-g.done:
			t.Fatalf("gateway %s exited at start (%v):\n%s", name, g.err, g.Log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s did not answer /healthz within 30s: %v\n%s", name, err, g.Log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PID returns the process id.
func (g *Gateway) PID() int { return g.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (g *Gateway) Exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits (40 s at most) for the graceful shutdown,
// which flushes the ledger; a non-zero exit fails the test. Stopping a
// gateway that has exited does nothing.
func (g *Gateway) Stop(t testing.TB) {
	t.Helper()
	if g.Exited() {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
		if g.err != nil {
			t.Errorf("gateway %s exited with %v\n%s", g.Name, g.err, g.Log.String())
		}
	case <-time.After(40 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
		t.Errorf("gateway %s did not shut down within 40s\n%s", g.Name, g.Log.String())
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (g *Gateway) Kill(t testing.TB) {
	t.Helper()
	if g.Exited() {
		return
	}
	if err := g.cmd.Process.Signal(syscall.SIGKILL); err != nil && !g.Exited() {
		t.Fatalf("kill gateway %s: %v", g.Name, err)
	}
	<-g.done
}
