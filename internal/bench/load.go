package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Cell is one load setting of the matrix: a closed loop with Concurrency
// workers, or an open loop at Rate requests per second (math.Inf(1) sends
// all at once) with an optional MaxConcurrency cap.
type Cell struct {
	Concurrency    int
	Rate           float64
	MaxConcurrency int
}

// Open reports whether the cell is an open-loop (request-rate) cell.
func (c Cell) Open() bool { return c.Rate > 0 }

// String labels the cell in progress lines and tables.
func (c Cell) String() string {
	if !c.Open() {
		return fmt.Sprintf("c=%d", c.Concurrency)
	}
	s := "rate=" + FormatRate(c.Rate)
	if c.MaxConcurrency > 0 {
		s += fmt.Sprintf(",max=%d", c.MaxConcurrency)
	}
	return s
}

// FormatRate prints a request rate, "inf" for an unbounded one.
func FormatRate(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return fmt.Sprintf("%g", r)
}

// conns is the connection pool size the cell needs.
func (c Cell) conns(numRequests int) int {
	if !c.Open() {
		return c.Concurrency
	}
	if c.MaxConcurrency > 0 {
		return c.MaxConcurrency
	}
	if numRequests > 0 {
		return min(numRequests, 4096)
	}
	return 4096
}

// CellRun is what one target × cell produced.
type CellRun struct {
	Target   *Target
	Cell     Cell
	Results  []Result
	Duration time.Duration
	CPU      time.Duration
	// Spin is time the open-loop dispatcher spent yielding just before
	// send times; it is excluded from the CPU rule.
	Spin     time.Duration
	CPUKnown bool
	// SchedLag holds how late the client's 1 ms probe timer woke, a direct
	// measure of how long a ready goroutine (such as a stream reader whose
	// bytes arrived) waited to run.
	SchedLag []time.Duration
	Proxy    string
	// WarmupEngineWait is the longest wait for an engine start among the
	// warm-up requests (discarded with them, but reported).
	WarmupEngineWait time.Duration
}

// cellPlan is what a cell runs: prepared bodies and limits.
type cellPlan struct {
	bodies      [][]byte
	prompts     []Prompt
	numRequests int
	duration    time.Duration
	warmup      int
	burstiness  float64
	seed        uint64
	progress    *progress
}

func (p *cellPlan) item(i int) ([]byte, *Prompt) {
	j := i % len(p.bodies)
	return p.bodies[j], &p.prompts[j]
}

// runCell measures one target at one cell.
func runCell(ctx context.Context, t *Target, cell Cell, plan *cellPlan, reqOpts *RequestOptions, idBase string) *CellRun {
	tr := newTransport(cell.conns(plan.numRequests))
	defer tr.CloseIdleConnections()
	// Resends after a stale pooled connection each dial a new one that is
	// closed after use, so they never take the pool's place.
	freshTr := newTransport(cell.conns(plan.numRequests))
	freshTr.DisableKeepAlives = true
	q := &requester{
		client:  &http.Client{Transport: tr},
		fresh:   &http.Client{Transport: freshTr},
		target:  t,
		url:     t.URL(),
		timeout: reqOpts.Timeout,
		idBase:  idBase,
	}
	run := &CellRun{Target: t, Cell: cell, Proxy: ProxyFor(t.URL())}

	// Warm-up opens the pool's connections and wakes the server's caches;
	// its results are discarded.
	if w := plan.warmup; w > 0 {
		par := cell.conns(w)
		if cell.Open() && cell.MaxConcurrency == 0 {
			par = min(w, par)
		}
		for _, r := range closedLoop(ctx, q, plan, w, 0, max(par, 1), "warmup-", nil) {
			run.WarmupEngineWait = max(run.WarmupEngineWait, r.EngineWait)
		}
	}

	plan.progress.begin()
	stopProbe := make(chan struct{})
	probeDone := make(chan []time.Duration)
	go schedProbe(stopProbe, probeDone)
	cpu0, ok0 := processCPU()
	start := time.Now()
	if cell.Open() {
		run.Results = openLoop(ctx, q, cell, plan, start)
	} else {
		run.Results = closedLoop(ctx, q, plan, plan.numRequests, plan.duration, cell.Concurrency, "", plan.progress)
	}
	run.Duration = time.Since(start)
	cpu1, ok1 := processCPU()
	close(stopProbe)
	run.SchedLag = <-probeDone
	run.CPU, run.CPUKnown = cpu1-cpu0, ok0 && ok1
	sort.Slice(run.Results, func(i, j int) bool { return run.Results[i].Index < run.Results[j].Index })
	return run
}

// closedLoop runs workers that each send the next request as soon as their
// previous one finishes, until n requests (n > 0) or the duration ends.
func closedLoop(ctx context.Context, q *requester, plan *cellPlan, n int, dur time.Duration, workers int, idPrefix string, pr *progress) []Result {
	var next atomic.Int64
	var deadline time.Time
	if dur > 0 {
		deadline = time.Now().Add(dur)
	}
	per := make([][]Result, workers)
	var wg sync.WaitGroup
	saved := q.idBase
	q.idBase = saved + idPrefix
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if n > 0 && i >= n {
					return
				}
				if dur > 0 && time.Now().After(deadline) {
					return
				}
				body, p := plan.item(i)
				per[w] = append(per[w], Result{})
				res := &per[w][len(per[w])-1]
				q.do(ctx, body, p, i, time.Time{}, res)
				pr.done(res)
			}
		}(w)
	}
	wg.Wait()
	q.idBase = saved
	var out []Result
	for _, rs := range per {
		out = append(out, rs...)
	}
	return out
}

// openLoop sends requests at scheduled times whether or not earlier ones
// finished. Latency is measured from the intended send time: the scheduled
// arrival, or the moment a slot freed up when --max-concurrency made the
// request wait. A client that falls behind therefore shows its lateness in
// every latency instead of silently sending later (coordinated omission).
func openLoop(ctx context.Context, q *requester, cell Cell, plan *cellPlan, start time.Time) []Result {
	rng := rand.New(rand.NewPCG(plan.seed, 0x6f70656e))
	var offsets []time.Duration
	if plan.numRequests > 0 {
		offsets = Arrivals(plan.numRequests, cell.Rate, plan.burstiness, rng)
	}
	var sem chan struct{}
	if cell.MaxConcurrency > 0 {
		sem = make(chan struct{}, cell.MaxConcurrency)
	}
	var mu sync.Mutex
	var results []Result
	var wg sync.WaitGroup
	var acc, prevOff time.Duration
	for i := 0; ctx.Err() == nil; i++ {
		var off time.Duration
		if offsets != nil {
			if i >= len(offsets) {
				break
			}
			off = offsets[i]
		} else {
			if !math.IsInf(cell.Rate, 1) {
				acc += time.Duration(gap(cell.Rate, plan.burstiness, rng) * float64(time.Second))
			}
			off = acc
			if off >= plan.duration || (math.IsInf(cell.Rate, 1) && i >= 100000) {
				break
			}
		}
		sched := start.Add(off)
		waitUntil(ctx, sched, off-prevOff >= spinGap)
		prevOff = off
		wg.Add(1)
		go func(i int, sched time.Time) {
			defer wg.Done()
			intended := sched
			if sem != nil {
				select {
				case sem <- struct{}{}:
				default:
					sem <- struct{}{}
					intended = time.Now()
				}
				defer func() { <-sem }()
			}
			body, p := plan.item(i)
			var res Result
			q.do(ctx, body, p, i, intended, &res)
			res.QueueWait = intended.Sub(sched)
			res.DispatchLag = res.Sent.Sub(intended)
			plan.progress.done(&res)
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		}(i, sched)
	}
	wg.Wait()
	return results
}

// spinGap is the smallest gap between sends for which waitUntil spins.
const spinGap = 5 * time.Millisecond

// waitUntil returns at t. Go's timers on Linux wake up to a millisecond
// late when the process is idle (the poller waits in whole milliseconds),
// which would show as dispatch lag and, since open-loop latency starts at
// the scheduled time, as latency. When spin is set (the dispatcher has
// been idle for at least spinGap, the case where timers are coarse) it
// sleeps on a timer until 1.2 ms before t and yields in a loop for the
// rest. At higher rates the process is busy, the runtime checks timers on
// every scheduling round, and a plain timer is precise; spinning there
// would also keep the network poller from running, because a yielding
// goroutine is always runnable.
func waitUntil(ctx context.Context, t time.Time, spin bool) {
	const window = 1200 * time.Microsecond
	for ctx.Err() == nil {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		if spin && d <= window {
			for time.Now().Before(t) && ctx.Err() == nil {
				runtime.Gosched()
			}
			return
		}
		if spin {
			d -= window
		}
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
}

// schedProbe measures how long a goroutine woken by the network poller
// waits before it runs, which is exactly the delay between a stream's bytes
// arriving and the reader stamping them. Every millisecond it writes the
// current monotonic time into a pipe; a reader goroutine blocked on the
// pipe (through the same poller as the sockets) records the time from the
// write to its wake-up. The probe costs about a thousand tiny syscalls per
// second. It deliberately does not count late ticks of its own timer: on a
// loaded machine the OS delays timer wake-ups by tens of milliseconds while
// socket wake-ups stay prompt (measured: ticker gap p99 20 ms against pipe
// or socket wake-up p99 0.1 ms), so timer lateness would flag cells whose
// chunk timestamps were in fact exact.
func schedProbe(stop <-chan struct{}, out chan<- []time.Duration) {
	pr, pw, err := os.Pipe()
	if err != nil {
		<-stop
		out <- nil
		return
	}
	base := time.Now()
	lagc := make(chan []time.Duration, 1)
	go func() {
		var lags []time.Duration
		var b [8]byte
		for {
			if _, err := io.ReadFull(pr, b[:]); err != nil {
				lagc <- lags
				return
			}
			sent := time.Duration(binary.LittleEndian.Uint64(b[:]))
			lags = append(lags, max(time.Since(base)-sent, 0))
		}
	}()
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	var b [8]byte
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-tk.C:
			binary.LittleEndian.PutUint64(b[:], uint64(time.Since(base)))
			if _, err := pw.Write(b[:]); err != nil {
				break loop
			}
		}
	}
	pw.Close()
	lags := <-lagc
	pr.Close()
	out <- lags
}
