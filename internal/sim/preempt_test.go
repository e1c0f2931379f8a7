package sim

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// smallKVModel is fastModel with a KV cache of blocks blocks of 16 tokens
// that holds one max-model-len sequence exactly.
func smallKVModel(t *testing.T, blocks int) ModelConfig {
	t.Helper()
	mc := fastModel()
	mc.BlockSize, mc.KVCacheTokens, mc.MaxModelLen = 16, 16*blocks, 16*blocks
	if err := mc.validate(); err != nil {
		t.Fatal(err)
	}
	return mc
}

// stepDriver runs a scheduler step by step on a virtual clock, as the
// engine loop does, feeding the metrics and publishing progress, and
// checks after every step that no sequence's token count went down or rose
// by more than one, and that its published count follows.
type stepDriver struct {
	t     *testing.T
	s     *scheduler
	m     *modelMetrics
	now   time.Time
	steps int
	last  map[*seq]int
}

func newStepDriver(t *testing.T, mc ModelConfig) *stepDriver {
	return &stepDriver{t: t, s: &scheduler{mc: mc, kv: newKVCache(mc)}, m: newModelMetrics(mc), now: time.Unix(1000, 0), last: map[*seq]int{}}
}

func (d *stepDriver) enqueue(qs ...*seq) {
	for _, q := range qs {
		q.arrival = d.now
		if !d.s.enqueue(q) {
			d.t.Fatal("queue refused a request")
		}
	}
}

// step schedules and completes one step; it reports false when there was
// nothing to do.
func (d *stepDriver) step() (batch, bool) {
	d.t.Helper()
	b := d.s.schedule(d.now)
	if b.empty() {
		return b, false
	}
	d.steps++
	d.now = d.now.Add(b.dur)
	touched := d.s.complete(b, d.now)
	d.m.observeStep(touched, d.now)
	for _, q := range touched {
		q.publish()
		pub, _ := q.snapshot()
		if q.generated < d.last[q] || q.generated > d.last[q]+1 || pub != q.generated {
			d.t.Fatalf("step %d: a sequence went from %d to %d tokens (published %d)", d.steps, d.last[q], q.generated, pub)
		}
		d.last[q] = q.generated
	}
	if d.s.kv.used > d.s.kv.capacity {
		d.t.Fatalf("step %d: %d blocks held of %d", d.steps, d.s.kv.used, d.s.kv.capacity)
	}
	return b, true
}

// drain runs steps until nothing is left, failing after limit steps.
func (d *stepDriver) drain(limit int) {
	d.t.Helper()
	for {
		if _, ok := d.step(); !ok {
			break
		}
		if d.steps > limit {
			d.t.Fatalf("not drained after %d steps: running %d, waiting %d", limit, len(d.s.running), d.s.numWaiting())
		}
	}
	if len(d.s.running) != 0 || d.s.numWaiting() != 0 || d.s.kv.used != 0 {
		d.t.Fatalf("drained with running %d, waiting %d, %d blocks held", len(d.s.running), d.s.numWaiting(), d.s.kv.used)
	}
}

func TestScheduler_AdmitsByPromptBlocksNotTheWholeOutput(t *testing.T) {
	mc := smallKVModel(t, 8) // 128 tokens
	// Each request's 16 + 100 tokens would take all 8 blocks: the old rule
	// (and the llama.cpp face, which reserves the output) runs one at a time.
	reqs := func() []*seq {
		return []*seq{seqWith(16, 100, 1), seqWith(16, 100, 2), seqWith(16, 100, 3), seqWith(16, 100, 4)}
	}
	reserve := mc
	reserve.reserveOutput = true
	old := scheduler{mc: reserve, kv: newKVCache(reserve)}
	for _, q := range reqs() {
		old.enqueue(q)
	}
	old.schedule(time.Unix(0, 0))
	if len(old.running) != 1 {
		t.Fatalf("reserving the output: %d running, want 1", len(old.running))
	}

	d := newStepDriver(t, mc)
	qs := reqs()
	d.enqueue(qs...)
	b, _ := d.step()
	if len(d.s.running) != 4 || len(b.prefill) != 4 || d.s.kv.used != 4 {
		t.Fatalf("running %d, prefilling %d, %d blocks held; want all 4 admitted on their 1 prompt block each", len(d.s.running), len(b.prefill), d.s.kv.used)
	}
	d.drain(10000)
	for i, q := range qs {
		if q.generated != q.target {
			t.Errorf("request %d: %d of %d tokens", i, q.generated, q.target)
		}
	}
	if d.s.preemptions == 0 {
		t.Error("four sequences growing to 116 tokens in 128 finished without a preemption")
	}
	if d.m.genTokens != 400 || d.m.promptTokens != 64 || d.m.success["stop"] != 4 {
		t.Errorf("metrics: %d generation tokens, %d prompt tokens, %d finished; want 400, 64 (each prompt once), 4", d.m.genTokens, d.m.promptTokens, d.m.success["stop"])
	}
}

func TestScheduler_DecodeGrowthPreemptsTheNewestWhichIsRecomputedAndFinishes(t *testing.T) {
	mc := smallKVModel(t, 8)
	mc.MaxNumSeqs = 2
	a := seqWith(32, 64, 1, 2) // 2 prompt blocks; 32+63 tokens of KV at its last step: 6 blocks
	b := seqWith(32, 64, 3, 4)
	c := seqWith(16, 1, 5) // waits behind them for a seat
	d := newStepDriver(t, mc)
	d.enqueue(a, b, c)
	d.step()
	if len(d.s.running) != 2 || d.s.waiting[d.s.head] != c {
		t.Fatalf("running %d; want a and b running, c waiting", len(d.s.running))
	}
	// Both grow a block every 16 tokens: 4 blocks each at 32+32 tokens
	// fill the cache, and a's next block must come from b, the newest.
	var before int
	var gapBefore time.Duration // between b's last two tokens before it was preempted
	for d.s.preemptions == 0 {
		before = b.generated
		bt, ok := d.step()
		if !ok {
			t.Fatal("ran dry without preempting")
		}
		if d.s.preemptions > 0 {
			if len(bt.decode) != 1 || bt.decode[0] != a || len(bt.prefill) != 0 {
				t.Fatalf("preempting step: %d decodes, %d prefills; want a's decode alone (no admission in a step that preempts)", len(bt.decode), len(bt.prefill))
			}
			break
		}
		gapBefore = b.lastToken.Sub(b.prevToken)
	}
	if d.s.preemptions != 1 || len(d.s.running) != 1 || d.s.running[0] != a {
		t.Fatalf("%d preemptions, running %d; want b preempted once and a running", d.s.preemptions, len(d.s.running))
	}
	if d.s.numWaiting() != 2 || d.s.waiting[d.s.head] != b || d.s.waiting[d.s.head+1] != c {
		t.Fatalf("waiting %d; want b back at the front, before c", d.s.numWaiting())
	}
	if b.generated != before || before != 33 || b.prefilled != 0 || b.prefillLen != 32+before || len(b.kvHeld) != 0 || b.kvAnon != 0 {
		t.Fatalf("preempted b: %d tokens (had %d), prefilled %d of %d, holding %d+%d blocks; want its 33 tokens kept, a prefill of 32+33 to redo, no block held",
			b.generated, before, b.prefilled, b.prefillLen, len(b.kvHeld), b.kvAnon)
	}
	lastBefore := b.lastToken

	// b's recompute (5 blocks, 2 of them its cached prompt) does not fit
	// beside a (5, then 6 blocks): b, and c behind it, wait for a to finish.
	var resumed batch
	for resumed.empty() {
		bt, ok := d.step()
		if !ok {
			t.Fatal("ran dry before b resumed")
		}
		for _, pc := range bt.prefill {
			if pc.s == b {
				resumed = bt
			}
		}
		if resumed.empty() && (len(bt.prefill) != 0 || len(bt.decode) != 1) {
			t.Fatalf("while b waits: %d prefills, %d decodes; want a's decode alone", len(bt.prefill), len(bt.decode))
		}
	}
	if a.generated != a.target {
		t.Fatalf("b resumed with a at %d of %d tokens, though it could not fit beside a", a.generated, a.target)
	}
	// The recompute prefills prompt and generated tokens, less the prompt
	// blocks b finds still cached; c is admitted after it.
	if len(resumed.prefill) != 2 || resumed.prefill[0].s != b || resumed.prefill[0].n != 32+33-32 || resumed.prefill[1].s != c {
		t.Fatalf("resuming step prefills %v; want b's 33 uncached tokens (2 cached prompt blocks), then c", resumed.prefill)
	}
	if b.generated != 34 || b.cached != 0 {
		t.Fatalf("after its recompute b has %d tokens and reports %d cached; want 34 (the recompute samples the next) and 0 (usage keeps the first admission's figure)", b.generated, b.cached)
	}
	if stall := b.lastToken.Sub(lastBefore); stall <= gapBefore {
		t.Errorf("b's token after the preemption came %v after the previous one, not more than its usual %v: no stall", stall, gapBefore)
	}
	d.drain(1000)
	for name, q := range map[string]*seq{"a": a, "b": b, "c": c} {
		if q.generated != q.target {
			t.Errorf("%s: %d of %d tokens", name, q.generated, q.target)
		}
	}
	if d.m.genTokens != 64+64+1 || d.m.promptTokens != 32+32+16 || d.m.success["stop"] != 3 {
		t.Errorf("metrics: %d generation tokens, %d prompt tokens, %d finished; want 129, 80, 3 (nothing lost or counted twice)", d.m.genTokens, d.m.promptTokens, d.m.success["stop"])
	}
	if d.s.kv.queries != 80 {
		t.Errorf("prefix-cache queries %d, want 80: a resumed request's lookup is not counted again", d.s.kv.queries)
	}
}

func TestScheduler_TheNewestRequestNeedingABlockPreemptsItself(t *testing.T) {
	// a prefills in chunks and is the newest running request when its next
	// chunk has no room: it is preempted itself, not the older x, and the
	// step goes on with x. a was admitted with room for its whole prompt
	// (7 of 8 blocks free), but admission takes only the blocks of the
	// chunk it prefills, and x grows into the others meanwhile.
	mc := smallKVModel(t, 8)
	mc.MaxNumBatchedTokens = 40
	x := seqWith(16, 80, 1)                // 1 block, growing to 6
	a := seqWith(100, 4, 2, 3, 4, 5, 6, 7) // 7 blocks, in chunks of 24, 39, 37
	d := newStepDriver(t, mc)
	d.enqueue(x, a)
	for d.s.preemptions == 0 {
		if _, ok := d.step(); !ok {
			t.Fatal("ran dry without preempting")
		}
	}
	if len(d.s.running) != 1 || d.s.running[0] != x || d.s.waiting[d.s.head] != a {
		t.Fatalf("running %d; want x running and a, which could not get its block, preempted", len(d.s.running))
	}
	d.drain(1000)
	if x.generated != x.target || a.generated != a.target {
		t.Fatalf("x %d/%d, a %d/%d tokens", x.generated, x.target, a.generated, a.target)
	}
}

func TestScheduler_AdmissionNeedsRoomForTheWholePrompt(t *testing.T) {
	// x runs and holds 5 of 8 blocks; a's 100-token prompt needs 7, its
	// first chunk 3. vLLM (--scheduler-reserve-full-isl, its default) keeps
	// a waiting until its whole prompt fits: no preemption, a runs after x.
	// With the gate off (the rule before it), a is admitted on its first
	// chunk and, with no room for its next one, preempts itself.
	for _, fullISL := range []bool{true, false} {
		t.Run(fmt.Sprint("full_isl=", fullISL), func(t *testing.T) {
			mc := smallKVModel(t, 8)
			mc.MaxNumBatchedTokens = 40
			mc.NoReserveFullISL = !fullISL
			x := seqWith(16, 80, 1) // grows to 6 blocks
			d := newStepDriver(t, mc)
			d.enqueue(x)
			for x.generated < 60 { // 16+60 tokens: 5 blocks
				d.step()
			}
			a := seqWith(100, 4, 2, 3, 4, 5, 6, 7)
			d.enqueue(a)
			admittedWhileX := false
			for x.generated < x.target {
				if _, ok := d.step(); !ok {
					t.Fatal("ran dry before x finished")
				}
				if a.prefilled > 0 && x.generated < x.target {
					admittedWhileX = true
				}
			}
			d.drain(1000)
			if fullISL && (admittedWhileX || d.s.preemptions != 0) {
				t.Fatalf("a admitted while x ran: %v, %d preemptions; want a waiting for room for its whole prompt, none preempted", admittedWhileX, d.s.preemptions)
			}
			if !fullISL && (!admittedWhileX || d.s.preemptions == 0) {
				t.Fatalf("gate off: a admitted while x ran: %v, %d preemptions; want a admitted on its first chunk and preempted", admittedWhileX, d.s.preemptions)
			}
			if x.generated != x.target || a.generated != a.target {
				t.Fatalf("x %d/%d, a %d/%d tokens", x.generated, x.target, a.generated, a.target)
			}
		})
	}
}

func TestScheduler_WatermarkKeepsBlocksFreeWhileOthersRun(t *testing.T) {
	// x holds 2 of 8 blocks; b's prompt needs 5. With no watermark (vLLM's
	// default) b is admitted beside x; a watermark of 0.25 (2 blocks) keeps
	// it waiting until x is done. Alone, a request ignores the watermark.
	for _, tc := range []struct {
		watermark   float64
		besideX     bool
		description string
	}{{0, true, "no watermark"}, {0.25, false, "watermark 0.25"}} {
		t.Run(tc.description, func(t *testing.T) {
			mc := smallKVModel(t, 8)
			mc.Watermark = tc.watermark
			if err := mc.validate(); err != nil {
				t.Fatal(err)
			}
			x := seqWith(20, 8, 1) // 2 blocks until it ends
			d := newStepDriver(t, mc)
			d.enqueue(x)
			d.step()
			b := seqWith(80, 1, 2, 3, 4, 5, 6) // 5 blocks
			d.enqueue(b)
			d.step()
			if beside := b.prefilled > 0; beside != tc.besideX {
				t.Fatalf("b admitted beside x: %v, want %v", beside, tc.besideX)
			}
			d.drain(1000)
			alone := seqWith(16*8-1, 1, 7) // the whole cache but for one token: the watermark does not apply
			d.enqueue(alone)
			d.drain(1000)
			if alone.generated != 1 {
				t.Fatalf("a request alone got %d tokens", alone.generated)
			}
		})
	}
	mc := smallKVModel(t, 8)
	for _, bad := range []float64{-0.1, 1, 2} {
		mc.Watermark = bad
		if err := mc.validate(); err == nil || !strings.Contains(err.Error(), "watermark") {
			t.Errorf("watermark %v: %v, want an error naming it", bad, err)
		}
	}
}

func TestScheduler_NoAdmissionInAStepThatPreemptsThenTheVictimFirst(t *testing.T) {
	// With chunked prefill and the admission gate off (vLLM
	// --scheduler-reserve-full-isl=false), the victim's first recompute
	// chunk fits at once, but as in vLLM nothing is admitted in the step
	// that preempted it; it is admitted in the next, ahead of a request
	// queued after it.
	mc := smallKVModel(t, 8)
	mc.MaxNumBatchedTokens = 20
	mc.NoReserveFullISL = true
	x := seqWith(16, 100, 1)
	a := seqWith(16, 100, 2)
	d := newStepDriver(t, mc)
	d.enqueue(x, a)
	for d.s.preemptions == 0 {
		if _, ok := d.step(); !ok {
			t.Fatal("ran dry without preempting")
		}
	}
	late := seqWith(16, 4, 3)
	d.enqueue(late)
	if len(d.s.running) != 1 || d.s.running[0] != x || d.s.waiting[d.s.head] != a {
		t.Fatalf("running %d; want x running and a, the newer, preempted at the front of the queue", len(d.s.running))
	}
	kept := a.generated
	b, _ := d.step()
	if len(b.prefill) != 1 || b.prefill[0].s != a || d.s.waiting[d.s.head] != late {
		t.Fatalf("step after the preemption prefills %d sequences; want a's recompute alone (it takes the rest of the budget), the later request still waiting", len(b.prefill))
	}
	// a finds its one prompt block cached and recomputes the rest of its
	// prompt and its tokens, 19 of them in this step's budget (x decodes).
	if b.prefill[0].n != 19 || a.prefilled != 16+19 || a.prefillLen != 16+kept {
		t.Fatalf("a's recompute chunk %d, prefilled %d of %d; want 19, 35 of %d", b.prefill[0].n, a.prefilled, a.prefillLen, 16+kept)
	}
	d.drain(10000)
	for _, q := range []*seq{x, a, late} {
		if q.generated != q.target {
			t.Errorf("%d of %d tokens", q.generated, q.target)
		}
	}
}

func TestScheduler_OneSequenceCacheAlwaysProgresses(t *testing.T) {
	// The smallest cache allowed holds one max-model-len sequence. Many
	// concurrent requests that each fill it, some prefilled in chunks,
	// still all finish: the oldest running request always gets its blocks.
	for _, budget := range []int{0, 64} {
		t.Run(fmt.Sprint("budget", budget), func(t *testing.T) {
			mc := smallKVModel(t, 16) // 256 tokens
			mc.MaxNumSeqs, mc.MaxNumBatchedTokens = 8, budget
			d := newStepDriver(t, mc)
			var qs []*seq
			for i := range 20 {
				p := 40 + 10*(i%10) // 40..130 prompt tokens, the rest output
				q := seqWith(p, 256-p, uint64(i+1)<<8)
				qs = append(qs, q)
				d.enqueue(q)
			}
			d.drain(200000)
			total := 0
			for i, q := range qs {
				if q.generated != q.target {
					t.Errorf("request %d: %d of %d tokens", i, q.generated, q.target)
				}
				total += q.target
			}
			if d.s.preemptions == 0 {
				t.Error("no preemption: the test does not exercise the shortage")
			}
			if d.m.genTokens != uint64(total) || d.m.success["stop"] != 20 {
				t.Errorf("metrics: %d generation tokens, %d finished; want %d, 20", d.m.genTokens, d.m.success["stop"], total)
			}
			t.Logf("%d steps, %d preemptions", d.steps, d.s.preemptions)
		})
	}
}

func TestLive_PreemptionsCountedOnMetrics(t *testing.T) {
	mc := fastModel()
	mc.MaxModelLen, mc.KVCacheTokens = 256, 256 // 16 blocks: two 100-token prompts fit, not their outputs
	_, url := startServer(t, Config{Models: []ModelConfig{mc}, Seed: 1})
	body := `{"model":"m","prompt":"` + strings.Repeat("abcd", 100) + `","max_tokens":140,"ignore_eos":true}`
	var wg sync.WaitGroup
	usage := make([]string, 4)
	for i := range usage {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := body
			if i == 0 {
				b = strings.Replace(body, `"ignore_eos":true`, `"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}`, 1)
				res := stream(t, url+"/v1/completions", b)
				if !res.done || res.err != nil || len(res.events) == 0 {
					t.Errorf("stream: done %v, err %v", res.done, res.err)
					return
				}
				usage[i] = string(res.events[len(res.events)-1].data)
				return
			}
			code, _, resp := post(t, url+"/v1/completions", b)
			if code != 200 {
				t.Errorf("status %d: %s", code, resp)
			}
			usage[i] = string(resp)
		}()
	}
	wg.Wait()
	for i, u := range usage {
		if !strings.Contains(u, `"completion_tokens":140`) {
			t.Errorf("request %d: want all 140 tokens, got %s", i, u)
		}
	}
	_, text := get(t, url+"/metrics")
	m := string(text)
	if !strings.Contains(m, "# TYPE vllm:num_preemptions_total counter\n") {
		t.Error("/metrics lacks the vllm:num_preemptions_total counter family")
	}
	if got := metricLine(t, m, "vllm:num_preemptions_total"); got == "0.0" {
		t.Errorf("vllm:num_preemptions_total %s after four 240-token sequences shared 256 tokens of KV cache", got)
	}
	if got := metricLine(t, m, "vllm:generation_tokens_total"); got != "560.0" {
		t.Errorf("vllm:generation_tokens_total %s, want 560.0 (4 × 140: no token counted twice)", got)
	}
}
