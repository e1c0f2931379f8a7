package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/testenv"
)

// bannerCommands returns the commands a banner prints that start with
// self, continuation lines joined, split as a shell would.
func bannerCommands(t *testing.T, banner, self string) [][]string {
	t.Helper()
	var cmds [][]string
	lines := strings.Split(banner, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		if rest, ok := strings.CutPrefix(line, self+" "); ok {
			args, err := config.SplitCommand(rest)
			if err != nil {
				t.Fatalf("banner line %q: %v", line, err)
			}
			cmds = append(cmds, args)
		}
	}
	return cmds
}

func TestDemoBanner_EveryPrintedCommandWorksAsPrinted(t *testing.T) {
	cleanCLIEnv(t)
	d := startTestDemo(t)
	self := selfInvocation()
	if !strings.HasPrefix(self, "go run ") {
		t.Fatalf("a test binary is a go-build binary, yet selfInvocation() = %q", self)
	}
	var banner bytes.Buffer
	printDemo(&banner, d.demo, self)
	text := banner.String()
	if strings.Contains(text, "\n    llmgate ") {
		t.Errorf("the banner suggests a bare llmgate command after go run:\n%s", text)
	}

	// The curl example, sent as printed.
	curl := regexp.MustCompile(`curl (\S+) \\\s+-H "Authorization: Bearer (\S+)"`).FindStringSubmatch(text)
	if curl == nil || !strings.HasPrefix(curl[1], d.g.URL()) || curl[2] != d.key {
		t.Fatalf("no curl example with this demo's URL and key in:\n%s", text)
	}
	if status, body := chat(t, strings.TrimSuffix(curl[1], "/chat/completions"), curl[2]); status != http.StatusOK {
		t.Fatalf("curl example: %d %s", status, body)
	}

	// Each simulated engine's base URL, as printed, answers directly.
	engines := regexp.MustCompile(`(?m)^ +(\S+) +(http://127\.0\.0\.1:\d+/v1) +\(\$`).FindAllStringSubmatch(text, -1)
	if len(engines) != len(demoModels) {
		t.Fatalf("the banner lists %d engine base URLs, want %d:\n%s", len(engines), len(demoModels), text)
	}
	for _, e := range engines {
		if status, body := chatModel(t, e[2], "", e[1]); status != http.StatusOK {
			t.Errorf("engine %s at %s: %d %s", e[1], e[2], status, body)
		}
	}

	seen := map[string]bool{}
	for _, args := range bannerCommands(t, text, self) {
		name := args[0]
		switch {
		case name == "keys" && len(args) > 1 && args[1] == "create":
			stdout, stderr, err := runCLI(t, args...)
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", self, strings.Join(args, " "), err, stderr)
			}
			secret := regexp.MustCompile(`sk-lg-\S+`).FindString(stdout)
			if status, body := chat(t, d.g.URL(), secret); status != http.StatusOK {
				t.Fatalf("the key from the banner's keys create, at once: %d %s", status, body)
			}
			seen["keys create"] = true
		case name == "usage" && contains(args, "--url"):
			if stdout, stderr, err := runCLI(t, args...); err != nil || stdout == "" {
				t.Fatalf("%s %s: %v\n%s%s", self, strings.Join(args, " "), err, stdout, stderr)
			}
			seen["usage --url"] = true
		case name == "usage" && contains(args, "--database"):
			// Printed for after the demo stops.
			d.stop()
			if _, err := os.Stat(args[len(args)-1]); err != nil {
				t.Fatalf("the banner's database: %v", err)
			}
			if stdout, stderr, err := runCLI(t, args...); err != nil || stdout == "" {
				t.Fatalf("%s %s: %v\n%s%s", self, strings.Join(args, " "), err, stdout, stderr)
			}
			seen["usage --database"] = true
		case name == "bench":
			// As printed, with a load small enough for a test: the printed
			// flags (targets file, runs) stay; flags it does not set are
			// added, and the results go to a temporary directory.
			args = append(args, "--output-len", "4", "--input-len", "8", "--warmup", "0", "--quiet")
			replaceFlagValue(args, "--concurrency", "1")
			replaceFlagValue(args, "--num-requests", "2")
			replaceFlagValue(args, "--out", t.TempDir())
			stdout, stderr, err := runCLI(t, args...)
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", self, strings.Join(args, " "), err, stderr)
			}
			// Every model direct and through the gateway, paired.
			for _, m := range demoModelNames() {
				if !regexp.MustCompile(`(?m)^ +` + regexp.QuoteMeta(m) + `-gateway +` + regexp.QuoteMeta(m) + `-direct +c=1 `).MatchString(stdout) {
					t.Errorf("the banner's bench does not show what the gateway adds to %s:\n%s", m, stdout)
				}
			}
			seen["bench"] = true
		default:
			t.Errorf("the banner prints a command this test does not run: %s %s", self, strings.Join(args, " "))
		}
	}
	for _, want := range []string{"keys create", "usage --url", "bench", "usage --database"} {
		if !seen[want] {
			t.Errorf("the banner lacks %q:\n%s", want, text)
		}
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func replaceFlagValue(args []string, flag, value string) {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			args[i+1] = value
		}
	}
}

func TestInvocation_MatchesHowTheUserStartedLLMGate(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	goRun := filepath.Join(os.TempDir(), "go-build1234", "b001", "exe", "llmgate")
	noPath := func(string) (string, error) { return "", os.ErrNotExist }
	for _, c := range []struct{ cwd, want string }{
		{root, "go run ./cmd/llmgate"},
		{filepath.Join(root, "internal"), "go run ../cmd/llmgate"},
		{filepath.Join(root, "cmd", "llmgate"), "go run ."},
		{string(filepath.Separator), "go run llmgate/cmd/llmgate"},
	} {
		if got := invocation(goRun, c.cwd, noPath); got != c.want {
			t.Errorf("go run from %s: %q, want %q", c.cwd, got, c.want)
		}
	}

	dir := filepath.Join(t.TempDir(), "my bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "llmgate")
	other := filepath.Join(t.TempDir(), "llmgate")
	for _, p := range []string{exe, other} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	onPath := func(p string) func(string) (string, error) {
		return func(string) (string, error) { return p, nil }
	}
	if got := invocation(exe, root, onPath(exe)); got != "llmgate" {
		t.Errorf("binary on PATH: %q, want llmgate", got)
	}
	want := "'" + exe + "'"
	if got := invocation(exe, root, onPath(other)); got != want {
		t.Errorf("another llmgate on PATH: %q, want %q", got, want)
	}
	if got := invocation(exe, root, noPath); got != want {
		t.Errorf("not on PATH: %q, want %q", got, want)
	}
}

func TestDemo_ModelsCarryPricesSoUsageShowsCost(t *testing.T) {
	cleanCLIEnv(t)
	d := startTestDemo(t)
	for _, m := range demoModels {
		if m.InputPrice <= 0 || m.OutputPrice <= 0 {
			t.Errorf("demo model %s has no price", m.Name)
		}
		if status, body := chatModel(t, d.g.URL(), d.key, m.Name); status != http.StatusOK {
			t.Fatalf("%s: %d %s", m.Name, status, body)
		}
	}
	root := strings.TrimSuffix(d.g.URL(), "/v1")
	var stdout string
	priced := 0
	if _, ok := testenv.Poll(10*time.Second, func() bool {
		var stderr string
		var err error
		stdout, stderr, err = runCLI(t, "usage", "--url", root, "--master-key", d.master, "--by", "model", "--format", "json")
		if err != nil {
			t.Fatalf("usage: %v\n%s", err, stderr)
		}
		var rows []struct {
			Model   string  `json:"model"`
			CostUSD float64 `json:"cost_usd"`
		}
		if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
			t.Fatalf("usage json: %v\n%s", err, stdout)
		}
		priced = 0
		for _, r := range rows {
			if r.CostUSD > 0 {
				priced++
			}
		}
		return priced == len(demoModels)
	}); !ok {
		t.Fatalf("after a request to each demo model, usage shows cost for %d of %d: %s", priced, len(demoModels), stdout)
	}
}

func TestUsage_ShowsTheGroupedColumnsOnlyAndFillsThem(t *testing.T) {
	cleanCLIEnv(t)
	d := startTestDemo(t)
	if status, body := chat(t, d.g.URL(), d.key); status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	root := strings.TrimSuffix(d.g.URL(), "/v1")
	usage := func(args ...string) string {
		t.Helper()
		stdout, stderr, err := runCLI(t, append([]string{"usage", "--url", root, "--master-key", d.master}, args...)...)
		if err != nil {
			t.Fatalf("usage %v: %v\n%s", args, err, stderr)
		}
		return stdout
	}
	// The ledger writes in batches: wait (boundedly) for the record.
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Contains(usage("--by", "model", "--format", "csv"), "qwen2.5-7b-instruct") },
		"the request reached the usage summary")
	byModel := strings.Split(usage("--by", "model", "--format", "csv"), "\n")
	if !strings.HasPrefix(byModel[0], "model,requests,") || !strings.HasPrefix(byModel[1], "qwen2.5-7b-instruct,1,") {
		t.Errorf("--by model CSV:\n%s", strings.Join(byModel, "\n"))
	}
	byKey := strings.Split(usage("--by", "key,day", "--format", "csv"), "\n")
	if !strings.HasPrefix(byKey[0], "key_id,key_name,day,requests,") || !regexp.MustCompile(`^key_\w+,demo,\d{4}-\d\d-\d\d,1,`).MatchString(byKey[1]) {
		t.Errorf("--by key,day CSV:\n%s", strings.Join(byKey, "\n"))
	}
	table := usage()
	if !strings.Contains(table, "KEY") || !strings.Contains(table, "MODEL") || strings.Contains(table, "BACKEND") || strings.Contains(table, "DAY") {
		t.Errorf("the default table (by key and model) has other columns:\n%s", table)
	}
	if table := usage("--by", "backend,day"); !strings.Contains(table, "sim-qwen2.5-7b-instruct") || strings.Contains(table, " - ") {
		t.Errorf("--by backend,day table:\n%s", table)
	}
}
