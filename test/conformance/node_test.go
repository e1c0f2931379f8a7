package conformance

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeSDKs_AgainstLiveGateway runs the official Node SDKs
// (@anthropic-ai/sdk and openai, pinned in node/package.json) against a
// live gateway started here. It needs `npm ci` in test/conformance/node;
// without node_modules it skips loudly, except in CI (CI=true), where it
// fails so a broken install can never pass silently.
func TestNodeSDKs_AgainstLiveGateway(t *testing.T) {
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	missing := func(msg string) {
		msg = "!!! " + msg + ": the Node SDK conformance tests did NOT run. Run `npm ci --prefix test/conformance/node` as .ci/run does"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	for _, pkg := range []string{"@anthropic-ai/sdk", "openai"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			missing("test/conformance/node/node_modules/" + pkg + " is missing")
		}
	}
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "conformance.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LLMGATE_BASE_URL="+e.root, "LLMGATE_API_KEY="+e.key, "LLMGATE_NARROW_KEY="+e.narrowKey,
		"NO_COLOR=1", "FORCE_COLOR=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := out.String()
	if err != nil {
		t.Fatalf("node --test failed (%v):\n%s", err, text)
	}
	// Log the runner's summary so a run shows how many SDK tests passed.
	pass := ""
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "ℹ"))
		if strings.HasPrefix(l, "tests ") || strings.HasPrefix(l, "pass ") || strings.HasPrefix(l, "fail ") || strings.HasPrefix(l, "skipped ") {
			t.Log("node: " + l)
			if strings.HasPrefix(l, "pass ") {
				pass = strings.TrimPrefix(l, "pass ")
			}
		}
	}
	if pass == "" || pass == "0" {
		t.Fatalf("node --test passed no test:\n%s", text)
	}
}
