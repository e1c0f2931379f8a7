package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// testdata/gotest.json is real `go test -json ./...` output of a module
// with a passing, a skipped, a failing test, a skipped subtest, a line
// printed by TestMain, a passing package and one that does not compile.
func TestRun_PrintsPlainResultsAndSummarizesSkips(t *testing.T) {
	in, err := os.ReadFile("testdata/gotest.json")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	failed, err := run(bytes.NewReader(in), &out, false)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("a failed test and a failed build must make run report failure")
	}
	got := out.String()
	for _, want := range []string{
		"!!! loud line from TestMain\n",
		"--- FAIL: TestFails (0.00s)\n    mini_test.go:19: boom\n",
		"FAIL\tmini\t",
		"ok  \tmini/other\t",
		"broken/b.go:3:23: cannot use \"x\"",
		"FAIL\tmini/broken [build failed]",
		"skipped tests: 2 did not run\n",
		"TestSkipsWithAReason  mini_test.go:16: LLMGATE_TEST_PG is not set: PostgreSQL tests did not run\n",
		"TestSub/skipped       mini_test.go:22: needs docker\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"=== RUN", "quiet unless verbose", "--- PASS", "\nPASS\n"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q, which plain go test does not print:\n%s", unwanted, got)
		}
	}
}

func TestRun_VerbosePassesEverythingThrough(t *testing.T) {
	in, err := os.ReadFile("testdata/gotest.json")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := run(bytes.NewReader(in), &out, true); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "=== RUN   TestPasses\n    mini_test.go:13: quiet unless verbose\n") || !strings.Contains(got, "skipped tests: 2") {
		t.Errorf("verbose output:\n%s", got)
	}
}

func TestRun_AllPassingReportsNoFailureAndNoSkips(t *testing.T) {
	in := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}
{"Action":"pass","Package":"p"}
go: downloading example.com/x v1.0.0
`
	var out bytes.Buffer
	failed, err := run(strings.NewReader(in), &out, false)
	if err != nil || failed {
		t.Fatalf("failed=%v err=%v", failed, err)
	}
	if want := "ok  \tp\t0.01s\ngo: downloading example.com/x v1.0.0\n\nskipped tests: none\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestRun_ATestThatNeverFinishedIsShown(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestHang"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t1.00s\n"}
{"Action":"fail","Package":"p"}
`
	var out bytes.Buffer
	failed, _ := run(strings.NewReader(in), &out, false)
	if !failed || !strings.Contains(out.String(), "--- p TestHang did not finish:\n=== RUN   TestHang\npanic: test timed out after 1s\n") {
		t.Errorf("failed=%v\n%s", failed, out.String())
	}
}
