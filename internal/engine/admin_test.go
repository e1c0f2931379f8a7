package engine_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/engine"
	"llmgate/internal/router"
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

func TestManager_AttachPointsReloadedTableAtRunningEngine(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a")))
	// A reload that skipped Rebind: the new table's engine backend has port 0.
	src := fmt.Sprintf("engines:\n  sim-a:\n    cmd: %s\n    models: [model-a]\n", simCmd("model-a"))
	cfg, err := config.Load(strings.NewReader(src), "reload.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t2 := router.New(cfg)
	e.g.Engines.Attach(t2)
	e.g.Server.SetTable(t2)
	if a := e.chat("model-a", false, 4); a.status != http.StatusOK || a.model != "model-a" {
		t.Fatalf("request on the reloaded table: %d %s", a.status, a.body)
	}
	if got, want := t2.Backend("sim-a").BaseURL, fmt.Sprintf("http://127.0.0.1:%d/v1", e.status("sim-a").Port); got != want {
		t.Fatalf("reloaded backend at %s, want %s", got, want)
	}
}
