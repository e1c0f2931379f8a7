package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// selfInvocation is how the user runs this llmgate again from the shell
// that started it, for the commands the demo banner and serve print.
func selfInvocation() string {
	exe, err := os.Executable()
	if err != nil {
		return "llmgate"
	}
	cwd, _ := os.Getwd()
	return invocation(exe, cwd, exec.LookPath)
}

// invocation decides selfInvocation: after "go run" the executable is a
// temporary build (…/go-build…/exe/llmgate) that is gone at exit, so it is
// "go run" with the path of cmd/llmgate from cwd; a binary that "llmgate"
// on PATH finds is "llmgate"; any other binary is its own path.
func invocation(exe, cwd string, lookPath func(string) (string, error)) string {
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	if isGoRunBuild(exe) {
		if root := moduleRoot(cwd); root != "" {
			rel, err := filepath.Rel(cwd, filepath.Join(root, "cmd", "llmgate"))
			if err == nil {
				if rel != "." && !strings.HasPrefix(rel, "..") {
					rel = "." + string(filepath.Separator) + rel
				}
				return "go run " + shellQuote(rel)
			}
		}
		return "go run llmgate/cmd/llmgate"
	}
	if p, err := lookPath("llmgate"); err == nil {
		if a, err := os.Stat(p); err == nil {
			if b, err := os.Stat(exe); err == nil && os.SameFile(a, b) {
				return "llmgate"
			}
		}
	}
	return shellQuote(exe)
}

// isGoRunBuild reports whether exe is a temporary build of "go run" (or
// "go test"), which lives in a go-build directory under the temp dir.
func isGoRunBuild(exe string) bool {
	for _, part := range strings.Split(filepath.ToSlash(exe), "/") {
		if strings.HasPrefix(part, "go-build") {
			return true
		}
	}
	return false
}

// moduleRoot finds the directory of llmgate's go.mod at or above dir.
func moduleRoot(dir string) string {
	for d := dir; d != ""; {
		if isLLMGateModule(filepath.Join(d, "go.mod")) {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
	return ""
}

func isLLMGateModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == "llmgate"
		}
	}
	return false
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
