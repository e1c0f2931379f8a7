package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// UpstreamChildEnv, when set to "1", makes a process started by
// StartUpstreamChild serve a TimedUpstream instead of its normal work.
const UpstreamChildEnv = "LLMGATE_BENCH_UPSTREAM_CHILD"

// ServeUpstreamChild serves a recording TimedUpstream on a loopback port,
// prints "LISTEN host:port" on stdout and returns when stdin closes (the
// parent exited or is done).
func ServeUpstreamChild() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: &TimedUpstream{Record: true}}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("LISTEN %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return srv.Close()
}

// StartUpstreamChild runs exe (with args) as a child process that calls
// ServeUpstreamChild, so the server's CPU is not the client's: the
// capacity measurement then sees only the client's own cost. It returns
// the child's base URL and a stop function.
func StartUpstreamChild(ctx context.Context, exe string, args ...string) (string, func(), error) {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), UpstreamChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start upstream child: %w", err)
	}
	stop := func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "LISTEN ") {
		stop()
		return "", nil, fmt.Errorf("upstream child did not report its address (%q): %v", line, err)
	}
	return "http://" + strings.TrimSpace(strings.TrimPrefix(line, "LISTEN ")) + "/v1", stop, nil
}

// CapacityStep is one offered chunk rate of the client-capacity test.
type CapacityStep struct {
	OfferedRate float64 `json:"offered_chunks_per_s"`
	// Achieved is the chunks the client ingested per second of wall time.
	Achieved float64 `json:"achieved_chunks_per_s"`
	Chunks   int     `json:"chunks"`
	// Error is the client's stamp minus the server's recorded write time of
	// the same chunk, in ms.
	ErrP50     float64 `json:"error_p50_ms"`
	ErrP99     float64 `json:"error_p99_ms"`
	ErrMax     float64 `json:"error_max_ms"`
	CPUPercent float64 `json:"client_cpu_percent"`
	// CPUPerChunk is the client's CPU time per ingested chunk in µs, and
	// CPUBound the rate one fully used core would sustain at that cost;
	// unlike the timing error it hardly depends on other load.
	CPUPerChunk float64 `json:"client_cpu_us_per_chunk"`
	CPUBound    float64 `json:"cpu_bound_chunks_per_s"`
	Failed      int     `json:"failed"`
	// OK is true when every request succeeded and ErrP99 ≤ the bound.
	OK bool `json:"ok"`
}

// CapacityOptions configure MeasureCapacity.
type CapacityOptions struct {
	BaseURL string
	// Streams is the number of concurrent streams (default 64).
	Streams int
	// Rates are offered chunk rates, ascending (default 10k..200k).
	Rates []float64
	// Step is how long each rate runs (default 2 s).
	Step time.Duration
	// BoundMs is the timing error allowed at p99 (default 1 ms).
	BoundMs float64
	// OneCore pins the client to one core with GOMAXPROCS(1) for the run.
	OneCore  bool
	Progress io.Writer
}

// MeasureCapacity offers rising chunk rates from a TimedUpstream (normally
// in a child process) and reports, per rate, how many chunks per second
// the client ingested and how far its timestamps were from the server's
// write times. The capacity is the highest achieved rate whose p99 error
// stayed within the bound; it stops after two failing rates in a row.
func MeasureCapacity(ctx context.Context, o CapacityOptions) ([]CapacityStep, float64, error) {
	if o.Streams <= 0 {
		o.Streams = 64
	}
	if len(o.Rates) == 0 {
		o.Rates = []float64{10000, 25000, 50000, 75000, 100000, 150000, 200000}
	}
	if o.Step <= 0 {
		o.Step = 2 * time.Second
	}
	if o.BoundMs <= 0 {
		o.BoundMs = 1
	}
	if o.OneCore {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	t := Target{BaseURL: o.BaseURL, Model: "capacity"}
	if err := t.Normalize(func(string) string { return "" }); err != nil {
		return nil, 0, err
	}
	var steps []CapacityStep
	best, fails := 0.0, 0
	for si, rate := range o.Rates {
		gap := time.Duration(float64(o.Streams) / rate * float64(time.Second))
		chunks := max(int(o.Step/gap), 2)
		p := Prompt{Text: "capacity", MaxTokens: chunks}
		body, err := buildBody(&t, &p, &RequestOptions{ExtraBody: map[string]any{
			"llmgate_t1_us": 1000, "llmgate_t2_us": gap.Microseconds(), "llmgate_chunks": chunks, "llmgate_precise": true, "llmgate_stagger": o.Streams,
		}}, chunks)
		if err != nil {
			return nil, 0, err
		}
		bodies := make([][]byte, o.Streams)
		prompts := make([]Prompt, o.Streams)
		for i := range bodies {
			bodies[i], prompts[i] = body, p
		}
		plan := &cellPlan{bodies: bodies, prompts: prompts, numRequests: o.Streams, burstiness: 1}
		idBase := fmt.Sprintf("llmgate-capacity-%d-", si)
		run := runCell(ctx, &t, Cell{Concurrency: o.Streams}, plan, &RequestOptions{Timeout: o.Step + time.Minute}, idBase)
		st, err := capacityStep(ctx, o.BaseURL, idBase, rate, run, o.BoundMs)
		if err != nil {
			return steps, best, err
		}
		steps = append(steps, st)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "offered %7.0f chunks/s: ingested %7.0f/s, error p50 %.3f p99 %.3f max %.3f ms, client CPU %.0f%% (%.1f µs/chunk, one core ≈ %.0f chunks/s), ok=%v\n",
				st.OfferedRate, st.Achieved, st.ErrP50, st.ErrP99, st.ErrMax, st.CPUPercent, st.CPUPerChunk, st.CPUBound, st.OK)
		}
		if st.OK {
			best = max(best, st.Achieved)
			fails = 0
		} else if fails++; fails == 2 {
			// Two failing rates in a row: higher ones will not pass.
			break
		}
	}
	return steps, best, nil
}

func capacityStep(ctx context.Context, baseURL, idBase string, rate float64, run *CellRun, bound float64) (CapacityStep, error) {
	st := CapacityStep{OfferedRate: rate}
	var errs []float64
	var first, last time.Time
	for i := range run.Results {
		r := &run.Results[i]
		if !r.OK() {
			st.Failed++
			continue
		}
		writes, err := fetchWrites(ctx, baseURL, idBase+fmt.Sprint(r.Index))
		if err != nil {
			return st, err
		}
		if len(writes) != len(r.Chunks) {
			return st, fmt.Errorf("request %d: server wrote %d chunks, client saw %d", r.Index, len(writes), len(r.Chunks))
		}
		for k, off := range r.Chunks {
			at := r.Origin.Add(off)
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
			errs = append(errs, float64(at.UnixNano()-writes[k])/1e6)
		}
	}
	sort.Float64s(errs)
	st.Chunks = len(errs)
	if d := last.Sub(first).Seconds(); d > 0 {
		st.Achieved = float64(len(errs)) / d
	}
	st.ErrP50, st.ErrP99 = round3(Percentile(errs, 50)), round3(Percentile(errs, 99))
	if len(errs) > 0 {
		st.ErrMax = round3(errs[len(errs)-1])
	}
	if run.CPUKnown && run.Duration > 0 {
		st.CPUPercent = round3(100 * run.CPU.Seconds() / run.Duration.Seconds())
		if st.Chunks > 0 && run.CPU > 0 {
			st.CPUPerChunk = round3(float64(run.CPU.Microseconds()) / float64(st.Chunks))
			st.CPUBound = math.Round(float64(st.Chunks) / run.CPU.Seconds())
		}
	}
	st.OK = st.Failed == 0 && st.Chunks > 0 && st.ErrP99 <= bound
	return st, nil
}

func fetchWrites(ctx context.Context, baseURL, id string) ([]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/log?id="+id, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New("upstream has no log for " + id)
	}
	var out struct {
		Writes []int64 `json:"writes_ns"`
	}
	return out.Writes, json.NewDecoder(resp.Body).Decode(&out)
}
