package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Release builds stamp these with -ldflags, e.g.
//
//	-X main.version=v1.2.0 -X main.revision=$(git rev-parse HEAD)
//	-X main.revisionTime=2025-01-31T12:00:00Z -X main.modified=false
//
// (scripts/release.sh and the Dockerfile do). Go records the revision itself
// when it builds in a git clone, but not in a container without .git, in a
// git worktree or with -buildvcs=false; the stamped values cover those.
var (
	version      = ""
	revision     = ""
	revisionTime = ""
	modified     = ""
)

// buildInfo is what `llmgate version` prints.
type buildInfo struct {
	Version      string
	Revision     string
	RevisionTime string
	Modified     bool
	GoVersion    string
	Platform     string
}

// stamped holds the -ldflags values.
type stamped struct{ version, revision, revisionTime, modified string }

// currentBuild describes this binary.
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return resolveBuild(bi, stamped{version, revision, revisionTime, modified})
}

// resolveBuild merges the toolchain's build information with the stamped
// values. A stamped version wins (it is the release's name); the revision
// comes from the toolchain when it recorded one, since that cannot be stale.
func resolveBuild(bi *debug.BuildInfo, s stamped) buildInfo {
	b := buildInfo{Version: s.version, Revision: s.revision, RevisionTime: s.revisionTime, Modified: s.modified == "true",
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		vcs := map[string]string{}
		for _, st := range bi.Settings {
			vcs[st.Key] = st.Value
		}
		if r := vcs["vcs.revision"]; r != "" {
			b.Revision, b.RevisionTime, b.Modified = r, vcs["vcs.time"], vcs["vcs.modified"] == "true"
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

// String is the one-line form cobra prints for --version and bench and
// MCP put in their reports.
func (b buildInfo) String() string { return b.Version }

// write prints the full description.
func (b buildInfo) write(w io.Writer) error {
	rev := b.Revision
	switch {
	case rev == "":
		rev = "unknown (built without VCS information: go run, -buildvcs=false or no .git; release builds stamp it)"
	case b.Modified:
		rev += " (modified: built with uncommitted changes)"
	}
	t := b.RevisionTime
	if t == "" {
		t = "unknown"
	}
	_, err := fmt.Fprintf(w, "llmgate %s\n  revision  %s\n  time      %s\n  go        %s %s\n", b.Version, rev, t, b.GoVersion, b.Platform)
	return err
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the VCS revision and time it was built from, and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return currentBuild().write(cmd.OutOrStdout())
		},
	}
}

// describe returns the full description, which --version prints too.
func (b buildInfo) describe() string {
	var sb strings.Builder
	_ = b.write(&sb)
	return sb.String()
}
