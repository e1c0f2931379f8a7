package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// agentBody is a chat request as an agent sends it: a long system prompt,
// tools, and turns of history.
func agentBody(system string, turns int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","stream":true,"messages":[{"role":"system","content":`)
	fmt.Fprintf(&b, "%q}", system)
	for i := range turns {
		fmt.Fprintf(&b, `,{"role":"user","content":"turn %d: please look at file_%d.go and fix the failing test"}`, i, i)
		fmt.Fprintf(&b, `,{"role":"assistant","content":"I read file_%d.go; the test fails because the loop stops one early. Fixed."}`, i)
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}]}`)
	return []byte(b.String())
}

func words(n int, salt string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", salt, i%97)
	}
	return b.String()
}

func TestPrefixBlocks_NextTurnExtendsThePreviousOnesHashes(t *testing.T) {
	sys := words(800, "w")
	t1 := PrefixBlocks(agentBody(sys, 1), nil)
	t2 := PrefixBlocks(agentBody(sys, 3), nil)
	if len(t1) < 10 || len(t2) <= len(t1) {
		t.Fatalf("blocks: turn1 %d, turn3 %d", len(t1), len(t2))
	}
	// Every full block of turn 1 but the last (which holds the closing
	// "]" of its messages) is a block of turn 3.
	for i := range len(t1) - 1 {
		if t1[i] != t2[i] {
			t.Fatalf("block %d differs between turns", i)
		}
	}
	other := PrefixBlocks(agentBody(words(800, "x"), 1), nil)
	if other[0] == t1[0] {
		t.Fatal("another system prompt gives the same first block")
	}
}

func TestPrefixBlocks_ChainedAndInCanonicalOrder(t *testing.T) {
	sys := words(300, "s")
	a := []byte(`{"tools":[{"name":"t"}],"messages":[{"role":"user","content":"` + sys + `"}],"model":"m"}`)
	b := []byte(`{"model":"m","messages":[{"role":"user","content":"` + sys + `"}],"tools":[{"name":"t"}]}`)
	ha, hb := PrefixBlocks(a, nil), PrefixBlocks(b, nil)
	if len(ha) == 0 || fmt.Sprint(ha) != fmt.Sprint(hb) {
		t.Fatalf("member order changed the hashes: %v vs %v", ha, hb)
	}
	// A change in the first block changes every later hash (chained),
	// even where the bytes after it are the same.
	c := []byte(`{"model":"m","messages":[{"role":"user","content":"X` + sys[1:] + `"}],"tools":[{"name":"t"}]}`)
	hc := PrefixBlocks(c, nil)
	for i := range hc {
		if hc[i] == hb[i] {
			t.Fatalf("block %d equal after the first block changed", i)
		}
	}
	if got := PrefixBlocks([]byte(`[1,2]`), nil); len(got) != 0 {
		t.Fatalf("non-object body gave %d blocks", len(got))
	}
	if got := PrefixBlocks([]byte(`{"messages":[]}`), nil); len(got) != 0 {
		t.Fatalf("a short prompt gave %d blocks; only full blocks count", len(got))
	}
}

func TestSessionKey_UserFieldThenAnthropicMetadata(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"m","user":"alice"}`:                                "alice",
		`{"model":"m","metadata":{"user_id":"user_x_session_42"}}`:    "user_x_session_42",
		`{"model":"m","user":"","metadata":{"user_id":"s1"}}`:         "s1",
		`{"model":"m","messages":[{"role":"user","content":"user"}]}`: "",
		`{"model":"m","metadata":{"other":"x"}}`:                      "",
	} {
		if got := SessionKey([]byte(body)); got != want {
			t.Errorf("SessionKey(%s) = %q, want %q", body, got, want)
		}
	}
}

func TestRecord_MatchCountsLeadingBlocksHeld(t *testing.T) {
	r := NewRecord(100)
	r.Add([]uint64{1, 2, 3, 4})
	for _, c := range []struct {
		q    []uint64
		want int
	}{{[]uint64{1, 2, 3, 4, 5}, 4}, {[]uint64{1, 2, 9, 4}, 2}, {[]uint64{9, 1, 2}, 0}, {nil, 0}} {
		if got := r.Match(c.q); got != c.want {
			t.Errorf("Match(%v) = %d, want %d", c.q, got, c.want)
		}
	}
}

func TestRecord_EvictsLeastRecentlySentFirst(t *testing.T) {
	r := NewRecord(6)
	r.Add([]uint64{1, 2, 3})    // session A
	r.Add([]uint64{10, 11, 12}) // session B
	r.Add([]uint64{1, 2, 3, 4}) // A again: A is now the most recent; 12 goes
	if r.Len() != 6 {
		t.Fatalf("len %d, want the capacity 6", r.Len())
	}
	if got := r.Match([]uint64{1, 2, 3, 4}); got != 4 {
		t.Fatalf("A's prefix: %d blocks held, want 4", got)
	}
	if got := r.Match([]uint64{10, 11, 12}); got != 2 {
		t.Fatalf("B's prefix: %d blocks held, want 2 (its tail evicted first)", got)
	}
	r.SetCap(2)
	if r.Len() != 2 || r.Match([]uint64{1, 2}) != 2 {
		t.Fatalf("after shrinking: len %d, A's head held %d", r.Len(), r.Match([]uint64{1, 2}))
	}
	// A prompt longer than the capacity keeps its head.
	r.Add([]uint64{20, 21, 22, 23})
	if r.Match([]uint64{20, 21}) != 2 {
		t.Fatal("a prompt longer than the record lost its head")
	}
	r.Forget([]uint64{20, 21}, 1)
	if r.Match([]uint64{20, 21}) != 1 {
		t.Fatal("Forget kept blocks beyond what the engine said it cached")
	}
}

func TestRecord_MemoryIsBounded(t *testing.T) {
	r := NewRecord(BlocksFor(64 * 1024))
	for i := range 100000 {
		r.Add([]uint64{uint64(i)})
	}
	if r.Len() != r.Cap() || len(r.nodes) > r.Cap()+1 {
		t.Fatalf("len %d, nodes %d, cap %d", r.Len(), len(r.nodes), r.Cap())
	}
}

const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 3.0
vllm:num_requests_waiting{engine="0",model_name="qwen"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.5
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="1024"} 1.0
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 1200.0
`

func TestParseLoad_EachEnginesNames(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       Load
	}{
		{"vllm", vllmMetrics, Load{Waiting: 2, Running: 3, KVUsage: 0.5, CacheTokens: 16384}},
		{"vllm two ranks", "vllm:num_requests_waiting{engine=\"0\"} 1\nvllm:num_requests_waiting{engine=\"1\"} 4\nvllm:num_requests_running{engine=\"0\"} 1\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.25\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.75\n",
			Load{Waiting: 5, Running: 1, KVUsage: 0.5}},
		{"sglang", "sglang:num_queue_reqs{model_name=\"x\"} 7\nsglang:num_running_reqs{model_name=\"x\"} 8\nsglang:token_usage{model_name=\"x\"} 0.9\nsglang:max_total_num_tokens{model_name=\"x\"} 161721.0\n",
			Load{Waiting: 7, Running: 8, KVUsage: 0.9, CacheTokens: 161721}},
		{"llamacpp", "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\nllamacpp:requests_deferred 3\n",
			Load{Waiting: 3, Running: 1, KVUsage: -1}},
	} {
		got, ok := ParseLoad([]byte(c.text))
		if !ok || got != c.want {
			t.Errorf("%s: got %+v ok=%v, want %+v", c.name, got, ok, c.want)
		}
	}
	if _, ok := ParseLoad([]byte("# HELP go_goroutines x\ngo_goroutines 12\nvllm:num_requests_waiting NaN\n")); ok {
		t.Error("metrics without a usable queue metric were taken for an engine's")
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestScraper_ReadingGoesStaleWhenTheEngineStopsAnswering(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	var fail bool
	inflight := int64(4)
	s := NewScraper(func(ctx context.Context) ([]byte, error) {
		if fail {
			return nil, errors.New("connection refused")
		}
		return []byte(vllmMetrics), nil
	}, func() int64 { return inflight }, time.Second, clock.Now)
	if s.Snapshot().Fresh {
		t.Fatal("fresh before any scrape")
	}
	s.ScrapeOnce(context.Background())
	sn := s.Snapshot()
	if !sn.Fresh || sn.Waiting != 2 || sn.Running != 3 || sn.InFlight != 4 || sn.Err != "" {
		t.Fatalf("after a scrape: %+v", sn)
	}
	fail = true
	clock.Add(time.Second)
	s.ScrapeOnce(context.Background())
	if sn := s.Snapshot(); !sn.Fresh || sn.Err == "" {
		t.Fatalf("one failed scrape: %+v; want the last reading still fresh, the error kept", sn)
	}
	clock.Add(2*time.Second + time.Millisecond)
	if sn := s.Snapshot(); sn.Fresh {
		t.Fatalf("a reading older than %d intervals is fresh: %+v", StaleAfter, sn)
	}
	fail = false
	s.ScrapeOnce(context.Background())
	if sn := s.Snapshot(); !sn.Fresh || sn.Err != "" {
		t.Fatalf("after the engine answered again: %+v", sn)
	}
}

func TestScraper_StartReadsAndStopEnds(t *testing.T) {
	got := make(chan struct{}, 1)
	s := NewScraper(func(ctx context.Context) ([]byte, error) {
		select {
		case got <- struct{}{}:
		default:
		}
		return []byte(vllmMetrics), nil
	}, nil, time.Hour, nil)
	s.Start()
	<-got // the first scrape runs at once, not after an interval
	s.Stop()
	if !s.Snapshot().Fresh {
		t.Fatal("no reading after the first scrape")
	}
}

func fresh(waiting, running float64, inflightAtScrape int64) Snapshot {
	return Snapshot{Load: Load{Waiting: waiting, Running: running, KVUsage: -1}, Fresh: true, InFlight: inflightAtScrape}
}

func TestCacheAware_LongestPrefixWins(t *testing.T) {
	cands := []Candidate{
		{Match: 0, Engine: fresh(0, 1, 0), Weight: 1},
		{Match: 40, Engine: fresh(0, 2, 0), Weight: 1},
		{Match: 10, Engine: fresh(0, 1, 0), Weight: 1},
		{Match: 0, Engine: fresh(0, 0, 0), Weight: 1},
	}
	group := []int{0, 1, 2, 3}
	CacheAware(cands, group, DefaultLoadFactor)
	if group[0] != 1 {
		t.Fatalf("order %v; want deployment 1 (longest prefix, within the bound) first", group)
	}
	if group[1] != 3 {
		t.Fatalf("order %v; want the rest by load, the idle 3 next", group)
	}
}

func TestCacheAware_BoundedLoadOverridesPrefix(t *testing.T) {
	// Deployment 0 holds the prefix but has 9 requests while the others
	// have 1 each: the share with this request is 13/4, the bound
	// ceil(1.25·3.25)+1 = 6, and 0 would be at 10.
	cands := []Candidate{
		{Match: 50, Engine: fresh(5, 4, 0), Weight: 1},
		{Match: 5, Engine: fresh(0, 1, 0), Weight: 1},
		{Match: 0, Engine: fresh(0, 1, 0), Weight: 1},
		{Match: 0, Engine: fresh(0, 1, 0), Weight: 1},
	}
	group := []int{0, 1, 2, 3}
	CacheAware(cands, group, DefaultLoadFactor)
	if group[0] != 1 {
		t.Fatalf("order %v; want 1 (the longest prefix among those within the bound)", group)
	}
	if group[3] != 0 {
		t.Fatalf("order %v; want the overloaded 0 last", group)
	}
	// A larger factor lets the prefix holder keep it.
	group = []int{0, 1, 2, 3}
	CacheAware(cands, group, 4)
	if group[0] != 0 {
		t.Fatalf("factor 4: order %v; want 0", group)
	}
}

func TestCacheAware_NoPrefixAnywhereIsLeastLoad(t *testing.T) {
	cands := []Candidate{{Engine: fresh(1, 1, 0)}, {Engine: fresh(0, 1, 0)}, {Engine: fresh(0, 3, 0)}}
	group := []int{0, 1, 2}
	CacheAware(cands, group, DefaultLoadFactor)
	if fmt.Sprint(group) != "[1 0 2]" {
		t.Fatalf("order %v, want [1 0 2]", group)
	}
}

func TestLoad_StaleMetricsFallBackToInFlight(t *testing.T) {
	// 0's engine said it was idle, but the reading is stale and the
	// gateway has 5 requests there; 1's fresh reading says 2.
	stale := fresh(0, 0, 0)
	stale.Fresh = false
	cands := []Candidate{{Engine: stale, InFlight: 5}, {Engine: fresh(1, 1, 0), InFlight: 2}}
	group := []int{0, 1}
	LeastLoad(cands, group)
	if group[0] != 1 {
		t.Fatalf("order %v: a stale reading was believed over the requests in flight", group)
	}
	if l := cands[0].Load(); l != 5 {
		t.Fatalf("stale load %v, want the 5 in flight", l)
	}
	// Requests sent since the reading count on top of it.
	c := Candidate{Engine: fresh(1, 2, 3), InFlight: 7}
	if l := c.Load(); l != 7 {
		t.Fatalf("load %v, want 1+2 from the engine plus 4 sent since", l)
	}
	// Requests of this gateway that ended since the reading no longer
	// count; those still in flight always do.
	c = Candidate{Engine: fresh(0, 5, 4), InFlight: 1}
	if l := c.Load(); l != 2 {
		t.Fatalf("load %v, want 5 read - 4 of ours then + 1 of ours now", l)
	}
	c = Candidate{Engine: fresh(0, 1, 4), InFlight: 2}
	if l := c.Load(); l != 2 {
		t.Fatalf("load %v, want at least our 2 in flight", l)
	}
}

func TestLeastLoad_KVUseBreaksTies(t *testing.T) {
	a, b := fresh(0, 1, 0), fresh(0, 1, 0)
	a.KVUsage, b.KVUsage = 0.9, 0.1
	cands := []Candidate{{Engine: a}, {Engine: b}}
	group := []int{0, 1}
	LeastLoad(cands, group)
	if group[0] != 1 {
		t.Fatalf("order %v; want the emptier KV cache first", group)
	}
}

func TestSession_PinsAndFailsOverToTheSameSecondChoice(t *testing.T) {
	cands := make([]Candidate, 4)
	for i := range cands {
		cands[i] = Candidate{ID: HashString(fmt.Sprintf("backend%d\x00model", i)), Weight: 1}
	}
	first := map[int]int{}
	for s := range 400 {
		key := HashString(fmt.Sprintf("session-%d", s))
		g1 := []int{0, 1, 2, 3}
		Session(cands, g1, key)
		g2 := []int{3, 2, 1, 0}
		Session(cands, g2, key)
		if fmt.Sprint(g1) != fmt.Sprint(g2) {
			t.Fatalf("session %d: order depends on the listing: %v vs %v", s, g1, g2)
		}
		first[g1[0]]++
		// Without its first choice (down), the session's order of the
		// others is unchanged: it fails over to its second choice.
		var rest []int
		for _, i := range []int{0, 1, 2, 3} {
			if i != g1[0] {
				rest = append(rest, i)
			}
		}
		Session(cands, rest, key)
		if fmt.Sprint(rest) != fmt.Sprint(g1[1:]) {
			t.Fatalf("session %d: without %d the order is %v, want %v", s, g1[0], rest, g1[1:])
		}
	}
	for i := range 4 {
		if first[i] < 60 {
			t.Fatalf("sessions per deployment %v: not spread", first)
		}
	}
}

func TestRecord_MissShrinksTowardsWhatTheEngineKeepsAndHitGrowsBack(t *testing.T) {
	r := NewRecord(1600)
	for i := range 1600 {
		r.Add([]uint64{uint64(i)})
	}
	r.Miss()
	if r.Cap() != 1200 || r.Len() != 1200 {
		t.Fatalf("after a miss: cap %d len %d, want 1200", r.Cap(), r.Len())
	}
	if r.Match([]uint64{0}) != 0 || r.Match([]uint64{1599}) != 1 {
		t.Fatal("a miss kept old blocks and dropped recent ones")
	}
	for range 100 {
		r.Miss()
	}
	if r.Cap() != 100 {
		t.Fatalf("cap %d after many misses, want the floor nominal/16 = 100", r.Cap())
	}
	for range 100 {
		r.Hit()
	}
	if r.Cap() != 1600 {
		t.Fatalf("cap %d after hits, want back to the nominal 1600", r.Cap())
	}
	r.SetCap(800)
	if r.Cap() != 800 || r.Nominal() != 800 {
		t.Fatalf("SetCap: cap %d nominal %d", r.Cap(), r.Nominal())
	}
}
