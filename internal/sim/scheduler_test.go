package sim

import (
	"testing"
	"time"
)

// fastModel is a small, fast profile for tests.
func fastModel() ModelConfig {
	return ModelConfig{Name: "m", MaxNumSeqs: 4, MaxModelLen: 4096, MaxNumBatchedTokens: 0,
		PrefillBase: 3 * time.Millisecond, PrefillPerToken: 10 * time.Microsecond,
		DecodeBase: 4 * time.Millisecond, DecodePerSeq: 1 * time.Millisecond, MeanOutputTokens: 64, EmbeddingDim: 8}
}

// simReq is one request of a virtual-time run.
type simReq struct {
	at     time.Duration // arrival, relative to the start of the run
	prompt int
	target int
	hashes []uint64 // the prompt's KV block hashes (none: nothing to share)
}

// simResult holds the virtual times at which a request's tokens completed.
type simResult struct {
	arrival time.Duration
	tokens  []time.Duration
	cached  int // prompt tokens the prefix cache served
}

func (r simResult) ttft() time.Duration { return r.tokens[0] - r.arrival }
func (r simResult) e2e() time.Duration  { return r.tokens[len(r.tokens)-1] - r.arrival }

// runVirtual drives the scheduler exactly as the engine loop does, but on a
// virtual clock: a step starts when the previous one ends, or when the
// next request arrives if the engine is idle. next, when set, is called
// when a request finishes and may return a follow-up request (closed loop).
func runVirtual(t *testing.T, mc ModelConfig, reqs []simReq, next func(done int, at time.Duration) *simReq) []simResult {
	t.Helper()
	if err := mc.validate(); err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1000, 0)
	s := scheduler{mc: mc, kv: newKVCache(mc)}
	var results []simResult
	pending := append([]simReq(nil), reqs...)
	index := map[*seq]int{}
	now := time.Duration(0)
	for steps := 0; ; steps++ {
		if steps > 1_000_000 {
			t.Fatal("virtual run does not terminate")
		}
		rest := pending[:0]
		for _, r := range pending {
			if r.at <= now {
				q := newSeq(r.prompt, r.target)
				q.hashes = r.hashes
				q.arrival = base.Add(r.at)
				if !s.enqueue(q) {
					t.Fatalf("queue full at %v", now)
				}
				index[q] = len(results)
				results = append(results, simResult{arrival: r.at})
			} else {
				rest = append(rest, r)
			}
		}
		pending = rest
		b := s.schedule(base.Add(now))
		if b.empty() {
			if len(pending) == 0 {
				return results
			}
			earliest := pending[0].at
			for _, r := range pending {
				earliest = min(earliest, r.at)
			}
			now = earliest
			continue
		}
		now += b.dur
		for _, q := range s.complete(b, base.Add(now)) {
			i := index[q]
			results[i].cached = q.cached
			for len(results[i].tokens) < q.generated {
				results[i].tokens = append(results[i].tokens, now)
			}
			if q.generated >= q.target && next != nil {
				if r := next(i, now); r != nil {
					pending = append(pending, *r)
				}
			}
		}
	}
}

func TestScheduler_BatchOneTTFTAndITLMatchConfiguration(t *testing.T) {
	mc := fastModel()
	res := runVirtual(t, mc, []simReq{{prompt: 200, target: 10}}, nil)[0]
	wantTTFT := mc.PrefillBase + 200*mc.PrefillPerToken + mc.DecodeBase + mc.DecodePerSeq
	if got := res.ttft(); got != wantTTFT {
		t.Errorf("TTFT = %v, want %v", got, wantTTFT)
	}
	wantITL := mc.DecodeBase + mc.DecodePerSeq
	for i := 1; i < len(res.tokens); i++ {
		if got := res.tokens[i] - res.tokens[i-1]; got != wantITL {
			t.Fatalf("ITL of token %d = %v, want %v", i, got, wantITL)
		}
	}
	if len(res.tokens) != 10 {
		t.Fatalf("generated %d tokens, want 10", len(res.tokens))
	}
}

func TestScheduler_PrefillTimeGrowsWithPromptLength(t *testing.T) {
	mc := fastModel()
	var prev time.Duration
	for i, p := range []int{10, 100, 1000, 3000} {
		got := runVirtual(t, mc, []simReq{{prompt: p, target: 2}}, nil)[0].ttft()
		if i > 0 && got <= prev {
			t.Errorf("TTFT for %d prompt tokens = %v, not above %v", p, got, prev)
		}
		want := mc.PrefillBase + time.Duration(p)*mc.PrefillPerToken + mc.DecodeBase + mc.DecodePerSeq
		if got != want {
			t.Errorf("TTFT for %d prompt tokens = %v, want %v", p, got, want)
		}
		prev = got
	}
}

func TestScheduler_RequestsBeyondMaxNumSeqsWaitInFIFOOrder(t *testing.T) {
	mc := fastModel()
	s := scheduler{mc: mc}
	qs := make([]*seq, 7)
	for i := range qs {
		qs[i] = newSeq(10, 3)
		if !s.enqueue(qs[i]) {
			t.Fatal("unbounded queue refused a request")
		}
	}
	b := s.schedule(time.Unix(0, 0))
	if len(s.running) != mc.MaxNumSeqs || s.numWaiting() != 3 || len(b.prefill) != mc.MaxNumSeqs {
		t.Fatalf("running %d waiting %d prefilling %d, want %d/3/%d", len(s.running), s.numWaiting(), len(b.prefill), mc.MaxNumSeqs, mc.MaxNumSeqs)
	}
	for i, q := range s.running {
		if q != qs[i] {
			t.Fatalf("running[%d] is not the %d-th arrival: admission is not FIFO", i, i)
		}
	}
	// The first finishers free slots for the waiting requests in order.
	res := runVirtual(t, mc, []simReq{{prompt: 10, target: 3}, {prompt: 10, target: 3}, {prompt: 10, target: 3}, {prompt: 10, target: 3}, {prompt: 10, target: 3}, {prompt: 10, target: 3}}, nil)
	if res[4].ttft() <= res[3].e2e() || res[5].ttft() < res[4].ttft() {
		t.Errorf("queued requests did not wait: ttft[4]=%v e2e[3]=%v ttft[5]=%v", res[4].ttft(), res[3].e2e(), res[5].ttft())
	}
}

func TestScheduler_BoundedQueueRefusesBeyondMaxQueue(t *testing.T) {
	mc := fastModel()
	mc.MaxQueue = 2
	s := scheduler{mc: mc}
	if !s.enqueue(newSeq(1, 1)) || !s.enqueue(newSeq(1, 1)) {
		t.Fatal("queue refused within its bound")
	}
	if s.enqueue(newSeq(1, 1)) {
		t.Fatal("queue accepted a request beyond max-queue")
	}
	s.schedule(time.Unix(0, 0)) // admits both, freeing the queue
	if !s.enqueue(newSeq(1, 1)) {
		t.Fatal("queue refused after admission freed it")
	}
}

func TestScheduler_CancelledSequencesLeaveTheBatch(t *testing.T) {
	mc := fastModel()
	s := scheduler{mc: mc}
	a, b := newSeq(5, 100), newSeq(5, 100)
	s.enqueue(a)
	s.enqueue(b)
	s.complete(s.schedule(time.Unix(0, 0)), time.Unix(0, 1))
	a.cancelled.Store(true)
	batch := s.schedule(time.Unix(0, 2))
	if len(s.running) != 1 || len(batch.decode) != 1 || batch.decode[0] != b {
		t.Fatalf("cancelled sequence still scheduled: running %d", len(s.running))
	}
}

func TestScheduler_ChunkedPrefillSplitsLongPromptsAndKeepsDecoding(t *testing.T) {
	mc := fastModel()
	mc.MaxNumBatchedTokens = 1000
	// A decoding request, then a 2500-token prompt that needs three chunks.
	res := runVirtual(t, mc, []simReq{{at: 0, prompt: 10, target: 50}, {at: 30 * time.Millisecond, prompt: 2500, target: 2}}, nil)
	long := res[1]
	// Chunks of 999, 999 and 502 tokens (the decode takes one token of
	// each step's budget); the first token comes with the last chunk.
	stepCost := func(prefill int) time.Duration {
		return mc.DecodeBase + 2*mc.DecodePerSeq + mc.PrefillBase + time.Duration(prefill)*mc.PrefillPerToken
	}
	minTTFT := stepCost(999) + stepCost(999) + stepCost(502)
	if long.ttft() < minTTFT || long.ttft() > minTTFT+stepCost(0) {
		t.Errorf("TTFT of chunked prompt = %v, want between %v and one step more", long.ttft(), minTTFT)
	}
	// The decoding request kept getting a token every step meanwhile.
	short := res[0]
	for i := 1; i < len(short.tokens); i++ {
		if gap := short.tokens[i] - short.tokens[i-1]; gap > stepCost(999) {
			t.Fatalf("decode stalled for %v during chunked prefill", gap)
		}
	}
}

// closedLoop runs c clients that each send rounds requests back to back and
// returns output tokens per virtual second and the mean request latency.
func closedLoop(t *testing.T, mc ModelConfig, c, rounds, prompt, target int) (tokPerSec float64, meanE2E time.Duration) {
	reqs := make([]simReq, c)
	for i := range reqs {
		reqs[i] = simReq{prompt: prompt, target: target}
	}
	sent := c
	res := runVirtual(t, mc, reqs, func(done int, at time.Duration) *simReq {
		if sent >= c*rounds {
			return nil
		}
		sent++
		return &simReq{at: at, prompt: prompt, target: target}
	})
	var end, sum time.Duration
	for _, r := range res {
		end = max(end, r.tokens[len(r.tokens)-1])
		sum += r.e2e()
	}
	return float64(len(res)*target) / end.Seconds(), sum / time.Duration(len(res))
}

func TestScheduler_ThroughputRisesThenFlattensAtMaxNumSeqs(t *testing.T) {
	mc := fastModel()
	mc.MaxNumSeqs = 8
	mc.DecodePerSeq = 200 * time.Microsecond
	var tps []float64
	var lat []time.Duration
	levels := []int{1, 2, 4, 8, 16, 32}
	for _, c := range levels {
		tp, l := closedLoop(t, mc, c, 8, 100, 40)
		tps = append(tps, tp)
		lat = append(lat, l)
		t.Logf("concurrency %2d: %7.0f tok/s, mean latency %v", c, tp, l)
	}
	for i := 1; i < len(levels); i++ {
		if lat[i] <= lat[i-1] {
			t.Errorf("latency did not grow from concurrency %d to %d: %v -> %v", levels[i-1], levels[i], lat[i-1], lat[i])
		}
		if levels[i] <= mc.MaxNumSeqs && tps[i] < 1.5*tps[i-1] {
			t.Errorf("throughput did not rise from concurrency %d to %d: %.0f -> %.0f", levels[i-1], levels[i], tps[i-1], tps[i])
		}
		if levels[i] > mc.MaxNumSeqs && (tps[i] > 1.05*tps[3] || tps[i] < 0.9*tps[3]) {
			t.Errorf("throughput at concurrency %d = %.0f, want flat at the max-num-seqs level %.0f", levels[i], tps[i], tps[3])
		}
	}
}
