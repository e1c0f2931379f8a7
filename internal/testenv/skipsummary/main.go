// Command skipsummary reads `go test -json` on standard input, prints what
// plain `go test` would have printed (package results, the output of
// failed tests, build errors) and ends with the tests that were skipped
// and why, which plain `go test` hides behind "ok".
//
//	go test -race -json ./... 2>&1 | go run ./internal/testenv/skipsummary
//
// Run the pipeline with `set -o pipefail` to keep go test's exit status;
// skipsummary itself also exits 1 when the input reports a failure, so the
// status survives a shell without pipefail. -v passes every line through.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

func main() {
	verbose := flag.Bool("v", false, "Pass every test's output through, as go test -v does")
	flag.Parse()
	failed, err := run(os.Stdin, os.Stdout, *verbose)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipsummary:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json's TestEvent, with
// the build events of go 1.24 and later).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

// skipped is a test that did not run, with its reason.
type skipped struct{ pkg, test, reason string }

// run copies the results from in to out and reports whether any test,
// package or build failed.
func run(in io.Reader, out io.Writer, verbose bool) (failed bool, err error) {
	w := bufio.NewWriter(out)
	defer w.Flush()
	pending := map[[2]string][]string{} // output of running tests
	var skips []skipped
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			// Not an event: the go command's own messages on stderr.
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			w.WriteString(e.Output)
		case e.Action == "build-fail":
			failed = true
		case e.Action == "output" && verbose:
			w.WriteString(e.Output)
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" { // plain go test does not print it
				w.WriteString(e.Output)
			}
		case e.Action == "output":
			pending[key] = append(pending[key], e.Output)
		case e.Action == "fail":
			failed = true
			if e.Test != "" && !verbose {
				writeFailure(w, pending[key])
			}
			delete(pending, key)
		case e.Action == "skip" && e.Test != "":
			skips = append(skips, skipped{e.Package, e.Test, skipReason(pending[key])})
			delete(pending, key)
		case e.Action == "pass" || e.Action == "skip":
			delete(pending, key)
		}
	}
	if err := sc.Err(); err != nil {
		return failed, err
	}
	// A test with no result was running when its binary died (a panic
	// elsewhere, a time-out): its output is the best clue.
	var unfinished [][2]string
	for k := range pending {
		unfinished = append(unfinished, k)
	}
	sort.Slice(unfinished, func(i, j int) bool {
		return unfinished[i][0]+" "+unfinished[i][1] < unfinished[j][0]+" "+unfinished[j][1]
	})
	for _, k := range unfinished {
		fmt.Fprintf(w, "--- %s %s did not finish:\n", k[0], k[1])
		for _, l := range pending[k] {
			w.WriteString(l)
		}
	}
	writeSummary(w, skips)
	return failed, nil
}

// writeFailure prints a failed test's output as plain go test does: its
// "--- FAIL" line, then what it logged.
func writeFailure(w io.StringWriter, lines []string) {
	var head []string
	var body []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "=== "):
		case strings.HasPrefix(l, "--- FAIL"):
			head = append(head, l)
		default:
			body = append(body, l)
		}
	}
	for _, l := range append(head, body...) {
		w.WriteString(l)
	}
}

// skipReason is what a skipped test logged: its t.Skip message.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		parts = append(parts, l)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}

func writeSummary(w io.Writer, skips []skipped) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "\nskipped tests: none")
		return
	}
	sort.SliceStable(skips, func(i, j int) bool {
		if skips[i].pkg != skips[j].pkg {
			return skips[i].pkg < skips[j].pkg
		}
		return skips[i].test < skips[j].test
	})
	fmt.Fprintf(w, "\nskipped tests: %d did not run\n", len(skips))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range skips {
		fmt.Fprintf(tw, "  SKIP\t%s\t%s\t%s\n", s.pkg, s.test, s.reason)
	}
	tw.Flush()
}
