// Command streams opens many concurrent streams through a gateway on
// loopback and reports the errors, the time each client waited for the
// answer's headers and the gateway's memory per open stream.
//
//	go run ./bench/streams                              (5,000 streams, default config)
//	go run ./bench/streams -n 5000 -gw-yaml "max_connections: 0"
//	go run ./bench/streams -bin ./llmgate-old           (a given build)
//
// It starts, as separate processes, `llmgate sim` (one simulated model
// that runs every sequence at once) and `llmgate serve` in front of it with
// the default configuration (plus -gw-yaml), then n clients at once. Each
// client has a connection of its own and keeps it open after its stream,
// idle, as SDK clients keep theirs (-rounds > 1 sends more streams on it).
// Every stream is -tokens tokens, one every -step, so about n streams are
// open at once. A client fails when its headers take longer than
// -header-timeout, its connection fails, the status is not 200, or the
// stream ends without [DONE]. The run is bounded by -timeout.
//
// Each client and each gateway connection costs a file descriptor: the
// gateway needs about 2n (client and backend side), this program n, the
// simulator n. Go programs raise their soft limit to the hard one at
// start; the hard limit (ulimit -Hn) must allow that.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const masterKey = "sk-lg-streams-bench-master"

func main() {
	n := flag.Int("n", 5000, "concurrent clients, one stream each per round")
	rounds := flag.Int("rounds", 1, "streams per client, one after the other on its connection")
	tokens := flag.Int("tokens", 20, "tokens per stream")
	step := flag.Duration("step", 500*time.Millisecond, "simulated time per token (every stream gets one per step)")
	headerTimeout := flag.Duration("header-timeout", 60*time.Second, "longest wait for an answer's headers")
	timeout := flag.Duration("timeout", 5*time.Minute, "bound on the whole run")
	bin := flag.String("bin", "", "llmgate binary (default: build this checkout)")
	gwYAML := flag.String("gw-yaml", "", `extra top-level config lines for the gateway (separate lines with \n)`)
	flag.Parse()
	if err := run(*n, *rounds, *tokens, *step, *headerTimeout, *timeout, *bin, *gwYAML); err != nil {
		fmt.Fprintln(os.Stderr, "streams:", err)
		os.Exit(1)
	}
}

func run(n, rounds, tokens int, step, headerTimeout, timeout time.Duration, bin, gwYAML string) error {
	dir, err := os.MkdirTemp("", "streams-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if soft, hard := nofile(); soft != "" {
		fmt.Printf("open files limit (hard; Go programs raise their soft limit to it): %s (soft %s); the gateway needs about %d\n", hard, soft, 2*n+100)
	}
	if bin == "" {
		bin = filepath.Join(dir, "llmgate")
		fmt.Println("building llmgate ...")
		build := exec.Command("go", "build", "-o", bin, "./cmd/llmgate")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build llmgate (run from the repository root): %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	simAddr, stopSim, err := startSim(bin, n, step)
	if err != nil {
		return err
	}
	defer stopSim()
	gwAddr, gwPid, stopGw, err := startGateway(bin, dir, simAddr, gwYAML)
	if err != nil {
		return err
	}
	defer stopGw()
	base := rss(gwPid)
	fmt.Printf("gateway at %s (pid %d), RSS at rest %.1f MB; %d clients x %d stream(s) of %d tokens, one every %s\n",
		gwAddr, gwPid, float64(base)/1024, n, rounds, tokens, step)

	body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"Tell me a story"}]}`, tokens)
	url := "http://" + gwAddr + "/v1/chat/completions"
	var open, peakOpen atomic.Int64
	var mu sync.Mutex
	var waits []time.Duration
	failures := map[string]int{}
	fail := func(kind string) {
		mu.Lock()
		failures[kind]++
		mu.Unlock()
	}
	// RSS is sampled with the number of streams open at that moment.
	type sample struct {
		open int64
		rss  int
	}
	var samples []sample
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				samples = append(samples, sample{open.Load(), rss(gwPid)})
			}
		}
	}()

	start := time.Now()
	var wg sync.WaitGroup
	var transports []*http.Transport
	for i := 0; i < n; i++ {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, ResponseHeaderTimeout: headerTimeout, DisableCompression: true}
		transports = append(transports, tr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: tr}
			for r := 0; r < rounds; r++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+masterKey)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					fail(errKind(err))
					return
				}
				mu.Lock()
				waits = append(waits, time.Since(t0))
				mu.Unlock()
				if resp.StatusCode != http.StatusOK {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					fail(fmt.Sprintf("status %d", resp.StatusCode))
					return
				}
				peakOpen.Store(max(peakOpen.Load(), open.Add(1)))
				ok, err := readStream(resp.Body)
				open.Add(-1)
				resp.Body.Close()
				switch {
				case err != nil:
					fail("stream read: " + errKind(err))
					return
				case !ok:
					fail("stream ended without [DONE]")
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopSampling)
	<-sampled
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}

	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	pct := func(p float64) time.Duration {
		if len(waits) == 0 {
			return 0
		}
		return waits[min(len(waits)-1, int(p*float64(len(waits))))]
	}
	total := 0
	for _, c := range failures {
		total += c
	}
	fmt.Printf("\n%d streams in %s: %d errors\n", n*rounds, elapsed.Round(time.Millisecond), total)
	for kind, c := range failures {
		fmt.Printf("  %6d  %s\n", c, kind)
	}
	fmt.Printf("time to headers: p50 %s, p99 %s, max %s\n", pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), pct(1).Round(time.Millisecond))
	var best sample
	for _, s := range samples {
		if s.open > best.open || (s.open == best.open && s.rss > best.rss) {
			best = s
		}
	}
	fmt.Printf("streams open at once: peak %d\n", peakOpen.Load())
	if best.open > 0 && best.rss > base {
		fmt.Printf("gateway RSS with %d streams open: %.1f MB (%.1f MB at rest): %.1f KB per stream; peak RSS %.1f MB\n",
			best.open, float64(best.rss)/1024, float64(base)/1024, float64(best.rss-base)/float64(best.open), float64(hwm(gwPid))/1024)
	}
	if total > 0 {
		return fmt.Errorf("%d of %d streams failed", total, n*rounds)
	}
	return nil
}

// readStream reads an SSE answer to its end and reports whether it ended
// with [DONE].
func readStream(r io.Reader) (bool, error) {
	br := bufio.NewReaderSize(r, 4096)
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data: [DONE]")) {
			done = true
		}
		if err == io.EOF {
			return done, nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return done, err
		}
	}
}

// errKind shortens an error to what went wrong, without addresses.
func errKind(err error) string {
	var ne net.Error
	switch {
	case strings.Contains(err.Error(), "timeout awaiting response headers"):
		return "time-out waiting for headers"
	case errors.Is(err, context.DeadlineExceeded):
		return "run time-out"
	case errors.As(err, &ne) && ne.Timeout():
		return "time-out"
	case strings.Contains(err.Error(), "connection reset"):
		return "connection reset"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed (EOF)"
	}
	return err.Error()
}

func startSim(bin string, n int, step time.Duration) (addr string, stop func(), err error) {
	cmd := exec.Command(bin, "sim", "--model", "m", "--listen", "127.0.0.1:0",
		"--max-num-seqs", strconv.Itoa(n+1), "--max-queue", "0", "--decode-base", step.String(), "--decode-per-seq", "0",
		"--prefill-base", "1ms", "--prefill-per-token", "0s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "simulator on http://"); ok {
			addr = strings.TrimSuffix(rest, "/v1")
			break
		}
	}
	go io.Copy(io.Discard, out)
	if addr == "" {
		stop()
		return "", nil, errors.New("llmgate sim did not report its address")
	}
	return addr, stop, nil
}

func startGateway(bin, dir, simAddr, extra string) (addr string, pid int, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, nil, err
	}
	addr = ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf("listen: %s\ndatabase: %s\nspool_dir: %s\nbackends:\n  sim: {url: http://%s/v1}\nmodels:\n  m: {backend: sim}\n",
		addr, filepath.Join(dir, "gw.db"), filepath.Join(dir, "spool"), simAddr)
	if extra = strings.ReplaceAll(extra, `\n`, "\n"); extra != "" {
		cfg += extra + "\n"
		fmt.Printf("gateway config adds: %s\n", strings.ReplaceAll(extra, "\n", "; "))
	}
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", 0, nil, err
	}
	cmd := exec.Command(bin, "serve", "-c", path)
	cmd.Env = append(os.Environ(), "LLMGATE_MASTER_KEY="+masterKey)
	logf, err := os.Create(filepath.Join(dir, "gw.log"))
	if err != nil {
		return "", 0, nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop = func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		b, _ := os.ReadFile(logf.Name())
		var warned []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				warned = append(warned, line)
			}
		}
		if len(warned) > 0 {
			fmt.Printf("gateway warnings and errors: %d, the first:\n", len(warned))
			for _, line := range warned[:min(3, len(warned))] {
				fmt.Println("  " + line)
			}
		}
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return addr, cmd.Process.Pid, stop, nil
		}
	}
	stop()
	return "", 0, nil, errors.New("the gateway did not come up (its log is in " + logf.Name() + ")")
}

// rss and hwm read a process's resident set size now and at its peak, in
// KiB (Linux; 0 elsewhere).
func rss(pid int) int { return procStatus(pid, "VmRSS:") }
func hwm(pid int) int { return procStatus(pid, "VmHWM:") }

func procStatus(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
			if f := strings.Fields(line); len(f) >= 2 {
				v, _ := strconv.Atoi(f[1])
				return v
			}
		}
	}
	return 0
}

// nofile reads this process's open-files limits (Linux).
func nofile() (soft, hard string) {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			if f := strings.Fields(line); len(f) >= 5 {
				return f[3], f[4]
			}
		}
	}
	return "", ""
}
