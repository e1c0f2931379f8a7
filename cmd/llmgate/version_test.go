package main

import (
	"bytes"
	"context"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"llmgate/internal/testenv"
)

func TestResolveBuild_PrefersStampedVersionAndToolchainRevision(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "llmgate", Version: "v0.0.0-20250101120000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2025-01-01T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	b := resolveBuild(bi, stamped{version: "v1.2.3", revision: "stale", revisionTime: "old"})
	if b.Version != "v1.2.3" || b.Revision != "0123456789abcdef" || b.RevisionTime != "2025-01-01T12:00:00Z" || !b.Modified || b.GoVersion != "go1.99.1" {
		t.Fatalf("got %+v", b)
	}
	var out bytes.Buffer
	if err := b.write(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"llmgate v1.2.3\n", "revision  0123456789abcdef (modified", "time      2025-01-01T12:00:00Z", "go        go1.99.1 " + runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestResolveBuild_FallsBackToModuleVersionThenStampsThenDev(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}
	if b := resolveBuild(bi, stamped{}); b.Version != "v0.4.0" || b.Revision != "" {
		t.Errorf("go install build: %+v", b)
	}
	// A container build has no .git: the stamped revision is all there is.
	bi = &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	b := resolveBuild(bi, stamped{revision: "abc123", revisionTime: "2025-02-02T00:00:00Z", modified: "false"})
	if b.Version != "dev" || b.Revision != "abc123" || b.RevisionTime != "2025-02-02T00:00:00Z" || b.Modified {
		t.Errorf("stamped revision: %+v", b)
	}
	var out bytes.Buffer
	_ = resolveBuild(nil, stamped{}).write(&out)
	if !strings.Contains(out.String(), "revision  unknown (built without VCS information") {
		t.Errorf("no revision: %s", out.String())
	}
}

func TestVersionCommandAndFlag_PrintTheSameDescription(t *testing.T) {
	run := func(args ...string) string {
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	sub, flag := run("version"), run("--version")
	if sub != flag {
		t.Errorf("llmgate version and --version differ:\n%s\n%s", sub, flag)
	}
	if !strings.HasPrefix(sub, "llmgate ") || !strings.Contains(sub, "go        "+runtime.Version()) {
		t.Errorf("version output:\n%s", sub)
	}
}

// TestVersion_LdflagsStampReachesTheBinary runs the binary the tests share,
// which testenv builds with the -X flags of scripts/build.sh (its Stamp
// values), so a misspelt -X name (which the linker ignores silently) fails
// here.
func TestVersion_LdflagsStampReachesTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary (several seconds); run without -short")
	}
	exe := testenv.SharedLLMGate(t)
	out, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("llmgate version: %v\n%s", err, out)
	}
	for _, want := range []string{"llmgate " + testenv.StampVersion + "\n", "revision  " + testenv.StampRevision + " (modified", "time      " + testenv.StampRevisionTime} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
