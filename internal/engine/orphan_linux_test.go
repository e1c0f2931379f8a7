package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"llmgate/internal/testenv"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/engine"
)

// runGatewayHelper runs a Manager with one always-on engine (this binary
// in sleep mode, which never becomes ready), ends OS threads the way the
// runtime does (a goroutine exiting while locked to its thread), among them
// the one that started the engine, then prints the engine's pid and start
// count and waits to be killed.
func runGatewayHelper() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf(`engines:
  sleeper:
    cmd: [%q, "--port=${PORT}"]
    env: {%s: sleep}
    models: [sleeper-model]
    always_on: true
    startup_timeout: 10m
`, exe, helperEnv)), "helper.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, err := engine.New(cfg, engine.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), StateFile: os.Getenv(stateEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Start the engine from a goroutine that ends locked to its thread, so
	// the runtime ends that thread: if the engine's parent-death signal
	// were tied to it, the engine would be stopped now. More goroutines do
	// the same on whatever threads they get. This goroutine keeps the main
	// thread, which the runtime would never end.
	runtime.LockOSThread()
	tids := make(chan int, 17)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread() // never unlocked
		tids <- syscall.Gettid()
		m.Start()
	}()
	wg.Wait()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			tids <- syscall.Gettid()
		}()
	}
	wg.Wait()
	close(tids)
	for tid := range tids {
		if tid == os.Getpid() {
			continue // the runtime never ends the main thread
		}
		for deadline := time.Now().Add(10 * time.Second); !gone(tid); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "thread %d did not end\n", tid)
				return 1
			}
		}
	}
	// Wait for the engine's "ready": a Go program that first writes to
	// its stdout after the gateway died gets SIGPIPE, which would pass
	// the test for the wrong reason.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		lines, _ := m.Logs("sleeper", 0, 0)
		if slices.ContainsFunc(lines, func(l engine.Line) bool { return l.Text == "ready" }) {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "the engine never said ready")
			return 1
		}
	}
	st, err := m.Get("sleeper")
	if err != nil || st.PID == 0 {
		fmt.Fprintln(os.Stderr, "engine did not start:", err, st.LastError)
		return 1
	}
	fmt.Printf("pid %d starts %d\n", st.PID, st.Starts)
	time.Sleep(time.Minute)
	return 0
}

// TestEngine_ChildDiesWithKilledGateway runs a gateway in a helper process,
// SIGKILLs it, and expects its engine (a grandchild of this test) to be
// stopped by the kernel's parent-death signal. Thread exits inside the
// gateway must not stop the engine while the gateway lives.
func TestEngine_ChildDiesWithKilledGateway(t *testing.T) {
	state := filepath.Join(t.TempDir(), engine.StateFileName)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	gw := exec.Command(exe, "-test.run=^$")
	gw.Env = append(os.Environ(), helperEnv+"=gateway", stateEnv+"="+state)
	var stderr testenv.SyncBuffer
	gw.Stderr = &stderr
	out, err := gw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = gw.Process.Kill()
			_ = gw.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var child, starts int
	select {
	case l := <-lines:
		if _, err := fmt.Sscanf(l, "pid %d starts %d", &child, &starts); err != nil {
			t.Fatalf("helper said %q; stderr:\n%s", l, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the helper gateway printed no engine pid; stderr:\n%s", stderr.String())
	}
	if gone(child) || starts != 1 {
		t.Fatalf("engine pid %d (start %d) died while its gateway ran: a thread exit signalled it?\n%s", child, starts, stderr.String())
	}
	recs := readState(t, state)
	if len(recs) != 1 || recs[0].PID != child || recs[0].StartTime != startTime(t, child) || recs[0].Owner.PID != gw.Process.Pid {
		t.Fatalf("state file %+v, want the engine pid %d owned by the gateway pid %d", recs, child, gw.Process.Pid)
	}

	if err := gw.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	killed = true
	deadline := time.Now().Add(10 * time.Second)
	for !gone(child) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("engine pid %d still runs 10s after its gateway was SIGKILLed", child)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The next gateway finds the record of an engine that is gone: it
	// forgets it and stops nothing.
	var logs testenv.SyncBuffer
	if _, err := engine.New(&config.Config{}, engine.Options{StateFile: state, Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("state file after the next start: %v, want it removed", err)
	}
	if strings.Contains(logs.String(), "stopped engine") {
		t.Fatalf("nothing was left to stop, yet:\n%s", logs.String())
	}
}

// TestNew_StopsEnginesLeftByCrashedGatewayOnly records four processes as
// engines: two orphans of a gateway that is gone (one ignores SIGTERM), one
// whose pid matches but start time does not (a reused pid), and one of a
// gateway that still runs. Only the two orphans may be stopped.
func TestNew_StopsEnginesLeftByCrashedGatewayOnly(t *testing.T) {
	orphan := startSleeper(t, false)
	stubborn := startSleeper(t, true)
	reused := startSleeper(t, false)
	foreign := startSleeper(t, false)
	self := startTime(t, os.Getpid())
	dead := procID{PID: os.Getpid(), StartTime: self + 1} // this pid, another start: a gateway that is gone
	live := procID{PID: os.Getpid(), StartTime: self}
	rec := func(name string, pid int, start uint64, owner procID) stateRecord {
		return stateRecord{Engine: name, PID: pid, PGID: pid, StartTime: start, Cmd: []string{"sleeper"}, Port: 1,
			StopSignal: "TERM", StopGrace: "300ms", Owner: owner}
	}
	state := filepath.Join(t.TempDir(), engine.StateFileName)
	writeState(t, state, []stateRecord{
		rec("orphan", orphan, startTime(t, orphan), dead),
		rec("stubborn", stubborn, startTime(t, stubborn), dead),
		rec("reused", reused, startTime(t, reused)+1, dead),
		rec("foreign", foreign, startTime(t, foreign), live),
	})

	var logs testenv.SyncBuffer
	began := time.Now()
	if _, err := engine.New(&config.Config{}, engine.Options{StateFile: state, Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	for name, pid := range map[string]int{"orphan": orphan, "stubborn": stubborn} {
		if !gone(pid) {
			t.Errorf("%s (pid %d) still runs after New", name, pid)
		}
		if want := fmt.Sprintf("stopped engine %s left running by a previous llmgate (pid %d)", name, pid); !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	for name, pid := range map[string]int{"reused": reused, "foreign": foreign} {
		if gone(pid) {
			t.Errorf("%s (pid %d) was stopped; it is not an orphan", name, pid)
		}
		if strings.Contains(logs.String(), "engine "+name) {
			t.Errorf("log mentions %s:\n%s", name, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "ignored its stop signal; killing it") {
		t.Errorf("the stubborn engine should have been killed after its grace:\n%s", logs.String())
	}
	if took > 10*time.Second {
		t.Errorf("New took %s; the grace was 300ms", took)
	}
	recs := readState(t, state)
	if len(recs) != 1 || recs[0].Engine != "foreign" {
		t.Fatalf("state file after New: %+v, want only the running gateway's engine", recs)
	}
}

// TestEngine_StateFileTracksRunningEngine checks the record of a running
// engine next to the database, and that a normal stop removes it.
func TestEngine_StateFileTracksRunningEngine(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a")))
	path := filepath.Join(filepath.Dir(e.g.Config.Database), engine.StateFileName)
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("state file before any engine ran: %v", err)
	}
	if a := e.chat("model-a", false, 4); a.status != 200 {
		t.Fatalf("request: %d %s", a.status, a.body)
	}
	st := e.status("sim-a")
	recs := readState(t, path)
	if len(recs) != 1 {
		t.Fatalf("state file: %+v, want one record", recs)
	}
	r := recs[0]
	if r.Engine != "sim-a" || r.PID != st.PID || r.PGID != st.PID || r.StartTime != startTime(t, st.PID) || r.Port != st.Port ||
		r.Owner.PID != os.Getpid() || r.StopSignal != "TERM" || len(r.Cmd) == 0 || r.Cmd[0] != llmgateBin {
		t.Fatalf("record %+v does not describe the engine %+v", r, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.g.Engines.Unload(ctx, "sim-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("state file after the engine stopped: %v, want it removed (%+v)", err, readState(t, path))
	}
}

// startSleeper starts this binary as an engine-like process in its own
// process group, without a parent-death signal (an engine whose gateway
// died and that is still running), and waits until it is ready.
func startSleeper(t *testing.T, stubborn bool) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mode := "sleep"
	if stubborn {
		mode = "sleep-stubborn"
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("sleeper said %q (%v)", line, err)
	}
	go io.Copy(io.Discard, out)
	return cmd.Process.Pid
}

type procID struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// stateRecord mirrors a record of the state file.
type stateRecord struct {
	Engine     string   `json:"engine"`
	PID        int      `json:"pid"`
	PGID       int      `json:"pgid"`
	StartTime  uint64   `json:"start_time"`
	Cmd        []string `json:"cmd"`
	Port       int      `json:"port"`
	StopSignal string   `json:"stop_signal"`
	StopGrace  string   `json:"stop_grace"`
	Owner      procID   `json:"owner"`
}

type stateDoc struct {
	Version int           `json:"version"`
	BootID  string        `json:"boot_id"`
	Engines []stateRecord `json:"engines"`
}

func readState(t *testing.T, path string) []stateRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("state file %s: %v\n%s", path, err, b)
	}
	return doc.Engines
}

func writeState(t *testing.T, path string, recs []stateRecord) {
	t.Helper()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(stateDoc{Version: 1, BootID: strings.TrimSpace(string(boot)), Engines: recs})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startTime is field 22 of /proc/<pid>/stat.
func startTime(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestNew_StopsWorkersOfAnEngineWhoseMainProcessDied: an engine's main
// process exited but a worker of its process group still runs (vLLM's
// tensor-parallel workers holding the GPU). The next gateway stops the
// group, not only engines whose main process runs.
func TestNew_StopsWorkersOfAnEngineWhoseMainProcessDied(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// The leader starts a worker, says its pid, and exits when told to.
	cmd := exec.Command(sh, "-c", "sleep 300 & echo $!; read x")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	leader := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-leader, syscall.SIGKILL); in.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	worker, err2 := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || err2 != nil {
		t.Fatalf("leader said %q (%v)", line, err)
	}
	leaderStart := startTime(t, leader)
	in.Write([]byte("go\n"))
	if err := cmd.Wait(); err != nil { // the main process is gone and reaped
		t.Fatal(err)
	}
	if gone(worker) {
		t.Fatal("the worker exited with its leader; the test needs it running")
	}
	self := startTime(t, os.Getpid())
	state := filepath.Join(t.TempDir(), engine.StateFileName)
	writeState(t, state, []stateRecord{{Engine: "tp-engine", PID: leader, PGID: leader, StartTime: leaderStart, Cmd: []string{"sh"},
		Port: 1, StopSignal: "TERM", StopGrace: "2s", Owner: procID{PID: os.Getpid(), StartTime: self + 1}}})
	var logs testenv.SyncBuffer
	if _, err := engine.New(&config.Config{}, engine.Options{StateFile: state, Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if !gone(worker) {
		t.Fatalf("worker %d of the dead engine still runs after New:\n%s", worker, logs.String())
	}
	if want := fmt.Sprintf("stopped engine tp-engine left running by a previous llmgate (pid %d)", leader); !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs.String())
	}
	if recs := readState(t, state); len(recs) != 0 {
		t.Fatalf("state file after New: %+v, want empty", recs)
	}
}
