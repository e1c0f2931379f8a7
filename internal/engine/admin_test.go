package engine_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/engine"
	"llmgate/internal/gateway"
)

func TestAdminAPI_LoadsUnloadsListsAndShowsLogs(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a")))
	if code, body := e.admin(http.MethodGet, "/admin/engines", ""); code != http.StatusUnauthorized {
		t.Fatalf("without a key: %d %s", code, body)
	}
	code, body := e.admin(http.MethodPost, "/admin/engines/sim-a/load", master)
	var st engine.Status
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil || st.State != engine.StateReady || st.PID == 0 {
		t.Fatalf("load: %d %s", code, body)
	}
	code, body = e.admin(http.MethodGet, "/admin/engines", master)
	var list struct {
		Engines []engine.Status `json:"engines"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Engines) != 1 || list.Engines[0].Models[0] != "model-a" {
		t.Fatalf("list: %d %s", code, body)
	}
	code, body = e.admin(http.MethodGet, "/admin/engines/sim-a/logs?lines=50", master)
	if code != http.StatusOK || !strings.Contains(string(body), "vLLM-compatible simulator") || !strings.Contains(string(body), "[llmgate] ready after") {
		t.Fatalf("logs: %d %s", code, body)
	}
	// The command line client against the same gateway.
	out, err := exec.Command(llmgateBin, "engines", "list", "--url", e.base, "--key", master).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sim-a") || !strings.Contains(string(out), "ready") || !strings.Contains(string(out), fmt.Sprint(st.PID)) {
		t.Fatalf("llmgate engines list: %v\n%s", err, out)
	}
	out, err = exec.Command(llmgateBin, "engines", "unload", "sim-a", "--url", e.base, "--key", master).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sim-a is stopped") || !gone(st.PID) {
		t.Fatalf("llmgate engines unload: %v\n%s", err, out)
	}
	out, err = exec.Command(llmgateBin, "engines", "logs", "sim-a", "-n", "1", "--url", e.base, "--key", master).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "stopped (unloaded)") {
		t.Fatalf("llmgate engines logs: %v\n%s", err, out)
	}
	out, err = exec.Command(llmgateBin, "engines", "load", "nope", "--url", e.base, "--key", master).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `no engine named "nope"`) {
		t.Fatalf("llmgate engines load nope: %v\n%s", err, out)
	}
}

func TestManager_RebindKeepsPortsAcrossReload(t *testing.T) {
	src := `
engines:
  e1:
    cmd: server --port ${PORT}
    models: [m1]
`
	cfg, err := config.Load(strings.NewReader(src), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.New(cfg, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	port := cfg.Engines["e1"].Port
	if port == 0 || cfg.Backends["e1"].BaseURL != fmt.Sprintf("http://127.0.0.1:%d/v1", port) {
		t.Fatalf("no port assigned: %+v", cfg.Backends["e1"])
	}
	reloaded, _ := config.Load(strings.NewReader(strings.Replace(src, "models: [m1]", "models: [m1, m2]", 1)), "a.yaml")
	changed, err := m.Rebind(reloaded)
	if err != nil || len(changed) != 1 || changed[0] != "e1" {
		t.Fatalf("rebind: changed %v, err %v", changed, err)
	}
	if reloaded.Backends["e1"].BaseURL != cfg.Backends["e1"].BaseURL || reloaded.Models["m2"].Backend != "e1" {
		t.Fatalf("reloaded backend %s, want %s", reloaded.Backends["e1"].BaseURL, cfg.Backends["e1"].BaseURL)
	}
	same, _ := config.Load(strings.NewReader("\n\n"+src), "a.yaml") // only lines moved
	if changed, err := m.Rebind(same); err != nil || len(changed) != 0 {
		t.Fatalf("unchanged engine reported as changed: %v %v", changed, err)
	}
	added, _ := config.Load(strings.NewReader(src+"  e2:\n    cmd: other --port ${PORT}\n    models: [m3]\n"), "a.yaml")
	if _, err := m.Rebind(added); err == nil || !strings.Contains(err.Error(), "engines.e2 is new") {
		t.Fatalf("new engine: %v", err)
	}
}

// A reload builds a new table whose engine backend is made with the
// running engine's URL and leases it from the same manager: the engine
// serves on without a restart, and the old table's backend is not touched.
func TestManager_AReloadedTableLeasesTheRunningEngine(t *testing.T) {
	engines := fmt.Sprintf("  sim-a:\n    cmd: %s\n    models: [model-a]\n", simCmd("model-a"))
	e := start(t, engines)
	if a := e.chat("model-a", false, 4); a.status != http.StatusOK {
		t.Fatalf("first request: %d %s", a.status, a.body)
	}
	old := e.g.Tables.Load()
	oldBackend := old.Backend("sim-a")
	oldURL := oldBackend.BaseURL
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	src := "engines:\n" + engines + "models:\n  alias: {backend: sim-a, upstream_model: model-a}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	r := gateway.NewReloader(e.g, path, e.g.Config)
	r.Adjust = func(c *config.Config) { c.Database, c.Listen = e.g.Config.Database, e.g.Config.Listen }
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	t2 := e.g.Tables.Load()
	want := fmt.Sprintf("http://127.0.0.1:%d/v1", e.status("sim-a").Port)
	if t2 == old || t2.Leaser("sim-a") == nil || t2.Backend("sim-a").BaseURL != want {
		t.Fatalf("reloaded table: new %v, leases sim-a %v, backend at %s; want a new table leasing sim-a at %s",
			t2 != old, t2.Leaser("sim-a") != nil, t2.Backend("sim-a").BaseURL, want)
	}
	if a := e.chat("alias", false, 4); a.status != http.StatusOK {
		t.Fatalf("request on the reloaded table: %d %s", a.status, a.body)
	}
	if st := e.status("sim-a"); st.Starts != 1 || st.State != engine.StateReady {
		t.Fatalf("engine after the reload: %d starts, %s; want the first run serving on", st.Starts, st.State)
	}
	if old.Backend("sim-a") != oldBackend || oldBackend.BaseURL != oldURL {
		t.Fatalf("the old table's backend changed: %s, was %s", oldBackend.BaseURL, oldURL)
	}
}
