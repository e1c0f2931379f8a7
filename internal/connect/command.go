package connect

import (
	"path/filepath"
	"strings"
)

// CommandName is the executable's name when no path can be resolved.
const CommandName = "llmgate"

// resolveCommand picks the command Cline starts for "llmgate mcp" and says
// why. Editors do not inherit the shell's PATH, so an absolute path is
// written when one is known: this executable, unless it is a temporary "go
// run" build (which disappears), in which case llmgate on PATH, else the
// bare name.
func (o *Options) resolveCommand() (cmd, why string) {
	if o.Command != "" {
		if filepath.IsAbs(o.Command) {
			return o.Command, "command " + o.Command + " (given)"
		}
		return o.Command, "command " + o.Command + " (given; not an absolute path, so Cline must find it on its own PATH)"
	}
	exe, err := o.Executable()
	if err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		if !isTempBuild(exe) && filepath.IsAbs(exe) {
			return exe, "command " + exe + " (this llmgate executable)"
		}
	}
	reason := "this llmgate is a temporary \"go run\" build"
	if err != nil {
		reason = "the path of this executable is unknown (" + err.Error() + ")"
	}
	if p, lerr := o.LookPath(CommandName); lerr == nil {
		if abs, aerr := filepath.Abs(p); aerr == nil {
			p = abs
		}
		return p, "command " + p + " (llmgate found on PATH; " + reason + ")"
	}
	return CommandName, "command " + CommandName + " without a path: " + reason + " and llmgate is not on PATH; install it (go install ./cmd/llmgate) and run connect again, or Cline will not find it"
}

// isTempBuild reports a binary built by "go run" (or "go test"): it lives
// in a go-build* work directory ($GOTMPDIR or the temporary directory) and
// is deleted when the command ends.
func isTempBuild(exe string) bool {
	for _, part := range strings.Split(filepath.ToSlash(exe), "/") {
		if strings.HasPrefix(part, "go-build") {
			return true
		}
	}
	return false
}
