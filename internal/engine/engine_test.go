package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/engine"
)

func TestEngine_StartsOnDemandAndServes(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a", "--startup-delay", "300ms")))
	if st := e.status("sim-a"); st.State != engine.StateStopped || st.PID != 0 {
		t.Fatalf("before any request: %+v, want stopped without a pid", st)
	}
	a := e.chat("model-a", false, 4)
	if a.status != http.StatusOK || a.model != "model-a" {
		t.Fatalf("first request: %d %s", a.status, a.body)
	}
	st := e.status("sim-a")
	if st.State != engine.StateReady || st.PID == 0 || st.Starts != 1 || st.ReadyAt == nil {
		t.Fatalf("after the request: %+v", st)
	}
	if gone(st.PID) {
		t.Fatalf("pid %d is not running", st.PID)
	}
	// A second request uses the running engine.
	if a := e.chat("model-a", false, 4); a.status != http.StatusOK || e.status("sim-a").Starts != 1 {
		t.Fatalf("second request: %d %s, starts %d", a.status, a.body, e.status("sim-a").Starts)
	}
}

func TestEngine_StreamingClientGetsKeepAliveCommentsWhileEngineStarts(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a", "--startup-delay", "1s")))
	a := e.chat("model-a", true, 4)
	if a.status != http.StatusOK {
		t.Fatalf("stream: %d %s", a.status, a.body)
	}
	comments, models, errs, done := streamParts(a.body)
	if len(comments) == 0 || !strings.HasPrefix(comments[0], "waiting for engine sim-a") {
		t.Fatalf("no keep-alive comment before the answer: %q", a.body)
	}
	if len(models) == 0 || models[0] != "model-a" || len(errs) != 0 || !done {
		t.Fatalf("stream after the wait: models %v, errors %v, done %v:\n%s", models, errs, done, a.body)
	}
	if !strings.HasPrefix(string(a.body), ":") {
		t.Fatalf("the body should start with the keep-alive comment: %q", a.body[:min(len(a.body), 80)])
	}
}

// TestEngine_SwapServesEveryRequestByItsOwnEngine sends 50 requests for
// each of two models of one group while they swap: none may fail, each
// answer must come from the engine of the model asked for, and the two
// engines must never run at the same time.
func TestEngine_SwapServesEveryRequestByItsOwnEngine(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
    group: gpu0
  sim-b:
    cmd: %s
    models: [model-b]
    group: gpu0
`, simCmd("model-a", "--startup-delay", "300ms"), simCmd("model-b", "--startup-delay", "300ms")))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.g.Engines.Load(ctx, "sim-a"); err != nil {
		t.Fatal(err)
	}
	// Watch that at most one engine of the group has a process.
	stopWatch := make(chan struct{})
	var overlap []string
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(2 * time.Millisecond):
			}
			var running []string
			for _, st := range e.g.Engines.List() {
				if st.PID != 0 {
					running = append(running, fmt.Sprintf("%s(%s pid %d)", st.Name, st.State, st.PID))
				}
			}
			if len(running) > 1 {
				overlap = append(overlap, strings.Join(running, " + "))
			}
		}
	}()
	const perModel = 50
	type result struct {
		want string
		a    answer
	}
	results := make(chan result, 2*perModel)
	var wg sync.WaitGroup
	for i := 0; i < perModel; i++ {
		for _, m := range []string{"model-b", "model-a"} {
			wg.Add(1)
			go func(m string, stream bool) {
				defer wg.Done()
				results <- result{m, e.chat(m, stream, 4)}
			}(m, i%5 == 0)
			time.Sleep(2 * time.Millisecond) // arrivals spread over the swap
		}
	}
	wg.Wait()
	close(stopWatch)
	watch.Wait()
	close(results)
	served := map[string]int{}
	for r := range results {
		if r.a.status != http.StatusOK {
			t.Errorf("request for %s: %d %s", r.want, r.a.status, r.a.body)
			continue
		}
		got := r.a.model
		if strings.HasPrefix(string(r.a.body), ":") || strings.HasPrefix(string(r.a.body), "data:") {
			_, models, errs, done := streamParts(r.a.body)
			if len(errs) > 0 || !done || len(models) == 0 {
				t.Errorf("stream for %s: errors %v, done %v", r.want, errs, done)
				continue
			}
			got = models[0]
		}
		if got != r.want {
			t.Errorf("request for %s was answered by %s", r.want, got)
		}
		served[got]++
	}
	if served["model-a"] != perModel || served["model-b"] != perModel {
		t.Errorf("served %v, want %d of each", served, perModel)
	}
	if len(overlap) > 0 {
		t.Errorf("engines of one group ran together: %v", overlap[:min(len(overlap), 3)])
	}
	a, b := e.status("sim-a"), e.status("sim-b")
	t.Logf("swaps: sim-a started %d times, sim-b %d times", a.Starts, b.Starts)
	if b.Starts < 1 {
		t.Errorf("sim-b never started")
	}
}

func TestEngine_StopsAfterIdleTTL(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
    ttl: 400ms
`, simCmd("model-a")))
	if a := e.chat("model-a", false, 4); a.status != http.StatusOK {
		t.Fatalf("request: %d %s", a.status, a.body)
	}
	pid := e.status("sim-a").PID
	st := e.waitState("sim-a", engine.StateStopped, 10*time.Second)
	if st.PID != 0 || !gone(pid) {
		t.Fatalf("after the ttl: %+v, pid %d gone=%v", st, pid, gone(pid))
	}
	lines, _ := e.g.Engines.Logs("sim-a", 0, 0)
	if !strings.Contains(lines[len(lines)-1].Text, "idle for 400ms (ttl)") {
		t.Errorf("last log line does not give the reason: %q", lines[len(lines)-1].Text)
	}
	// The next request starts it again.
	if a := e.chat("model-a", false, 4); a.status != http.StatusOK || e.status("sim-a").Starts != 2 {
		t.Fatalf("request after the ttl stop: %d %s", a.status, a.body)
	}
}

func TestEngine_CrashIsDetectedAndNextRequestRestarts(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a")))
	if a := e.chat("model-a", false, 4); a.status != http.StatusOK {
		t.Fatalf("request: %d %s", a.status, a.body)
	}
	pid := e.status("sim-a").PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := e.waitState("sim-a", engine.StateFailed, 10*time.Second)
	if !strings.Contains(st.LastError, `engine "sim-a" exited unexpectedly (killed by signal killed)`) || st.PID != 0 {
		t.Fatalf("after the kill: %+v", st)
	}
	a := e.chat("model-a", false, 4)
	st = e.status("sim-a")
	if a.status != http.StatusOK || st.State != engine.StateReady || st.PID == pid || st.Starts != 2 {
		t.Fatalf("request after the crash: %d %s; %+v", a.status, a.body, st)
	}
}

func TestEngine_CrashFailsRequestInFlightWith503NamingEngine(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-slow:
    cmd: %s
    models: [slow]
`, strings.Replace(simCmd("slow", "--mean-output-tokens", "100000000"), `"--decode-base", "1ms"`, `"--decode-base", "20ms"`, 1)))
	// A natural ending (the sim's are exponentially distributed, mean 256
	// tokens by default) could end the answer before the kill: about one
	// run in a hundred did.
	if err := e.g.Engines.Load(context.Background(), "sim-slow"); err != nil {
		t.Fatal(err)
	}
	pid := e.status("sim-slow").PID
	go func() {
		for e.status("sim-slow").InFlight == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}()
	a := e.chat("slow", false, 1000) // 20 s of decoding: in flight when killed
	if a.status != http.StatusServiceUnavailable || a.code != "engine_crashed" ||
		!strings.Contains(a.msg, `engine "sim-slow" exited unexpectedly`) || !strings.Contains(a.msg, "Last log lines:") {
		t.Fatalf("in-flight request of a killed engine: %d %s", a.status, a.body)
	}
}

func TestEngine_RepeatedCrashesBackOff(t *testing.T) {
	e := start(t, `
  broken:
    cmd: ["sh", "-c", "echo loading on port ${PORT}; echo CUDA out of memory >&2; exit 3"]
    models: [broken-model]
`)
	for i := 1; i <= 2; i++ {
		a := e.chat("broken-model", false, 4)
		if a.status != http.StatusServiceUnavailable || a.code != "engine_crashed" ||
			!strings.Contains(a.msg, `engine "broken" exited while starting (exit status 3)`) || !strings.Contains(a.msg, "CUDA out of memory") {
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	// Two crashes in a row: the third start waits for the backoff (1 s).
	t0 := time.Now()
	a := e.chat("broken-model", false, 4)
	if waited := time.Since(t0); waited < 900*time.Millisecond || a.status != http.StatusServiceUnavailable {
		t.Fatalf("third request after %s: %d %s", waited, a.status, a.body)
	}
	if st := e.status("broken"); st.Crashes != 3 || st.Starts != 3 {
		t.Fatalf("status: %+v", st)
	}
}

func TestEngine_StartupTimeoutAnswers503WithLogTail(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-slow:
    cmd: %s
    models: [slow-start]
    startup_timeout: 800ms
    health_interval: 50ms
`, simCmd("slow-start", "--startup-delay", "60s")))
	var wg sync.WaitGroup
	var streamed answer
	wg.Add(1)
	go func() { defer wg.Done(); streamed = e.chat("slow-start", true, 4) }()
	a := e.chat("slow-start", false, 4)
	wg.Wait()
	if a.status != http.StatusServiceUnavailable || a.code != "engine_startup_timeout" ||
		!strings.Contains(a.msg, `engine "sim-slow" did not become ready within 800ms`) ||
		!strings.Contains(a.msg, "vLLM-compatible simulator") {
		t.Fatalf("non-streaming: %d %s", a.status, a.body)
	}
	// The streaming client already had keep-alive comments: its error is an event.
	comments, _, errs, _ := streamParts(streamed.body)
	if streamed.status != http.StatusOK || len(comments) == 0 || len(errs) != 1 || !strings.HasPrefix(errs[0], "engine_startup_timeout: ") {
		t.Fatalf("streaming: %d comments %v errors %v:\n%s", streamed.status, comments, errs, streamed.body)
	}
	st := e.waitState("sim-slow", engine.StateFailed, 15*time.Second)
	if !strings.Contains(st.LastError, "did not become ready") {
		t.Fatalf("status: %+v", st)
	}
}

func TestEngine_FullQueueAnswers503(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
    max_queue: 2
`, simCmd("model-a", "--startup-delay", "3s")))
	results := make(chan answer, 6)
	for i := 0; i < 6; i++ {
		go func() { results <- e.chat("model-a", false, 4) }()
	}
	var ok, full int
	for i := 0; i < 6; i++ {
		a := <-results
		switch {
		case a.status == http.StatusOK:
			ok++
		case a.status == http.StatusServiceUnavailable && a.code == "engine_queue_full" && strings.Contains(a.msg, "engines.sim-a.max_queue"):
			full++
		default:
			t.Errorf("unexpected answer: %d %s", a.status, a.body)
		}
	}
	if ok != 2 || full != 4 {
		t.Fatalf("%d served and %d refused, want 2 and 4", ok, full)
	}
}

// TestGateway_CloseLeavesNoChildRunning stops a gateway with a running
// engine that forked a worker: the whole process group must be gone.
func TestGateway_CloseLeavesNoChildRunning(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  always:
    cmd: %s
    models: [model-a]
    always_on: true
  forking:
    cmd: ["sh", "-c", "sleep 600 & exec %s sim --model model-b --listen 127.0.0.1:${PORT}"]
    models: [model-b]
`, simCmd("model-a"), llmgateBin))
	if a := e.chat("model-b", false, 4); a.status != http.StatusOK {
		t.Fatalf("request: %d %s", a.status, a.body)
	}
	e.waitState("always", engine.StateReady, 20*time.Second)
	var pids []int
	for _, st := range e.g.Engines.List() {
		pids = append(pids, groupMembers(st.PID)...)
	}
	if len(pids) < 3 {
		t.Fatalf("want two engines and a worker, found pids %v", pids)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var alive []int
	for _, p := range pids {
		if !gone(p) {
			alive = append(alive, p)
		}
	}
	if len(alive) > 0 {
		out, _ := exec.Command("ps", "-o", "pid,pgid,stat,args", "-p", strings.Trim(fmt.Sprint(alive), "[]")).CombinedOutput()
		t.Fatalf("still running after Close: %v\n%s", alive, out)
	}
	// Requests after shutdown do not start engines again.
	if st := e.status("always"); st.PID != 0 {
		t.Fatalf("status after Close: %+v", st)
	}
}

// TestEngine_SwapOverheadBeyondStartupDelay measures what a swap adds to
// the engine's own start-up delay: stopping the other engine, spawning the
// process, and noticing readiness. It logs the figure for the notes.
func TestEngine_SwapOverheadBeyondStartupDelay(t *testing.T) {
	// The figure is what a swap adds beyond the delay, whatever the delay:
	// a short one keeps the 14 starts below quick.
	const delay = 200 * time.Millisecond
	for _, interval := range []string{"", "20ms"} { // the default, then a fast poll
		opt := ""
		if interval != "" {
			opt = "health_interval: " + interval
		} else {
			interval = "default " + config.DefaultEngineHealthInterval.String()
		}
		e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
    group: gpu0
    %s
  sim-b:
    cmd: %s
    models: [model-b]
    group: gpu0
    %s
`, simCmd("model-a", "--startup-delay", delay.String()), opt, simCmd("model-b", "--startup-delay", delay.String()), opt))
		if a := e.chat("model-a", false, 1); a.status != http.StatusOK {
			t.Fatalf("warm-up: %d %s", a.status, a.body)
		}
		var base []time.Duration
		for i := 0; i < 5; i++ {
			t0 := time.Now()
			if a := e.chat("model-a", false, 1); a.status != http.StatusOK {
				t.Fatalf("baseline: %d %s", a.status, a.body)
			}
			base = append(base, time.Since(t0))
		}
		var over []time.Duration
		models := []string{"model-b", "model-a"}
		for i := 0; i < 6; i++ {
			m := models[i%2]
			t0 := time.Now()
			a := e.chat(m, false, 1)
			took := time.Since(t0)
			if a.status != http.StatusOK || a.model != m {
				t.Fatalf("swap %d to %s: %d %s", i, m, a.status, a.body)
			}
			over = append(over, took-delay-median(base))
		}
		t.Logf("health_interval %s: a swap adds %s beyond the %s start-up delay (median of %d; min %s, max %s; request alone %s)",
			interval, median(over).Round(time.Millisecond), delay, len(over), minD(over).Round(time.Millisecond), maxD(over).Round(time.Millisecond), median(base).Round(100*time.Microsecond))
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func minD(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}

func maxD(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
