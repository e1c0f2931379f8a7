package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/engine"
	"llmgate/internal/ledger"
	"llmgate/internal/router"
	"llmgate/internal/testenv"
	"llmgate/internal/testenv/testdb"
)

// startFileGW starts a gateway from a config file and returns it with a
// reloader for that file.
func startFileGW(t *testing.T, path string, logw io.Writer) (*faultGW, *Reloader) {
	t.Helper()
	return startFileGWWith(t, path, logw, nil)
}

// startFileGWWith is startFileGW with leaser (when set) as the tables'
// Leaser in place of the engine manager.
func startFileGWWith(t *testing.T, path string, logw io.Writer, leaser router.Leaser) (*faultGW, *Reloader) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(fh, path)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.SQLite(t, t.TempDir(), "llmgate.db")
	adjust := func(c *config.Config) { c.Database, c.Listen = db, "127.0.0.1:0" }
	adjust(cfg)
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster,
		Logger: slog.New(slog.NewTextHandler(logw, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}, Leaser: leaser})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	r := NewReloader(g, path, cfg)
	r.Adjust = adjust
	return &faultGW{t: t, g: g}, r
}

func TestReload_UnderLoadFailsNoRequest(t *testing.T) {
	a := newUpstream(t, "a", slow(3*time.Millisecond))
	b := newUpstream(t, "b", slow(3*time.Millisecond))
	versions := []string{
		fmt.Sprintf("backends:\n  a: {url: %s}\n  b: {url: %s}\nmodels:\n  m: {backend: a}\n", a.URL, b.URL),
		fmt.Sprintf("backends:\n  a: {url: %s}\n  b: {url: %s}\nmodels:\n  m: {backend: b}\n  extra: {backend: a}\n", a.URL, b.URL),
		// Changed settings: backend a gets a new transport, the old one is
		// closed while requests may still be running on it.
		fmt.Sprintf("backends:\n  a: {url: %s, timeout: 30s}\n  b: {url: %s}\nmodels:\n  m:\n    deployments: [{backend: a}, {backend: b}]\n", a.URL, b.URL),
	}
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	if err := os.WriteFile(path, []byte(versions[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, r := startFileGW(t, path, io.Discard)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served, failed atomic.Int64
	var firstFailure atomic.Value
	// done hears of the answers that arrive while the test waits for them
	// (unbuffered: a send succeeds only then), so each reload below follows
	// fresh answers and lands while the other clients' requests are in
	// flight.
	done := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(stream bool) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, _, body := gw.chat("m", stream)
				if code != 200 || !strings.Contains(body, "from") || strings.Contains(body, `"error"`) {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%d %s", code, body))
				} else {
					served.Add(1)
				}
				select {
				case done <- struct{}{}:
				default:
				}
			}
		}(i%2 == 0)
	}
	answers := func(n int) { // n more answers, to anyone
		t.Helper()
		timeout := time.After(10 * time.Second)
		for range n {
			select {
			case <-done:
			case <-timeout:
				t.Fatalf("no answer for 10s (served %d, failed %d)", served.Load(), failed.Load())
			}
		}
	}
	for i := 1; i <= 6; i++ {
		answers(8)
		if err := os.WriteFile(path, []byte(versions[i%len(versions)]), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := r.Reload(); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	answers(8)
	close(stop)
	wg.Wait()
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d of %d requests failed during reloads; first: %v", f, f+served.Load(), firstFailure.Load())
	}
	if r.Reloads() != 6 || served.Load() < 20 || a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Fatalf("reloads %d, served %d, a %d, b %d: want 6 reloads and traffic on both backends", r.Reloads(), served.Load(), a.hits.Load(), b.hits.Load())
	}
	t.Logf("%d requests served across 6 reloads (a %d, b %d)", served.Load(), a.hits.Load(), b.hits.Load())
}

func TestReload_InvalidFileIsRejectedAndOldConfigKept(t *testing.T) {
	a := newUpstream(t, "a", answer)
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	good := fmt.Sprintf("backends:\n  a: {url: %s}\nmodels:\n  m: {backend: a}\n", a.URL)
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	gw, r := startFileGW(t, path, logs)
	bad := good + "  typo: {backend: nosuch}\n"
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	err := r.Reload()
	if err == nil || !strings.Contains(err.Error(), `unknown backend "nosuch"`) || !strings.Contains(err.Error(), ":5:") {
		t.Fatalf("err = %v; want the reason with its line", err)
	}
	if !strings.Contains(logs.String(), "config reload rejected") || !strings.Contains(logs.String(), "nosuch") {
		t.Fatalf("the rejection was not logged with its reason: %s", logs.String())
	}
	if code, _, body := gw.chat("m", false); code != 200 || !strings.Contains(body, "from a") {
		t.Fatalf("after a rejected reload: %d %s", code, body)
	}
	if code, _, _ := gw.chat("typo", false); code != 404 {
		t.Fatalf("the rejected file's model is served: %d", code)
	}
}

func TestReload_NewEngineIsRejectedUntilRestart(t *testing.T) {
	a := newUpstream(t, "a", answer)
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	good := fmt.Sprintf("backends:\n  a: {url: %s}\nmodels:\n  m: {backend: a}\n", a.URL)
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, r := startFileGW(t, path, &testenv.SyncBuffer{})
	withEngine := good + "engines:\n  e1: {cmd: \"sleep 60 ${PORT}\", models: [em]}\n"
	if err := os.WriteFile(path, []byte(withEngine), 0o600); err != nil {
		t.Fatal(err)
	}
	err := r.Reload()
	if err == nil || !strings.Contains(err.Error(), "needs a gateway restart") {
		t.Fatalf("err = %v; want a rejection naming the restart", err)
	}
	if code, _, _ := gw.chat("em", false); code != 404 {
		t.Fatalf("the new engine's model is routed to a port that does not exist: %d", code)
	}
	if code, _, _ := gw.chat("m", false); code != 200 {
		t.Fatalf("the running config was not kept: %d", code)
	}
}

// An engine that a reload replaces by a plain backend of the same name:
// the model's requests go to that backend and take no engine lease (which
// would start the old engine's process and wait for it).
func TestReload_EngineReplacedByAPlainBackendTakesNoLease(t *testing.T) {
	a := newUpstream(t, "a", answer)
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	withEngine := fmt.Sprintf("backends:\n  a: {url: %s}\nmodels:\n  m: {backend: a}\n", a.URL) +
		"engines:\n  e1: {cmd: \"sleep 60 ${PORT}\", models: [em], startup_timeout: 2s}\n"
	if err := os.WriteFile(path, []byte(withEngine), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, r := startFileGW(t, path, &testenv.SyncBuffer{})
	if gw.g.Engines == nil || !gw.g.Engines.Manages("e1") {
		t.Fatal("the engine is not managed before the reload: the test shows nothing")
	}
	plain := fmt.Sprintf("backends:\n  a: {url: %s}\n  e1: {url: %s}\nmodels:\n  m: {backend: a}\n  em: {backend: e1}\n", a.URL, a.URL)
	if err := os.WriteFile(path, []byte(plain), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	before := a.hits.Load()
	if code, _, body := gw.chat("em", false); code != 200 {
		t.Fatalf("em after the reload: %d %s; want the plain backend's answer", code, body)
	}
	if a.hits.Load() != before+1 {
		t.Fatalf("the plain backend e1 was not asked (hits %d -> %d)", before, a.hits.Load())
	}
	if st, err := gw.g.Engines.Get("e1"); err != nil || st.Starts != 0 {
		t.Fatalf("engine e1 %+v (%v): the retired engine was started", st, err)
	}
	if st := gw.g.Engines.List(); len(st) != 0 {
		t.Fatalf("engines list %+v: a retired engine that is not running is still listed", st)
	}
}

// A reload that removes a running engine (here an always_on one, still
// starting) stops its process: the GPU is freed, not held until the next
// restart of the gateway.
func TestReload_RemovedEngineIsStopped(t *testing.T) {
	a := newUpstream(t, "a", answer)
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	good := fmt.Sprintf("backends:\n  a: {url: %s}\nmodels:\n  m: {backend: a}\n", a.URL)
	withEngine := good + "engines:\n  e1: {cmd: \"sleep 60 ${PORT}\", models: [em], always_on: true, startup_timeout: 60s}\n"
	if err := os.WriteFile(path, []byte(withEngine), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, r := startFileGW(t, path, &testenv.SyncBuffer{})
	state := func() engine.State { st, _ := gw.g.Engines.Get("e1"); return st.State }
	testenv.Eventually(t, 10*time.Second, func() bool { return state() == engine.StateStarting }, "the always_on engine to start")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return state() == engine.StateStopped }, "the removed engine to stop")
	if code, _, _ := gw.chat("m", false); code != 200 {
		t.Fatalf("the reloaded config does not serve: %d", code)
	}
	// Gone from the list once stopped, and not to be started by hand.
	if st := gw.g.Engines.List(); len(st) != 0 {
		t.Fatalf("engines list %+v: the removed engine is still listed after it stopped", st)
	}
	err := gw.g.Engines.Load(context.Background(), "e1")
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || !strings.Contains(ae.Message, "removed from the config") {
		t.Fatalf("engines start e1 after its removal: %v; want 404 saying it was removed", err)
	}
}

// Settings a reload cannot apply are named in a warning; a Redis URL is
// printed without its password.
func TestReload_WarnsAboutRestartOnlySettings(t *testing.T) {
	a := newUpstream(t, "a", answer)
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	good := fmt.Sprintf("backends:\n  a: {url: %s}\nmodels:\n  m: {backend: a}\n", a.URL)
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	gw, r := startFileGW(t, path, logs)
	changed := good + "redis: redis://:s3cret@127.0.0.1:1/0\nredis_prefix: \"other:\"\nredis_fail_open: true\nredis_replicas: 3\nretention: 30d\n" +
		"metrics_key: s3cret-metrics\n"
	if err := os.WriteFile(path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, key := range []string{"redis", "redis_prefix", "redis_fail_open", "redis_replicas", "retention", "metrics_key"} {
		if !strings.Contains(out, "needs a restart to take effect\" key="+key+" ") && !strings.Contains(out, "needs a restart to take effect\" key="+key+"\n") {
			t.Errorf("no restart warning for %s:\n%s", key, out)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("a password or key was logged:\n%s", out)
	}
	if !strings.Contains(out, "redis://:xxxxx@127.0.0.1:1/0") {
		t.Errorf("the new Redis URL is not shown (password hidden):\n%s", out)
	}
	if code, _, _ := gw.chat("m", false); code != 200 {
		t.Fatalf("after the reload: %d", code)
	}
}

// A file that names a removed transport setting still reloads; the log
// says, naming the line, that the setting is ignored now.
func TestReload_RetiredSettingIsWarnedAboutNotRejected(t *testing.T) {
	a := newUpstream(t, "a", answer)
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	good := fmt.Sprintf("backends:\n  a: {url: %s}\nmodels:\n  m: {backend: a}\n", a.URL)
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	gw, r := startFileGW(t, path, logs)
	if err := os.WriteFile(path, []byte(good+"socket_io: raw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatalf("a file naming socket_io was rejected: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, "llmgate.yaml:5: socket_io: is ignored now") || strings.Contains(out, "reload rejected") {
		t.Fatalf("want a warning naming line 5 and no rejection:\n%s", out)
	}
	if code, _, _ := gw.chat("m", false); code != 200 {
		t.Fatalf("after the reload: %d", code)
	}
}
