package main

import (
	"context"
	"encoding/json"
	"io"
	"llmgate/internal/testenv"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// cleanCLIEnv clears the variables the CLI reads, so that a developer's
// shell does not steer the test.
func cleanCLIEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"LLMGATE_URL", "LLMGATE_MASTER_KEY", "LLMGATE_CONFIG", "LLMGATE_API_KEY", "LLMGATE_BASE_URL"} {
		t.Setenv(v, "")
	}
}

// testDemo is a demo started in process by a test.
type testDemo struct {
	*demo
	once sync.Once
}

// startTestDemo starts the demo of `serve --demo` in process on a free port.
func startTestDemo(t *testing.T) *testDemo {
	t.Helper()
	d, err := startDemo(context.Background(), serveFlags{listen: "127.0.0.1:0", dataDir: t.TempDir()},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	td := &testDemo{demo: d}
	t.Cleanup(td.stop)
	return td
}

// stop stops the demo; later calls do nothing.
func (d *testDemo) stop() {
	d.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.g.Close(ctx)
		d.stopEngines()
	})
}

// chat sends one chat completion with key and returns the status and body.
func chat(t *testing.T, baseURL, key string) (int, string) {
	t.Helper()
	return chatModel(t, baseURL, key, "qwen2.5-7b-instruct")
}

// chatModel sends one chat completion for model ("" key: none).
func chatModel(t *testing.T, baseURL, key, model string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, strings.TrimRight(baseURL, "/")+"/chat/completions",
		strings.NewReader(`{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"Hello!"}]}`))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func createdSecret(t *testing.T, stdout string) string {
	t.Helper()
	var is struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal([]byte(stdout), &is); err != nil || !strings.HasPrefix(is.Key, "sk-lg-") {
		t.Fatalf("keys create --format json printed %q (%v)", stdout, err)
	}
	return is.Key
}

func TestKeysCreate_AgainstARunningDemoWorksOnItsFirstRequest(t *testing.T) {
	cleanCLIEnv(t)
	d := startTestDemo(t)
	root := strings.TrimSuffix(d.g.URL(), "/v1")
	stdout, stderr, err := runCLI(t, "keys", "create", "--url", root, "--master-key", d.master, "--name", "first-request", "--format", "json")
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, stderr)
	}
	key := createdSecret(t, stdout)
	// At once: no sleep, no retry. The admin API reloads the key cache
	// before it answers, so the very next request knows the key.
	if status, body := chat(t, d.g.URL(), key); status != http.StatusOK || !strings.Contains(body, `"choices"`) {
		t.Fatalf("first request with the new key: %d %s", status, body)
	}
}

func TestKeysAndUsage_FindTheGatewayAtTheConfiguredListenAddress(t *testing.T) {
	cleanCLIEnv(t)
	d := startTestDemo(t)
	cfgPath := filepath.Join(t.TempDir(), "llmgate.yaml")
	// The demo's database is not this config's: finding the gateway must
	// not depend on reading its database. Nor on the providers' keys: a
	// backend whose key is not in this environment does not matter to
	// keys and usage, which need only the listen address.
	t.Setenv("DASHSCOPE_API_KEY", "")
	cfg := "listen: " + d.g.Addr + "\ndatabase: " + filepath.Join(t.TempDir(), "other.db") + "\n" +
		"backends:\n  dashscope: {provider: dashscope}\nmodels:\n  qwen-plus: {backend: dashscope}\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LLMGATE_MASTER_KEY", d.master)
	stdout, stderr, err := runCLI(t, "keys", "create", "-c", cfgPath, "--name", "found", "--format", "json")
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, stderr)
	}
	if want := "using the gateway at http://" + d.g.Addr; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q does not say %q", stderr, want)
	}
	key := createdSecret(t, stdout)
	if status, body := chat(t, d.g.URL(), key); status != http.StatusOK {
		t.Fatalf("first request with the new key: %d %s", status, body)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(cfgPath), "llmgate.db")); !os.IsNotExist(err) {
		t.Errorf("a database was created next to the config: %v", err)
	}
	// The ledger writes in batches: wait (boundedly) for the record.
	if _, ok := testenv.Poll(5*time.Second, func() bool {
		stdout, stderr, err = runCLI(t, "usage", "-c", cfgPath, "--format", "json", "--by", "key")
		if err != nil {
			t.Fatalf("usage: %v\n%s", err, stderr)
		}
		return strings.Contains(stdout, `"key_name": "found"`)
	}); !ok {
		t.Fatalf("usage from the gateway lacks the request of key %q:\n%s", "found", stdout)
	}
}

func TestKeys_GatewayWithoutMasterKeySaysHowToPassIt(t *testing.T) {
	cleanCLIEnv(t)
	d := startTestDemo(t)
	t.Setenv("LLMGATE_URL", "http://"+d.g.Addr)
	_, _, err := runCLI(t, "keys", "list")
	if err == nil || !strings.Contains(err.Error(), "pass --master-key or set LLMGATE_MASTER_KEY") {
		t.Fatalf("err = %v", err)
	}
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestKeys_FallBackToTheDatabaseAndSayWhichFile(t *testing.T) {
	cleanCLIEnv(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "gw.db")
	// Prepare the database as an operator would before the first start.
	if _, stderr, err := runCLI(t, "keys", "create", "--database", db, "--name", "offline"); err != nil {
		t.Fatalf("keys create --database: %v\n%s", err, stderr)
	} else if !strings.Contains(stderr, "using the database "+db) {
		t.Errorf("stderr %q does not name the database", stderr)
	}
	addr := closedAddr(t)
	cfgPath := filepath.Join(dir, "llmgate.yaml")
	if err := os.WriteFile(cfgPath, []byte("listen: "+addr+"\ndatabase: "+db+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCLI(t, "keys", "list", "-c", cfgPath)
	if err != nil {
		t.Fatalf("keys list: %v\n%s", err, stderr)
	}
	want := "llmgate: no gateway answers at http://" + addr + "; using the database " + db
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	if !strings.Contains(stdout, "offline") {
		t.Errorf("list from the database lacks the key:\n%s", stdout)
	}
	// Messages in database mode speak of the CLI, not of the admin API.
	_, _, err = runCLI(t, "keys", "show", "-c", cfgPath, "lgk_nonexistent")
	if err == nil || strings.Contains(err.Error(), "admin API") || strings.Contains(err.Error(), "/admin/keys") ||
		!strings.Contains(err.Error(), "'llmgate keys list' shows the ids") {
		t.Errorf("keys show of a missing key in database mode: %v", err)
	}
	_, stderr, err = runCLI(t, "usage", "-c", cfgPath)
	if err != nil || !strings.Contains(stderr, "using the database "+db) {
		t.Errorf("usage from the database: %v, stderr %q", err, stderr)
	}
}

func TestKeys_NoGatewayAndNoDatabaseIsAnErrorNotANewFile(t *testing.T) {
	cleanCLIEnv(t)
	dir := t.TempDir()
	t.Chdir(dir)
	addr := closedAddr(t)
	if err := os.WriteFile("llmgate.yaml", []byte("listen: "+addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCLI(t, "keys", "create", "-c", "llmgate.yaml")
	if err == nil || !strings.Contains(err.Error(), "no gateway answers at http://"+addr+" and there is no database at ") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "llmgate.db")); !os.IsNotExist(err) {
		t.Errorf("llmgate.db was created in the working directory: %v", err)
	}
	if _, _, err := runCLI(t, "keys", "list", "--url", "http://"+addr, "--database", "x.db"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("--url with --database: %v", err)
	}
}

// --objective sets a key's InferenceObjective on create and update; keys
// list shows it; a name Kubernetes would refuse is refused.
func TestKeys_Objective(t *testing.T) {
	cleanCLIEnv(t)
	db := filepath.Join(t.TempDir(), "gw.db")
	stdout, stderr, err := runCLI(t, "keys", "create", "--database", db, "--name", "svc", "--objective", "critical", "--format", "json")
	if err != nil {
		t.Fatalf("keys create --objective: %v\n%s", err, stderr)
	}
	var created struct{ ID string }
	if err := json.Unmarshal([]byte(stdout), &created); err != nil || created.ID == "" {
		t.Fatalf("created %s (%v)", stdout, err)
	}
	id := created.ID
	if stdout, _, _ := runCLI(t, "keys", "show", "--database", db, id, "--format", "json"); !strings.Contains(stdout, `"objective": "critical"`) {
		t.Fatalf("keys show lacks the objective:\n%s", stdout)
	}
	if _, stderr, err := runCLI(t, "keys", "update", "--database", db, id, "--objective", "batch"); err != nil {
		t.Fatalf("keys update --objective: %v\n%s", err, stderr)
	}
	if stdout, _, _ := runCLI(t, "keys", "list", "--database", db); !strings.Contains(stdout, "OBJECTIVE") || !strings.Contains(stdout, "batch") {
		t.Errorf("keys list does not show the objective:\n%s", stdout)
	}
	if _, _, err := runCLI(t, "keys", "update", "--database", db, id, "--objective", "Not_A_Name"); err == nil || !strings.Contains(err.Error(), "InferenceObjective") {
		t.Errorf("a bad objective: err = %v, want a refusal naming InferenceObjective", err)
	}
}
