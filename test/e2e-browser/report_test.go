package e2ebrowser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchReport_RendersInChromiumAndIsScreenshotted opens the bench
// report named by LLMGATE_BENCH_HTML (.ci/run points it at the report of
// its benchmark of the demo, each model direct and through the gateway) in
// chromium, checks that it rendered cleanly with no table cut at the
// page's edge, and screenshots its parts into SCREENS_DIR.
func TestBenchReport_RendersInChromiumAndIsScreenshotted(t *testing.T) {
	report := os.Getenv("LLMGATE_BENCH_HTML")
	if report == "" {
		t.Skip("LLMGATE_BENCH_HTML not set: .ci/run sets it to the report of its demo benchmark")
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if missing := prerequisites(chromium); len(missing) > 0 {
		t.Fatal("cannot open the report in a browser; missing: " + strings.Join(missing, "; "))
	}
	abs, err := filepath.Abs(report)
	if err != nil {
		t.Fatal(err)
	}
	screens := os.Getenv("SCREENS_DIR")
	if screens == "" {
		root, _ := filepath.Abs(filepath.Join("..", ".."))
		screens = filepath.Join(root, ".ci", "out", "screens")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "report.mjs")
	node.Env = append(os.Environ(), "REPORT="+abs, "SCREENS_DIR="+screens, "CHROMIUM="+chromium)
	out, err := node.CombinedOutput()
	t.Logf("browser run:\n%s", out)
	if err != nil || !strings.Contains(string(out), "[report] PASS") {
		t.Fatalf("the report did not render cleanly: %v", err)
	}
}
