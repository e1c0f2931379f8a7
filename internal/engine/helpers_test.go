package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/engine"
	"llmgate/internal/gateway"
	"llmgate/internal/ledger"
	"llmgate/internal/testenv"
	"llmgate/internal/testenv/testdb"
)

const master = "sk-lg-engine-test-master"

// helperEnv makes the test binary play a part in another process:
// "sleep" (an engine), "sleep-stubborn" (an engine that ignores SIGTERM)
// or "gateway" (a Manager running one engine, killed by the test, orphan_linux_test.go).
const (
	helperEnv = "LLMGATE_ENGINE_TEST_HELPER"
	stateEnv  = "LLMGATE_ENGINE_TEST_STATE"
)

// runSleeper is an engine that only waits to be stopped; a stubborn one
// ignores SIGTERM. It prints "ready" once its signal disposition is set.
func runSleeper(stubborn bool) {
	if stubborn {
		signal.Ignore(syscall.SIGTERM)
	}
	fmt.Println("ready")
	time.Sleep(time.Minute)
	os.Exit(0)
}

// llmgateBin is the llmgate binary, built once for every package that
// needs it (testenv.SharedLLMGateBinary); every
// engine in these tests is a real `llmgate sim` child process.
var llmgateBin string

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "sleep", "sleep-stubborn": // an engine-like child that only waits to be stopped
		runSleeper(os.Getenv(helperEnv) == "sleep-stubborn")
	case "gateway": // a gateway process that a test kills
		os.Exit(runGatewayHelper())
	}
	var err error
	if llmgateBin, err = testenv.SharedLLMGateBinary(); err != nil {
		fmt.Fprintln(os.Stderr, "build llmgate:", err)
		os.Exit(1)
	}
	code := m.Run()
	testenv.RemoveSharedLLMGate()
	os.Exit(code)
}

// simCmd is the YAML flow list of a simulator engine command.
func simCmd(model string, extra ...string) string {
	args := []string{llmgateBin, "sim", "--model", model, "--listen", "127.0.0.1:${PORT}", "--decode-base", "1ms", "--decode-per-seq", "0s", "--prefill-base", "1ms", "--max-num-seqs", "256"}
	args = append(args, extra...)
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

type env struct {
	t    *testing.T
	g    *gateway.Gateway
	base string // http://host:port
}

// start runs a gateway with the given engines: YAML section.
func start(t *testing.T, engines string) *env {
	t.Helper()
	cfg, err := config.Load(strings.NewReader("engines:\n"+engines), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = testdb.SQLite(t, t.TempDir(), "llmgate.db")
	cfg.Listen = "127.0.0.1:0"
	g, err := gateway.Start(context.Background(), gateway.Options{Config: cfg, MasterKey: master,
		Logger: testLogger(), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, g: g, base: "http://" + g.Addr}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return e
}

type answer struct {
	status int
	body   []byte
	model  string // the "model" of a successful answer
	code   string // error code of a failure
	msg    string
}

func (e *env) chat(model string, stream bool, maxTokens int) answer {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}],"max_tokens":%d,"stream":%v}`, model, maxTokens, stream)
	req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+master)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{status: -1, msg: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, body: b}
	if stream {
		return a
	}
	var v struct {
		Model string `json:"model"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &v)
	a.model, a.code, a.msg = v.Model, v.Error.Code, v.Error.Message
	return a
}

// streamModels returns the SSE comments, the models of the data chunks,
// and the error codes of error events in a streamed body.
func streamParts(body []byte) (comments, models, errs []string, done bool) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			comments = append(comments, strings.TrimSpace(line[1:]))
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			var v struct {
				Model string `json:"model"`
				Error *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(line[6:]), &v) == nil {
				if v.Error != nil {
					errs = append(errs, v.Error.Code+": "+v.Error.Message)
				} else if v.Model != "" {
					models = append(models, v.Model)
				}
			}
		}
	}
	return
}

func (e *env) status(name string) engine.Status {
	e.t.Helper()
	st, err := e.g.Engines.Get(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// waitState polls until the engine reaches state or the deadline passes.
func (e *env) waitState(name string, want engine.State, within time.Duration) engine.Status {
	e.t.Helper()
	var st engine.Status
	if _, ok := testenv.Poll(within, func() bool {
		st = e.status(name)
		return st.State == want
	}); !ok {
		e.t.Fatalf("engine %s is %s after %s, want %s (last error %q)", name, st.State, within, want, st.LastError)
	}
	return st
}

// gone reports whether a process no longer runs (absent, or a zombie
// nobody reaped yet).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// groupMembers lists the pids in process group pgid.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

func (e *env) admin(method, path, key string) (int, []byte) {
	req, _ := http.NewRequest(method, e.base+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// testLogger discards the gateway's log unless LLMGATE_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("LLMGATE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
