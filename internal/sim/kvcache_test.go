package sim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// textHashes returns the KV block hashes and token count of a text prompt.
func textHashes(text string, blockSize int) ([]uint64, int) {
	h := newPrefixHasher(blockSize)
	h.text(text)
	return h.hashes(), h.n
}

func words(n int, tag string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", tag, i)
	}
	return b.String()
}

func TestPrefixCache_RepeatedPromptHitsWholeBlocksAndSkipsTheirPrefill(t *testing.T) {
	mc := fastModel()
	hashes, n := textHashes(strings.Repeat("abcd", 1000), DefaultBlockSize) // 1000 tokens
	res := runVirtual(t, mc, []simReq{
		{prompt: n, target: 4, hashes: hashes},
		{at: time.Second, prompt: n, target: 4, hashes: hashes},
	}, nil)
	if res[0].cached != 0 {
		t.Errorf("first request: %d cached tokens, want 0", res[0].cached)
	}
	// The last prompt token is always computed: 999 tokens, 62 whole blocks.
	if want := (n - 1) / 16 * 16; res[1].cached != want {
		t.Errorf("repeated request: %d cached tokens, want %d (whole blocks of %d)", res[1].cached, want, n)
	}
	full := mc.PrefillBase + time.Duration(n)*mc.PrefillPerToken + mc.DecodeBase + mc.DecodePerSeq
	cached := mc.PrefillBase + time.Duration(n-res[1].cached)*mc.PrefillPerToken + mc.DecodeBase + mc.DecodePerSeq
	if got := res[0].ttft(); got != full {
		t.Errorf("first TTFT %v, want %v", got, full)
	}
	if got := res[1].ttft(); got != cached {
		t.Errorf("repeated TTFT %v, want %v (prefill of the %d uncached tokens only)", got, cached, n-res[1].cached)
	}
}

func TestPrefixCache_SharesOnlyTheCommonPrefixAndNothingAfterADifference(t *testing.T) {
	mc := fastModel()
	system := words(200, "sys")
	a, na := textHashes(system+words(100, "alice"), DefaultBlockSize)
	b, nb := textHashes(system+words(100, "bob"), DefaultBlockSize)
	c, nc := textHashes("X"+system, DefaultBlockSize) // same text shifted: nothing shared
	res := runVirtual(t, mc, []simReq{
		{prompt: na, target: 2, hashes: a},
		{at: time.Second, prompt: nb, target: 2, hashes: b},
		{at: 2 * time.Second, prompt: nc, target: 2, hashes: c},
	}, nil)
	common := 0
	for common < len(a) && common < len(b) && a[common] == b[common] {
		common++
	}
	if common == 0 || common*16 > len(system)/4 {
		t.Fatalf("%d blocks in common, want the blocks of the shared system prompt (%d tokens)", common, len(system)/4)
	}
	if res[1].cached != common*16 {
		t.Errorf("second prompt: %d cached tokens, want %d (the %d blocks shared with the first)", res[1].cached, common*16, common)
	}
	if res[2].cached != 0 {
		t.Errorf("a prompt that differs in its first token: %d cached tokens, want 0", res[2].cached)
	}
}

func TestPrefixCache_NoPrefixCachingComputesEverything(t *testing.T) {
	mc := fastModel()
	mc.NoPrefixCaching = true
	hashes, n := textHashes(strings.Repeat("abcd", 500), DefaultBlockSize)
	res := runVirtual(t, mc, []simReq{{prompt: n, target: 2, hashes: hashes}, {at: time.Second, prompt: n, target: 2, hashes: hashes}}, nil)
	if res[1].cached != 0 || res[1].ttft() != res[0].ttft() {
		t.Errorf("with prefix caching off the repeat had %d cached tokens and TTFT %v (first %v)", res[1].cached, res[1].ttft(), res[0].ttft())
	}
}

// kvRun admits q into c (its whole prompt in one step), marks its prompt
// computed and, unless hold, releases it.
func kvRun(t *testing.T, c *kvCache, q *seq, hold bool) {
	t.Helper()
	if _, ok := c.admit(q, q.promptTokens, false); !ok {
		t.Fatalf("admit refused a request of %d+%d tokens (used %d of %d blocks)", q.promptTokens, q.target, c.used, c.capacity)
	}
	q.prefilled = q.promptTokens
	c.computed(q)
	if !hold {
		c.release(q, true)
	}
}

func seqWith(prompt, target int, hashes ...uint64) *seq {
	q := newSeq(prompt, target)
	q.hashes = hashes
	return q
}

func TestPrefixCache_EvictsLeastRecentlyFreedTailFirst(t *testing.T) {
	mc := ModelConfig{BlockSize: 4, KVCacheTokens: 32} // 8 blocks
	c := newKVCache(mc)
	kvRun(t, c, seqWith(9, 3, 11, 12), false) // A: 3 blocks, 2 cached
	kvRun(t, c, seqWith(9, 3, 21, 22), false) // B: 3 blocks, 2 cached
	if c.used != 0 || c.evictable != 4 || c.usage() != 0 {
		t.Fatalf("after A and B: used %d, evictable %d, usage %g; want 0, 4, 0", c.used, c.evictable, c.usage())
	}
	// C takes 5 blocks: 4 empty ones and one evicted, A's tail block.
	kvRun(t, c, seqWith(17, 3, 31, 32, 33, 34), true)
	if got := len(c.lookup([]uint64{11, 12}, 9)); got != 1 {
		t.Errorf("A's prompt after one eviction: %d blocks cached, want 1 (its head; the tail goes first)", got)
	}
	if got := len(c.lookup([]uint64{21, 22}, 9)); got != 2 {
		t.Errorf("B's prompt, freed after A: %d blocks cached, want 2", got)
	}
	if c.usage() != 5.0/8 {
		t.Errorf("usage %g with C running, want %g", c.usage(), 5.0/8)
	}
}

func TestPrefixCache_HeldBlocksAreSharedAndRequestsWaitForRoom(t *testing.T) {
	mc := fastModel()
	mc.MaxModelLen, mc.KVCacheTokens, mc.BlockSize = 96, 128, 16 // 8 blocks
	if err := mc.validate(); err != nil {
		t.Fatal(err)
	}
	s := scheduler{mc: mc, kv: newKVCache(mc)}
	x := seqWith(48, 48, 1, 2, 3) // 3 prompt blocks, 6 at its end
	y := seqWith(48, 16, 1, 2, 3) // the same prompt: 2 whole blocks before its last token are x's
	z := seqWith(80, 8, 7, 8, 9, 10, 11)
	s.enqueue(x)
	now := time.Unix(0, 0)
	s.complete(s.schedule(now), now)
	if x.generated != 1 || s.kv.used != 3 {
		t.Fatalf("x: %d tokens, %d blocks held; want its first token on its 3 prompt blocks", x.generated, s.kv.used)
	}
	s.enqueue(y)
	s.enqueue(z)
	s.complete(s.schedule(now), now)
	// x's decode took its 4th block; y holds x's first 2 (computed and
	// held, so not evictable) and 1 of its own; z's 5 prompt blocks do not
	// fit in the 3 left: it waits.
	if len(s.running) != 2 || y.cached != 32 || s.kv.used != 5 {
		t.Fatalf("running %d, y cached %d, %d blocks used; want x and y running, y on the 2 blocks it shares with x (32 tokens), 5 blocks used", len(s.running), y.cached, s.kv.used)
	}
	if s.numWaiting() != 1 || z.cached != 0 || len(z.kvHeld) != 0 {
		t.Fatalf("z should wait for room holding nothing: %d waiting, %d blocks held", s.numWaiting(), len(z.kvHeld))
	}
	for range 1000 {
		b := s.schedule(now)
		if b.empty() {
			break
		}
		s.complete(b, now)
	}
	if len(s.running) != 0 || s.numWaiting() != 0 {
		t.Fatalf("not drained: running %d waiting %d", len(s.running), s.numWaiting())
	}
	for _, q := range []*seq{x, y, z} {
		if q.generated != q.target {
			t.Errorf("a request generated %d of %d tokens", q.generated, q.target)
		}
	}
	if s.kv.used != 0 {
		t.Errorf("%d blocks still held after every request finished", s.kv.used)
	}
}

func TestConfig_KVCacheMustHoldOneFullSequence(t *testing.T) {
	mc := fastModel()
	mc.KVCacheTokens = mc.MaxModelLen - 1
	err := (&Config{Models: []ModelConfig{mc}}).validate()
	if err == nil || !strings.Contains(err.Error(), "kv-cache-tokens") {
		t.Fatalf("validate: %v, want an error naming kv-cache-tokens", err)
	}
}

// chatUsage sends a chat request and returns its usage (raw, and the
// prompt tokens and cached tokens in it) and llama.cpp timings (if any).
func chatUsage(t *testing.T, url, body string) (raw string, prompt, cached int, timings map[string]float64) {
	t.Helper()
	code, _, b := post(t, url+"/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var resp struct {
		Usage   json.RawMessage    `json:"usage"`
		Timings map[string]float64 `json:"timings"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	var u struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	_ = json.Unmarshal(resp.Usage, &u)
	return string(resp.Usage), u.PromptTokens, u.PromptTokensDetails.CachedTokens, resp.Timings
}

func metricLine(t *testing.T, text, name string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			return l[strings.LastIndexByte(l, ' ')+1:]
		}
	}
	t.Fatalf("no %s in /metrics:\n%s", name, text)
	return ""
}

func TestLive_RepeatedPromptReportsCachedTokensAndMetrics(t *testing.T) {
	mc := fastModel()
	_, url := startServer(t, Config{Models: []ModelConfig{mc}, Seed: 1})
	body := `{"model":"m","max_tokens":3,"messages":[{"role":"system","content":"` + words(300, "w") + `"},{"role":"user","content":"hi"}]}`
	u1, p1, c1, _ := chatUsage(t, url, body)
	if c1 != 0 || !strings.Contains(u1, `"prompt_tokens_details":null`) {
		t.Errorf("first request: usage %s; want null details (vLLM leaves them out when nothing was cached)", u1)
	}
	_, p2, c2, _ := chatUsage(t, url, body)
	if want := (p2 - 1) / 16 * 16; c2 != want || c2 == 0 {
		t.Errorf("repeated request: cached_tokens %d of %d, want %d", c2, p2, want)
	}
	// The streamed usage chunk carries it too.
	res := stream(t, url+"/v1/chat/completions", strings.Replace(body, `"max_tokens":3`, `"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}`, 1))
	last := res.events[len(res.events)-1].data
	if !strings.Contains(string(last), fmt.Sprintf(`"prompt_tokens_details":{"cached_tokens":%d}`, c2)) {
		t.Errorf("streamed usage chunk lacks cached_tokens %d: %s", c2, last)
	}
	_, text := get(t, url+"/metrics")
	m := string(text)
	if got, want := metricLine(t, m, "vllm:prefix_cache_queries_total"), fmtFloat(float64(3*p1)); got != want {
		t.Errorf("vllm:prefix_cache_queries_total %s, want %s (three prompts of %d tokens)", got, want, p1)
	}
	if got, want := metricLine(t, m, "vllm:prefix_cache_hits_total"), fmtFloat(float64(2*c2)); got != want {
		t.Errorf("vllm:prefix_cache_hits_total %s, want %s", got, want)
	}
	if got := metricLine(t, m, "vllm:kv_cache_usage_perc"); got != "0.0" {
		t.Errorf("vllm:kv_cache_usage_perc %s when idle, want 0.0 (cached blocks nobody holds are free)", got)
	}
}

func TestLive_KVCacheUsageGrowsAsTheRequestDecodes(t *testing.T) {
	mc := fastModel()
	mc.MaxModelLen, mc.KVCacheTokens = 1024, 4096
	s, url := startServer(t, Config{Models: []ModelConfig{mc}, Seed: 1})
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, url+"/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("abcd", 100)+`","max_tokens":500,"ignore_eos":true}`)
	}()
	waitLoad(t, s, 1, 0)
	// The 100 prompt tokens take 7 of 256 blocks at admission; the output
	// takes more as it is decoded, up to 38 blocks for 600 tokens.
	usage := func() float64 {
		_, text := get(t, url+"/metrics")
		v, err := strconv.ParseFloat(metricLine(t, string(text), "vllm:kv_cache_usage_perc"), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first, grew := usage(), false
	if first < 7.0/256 || first > 38.0/256 {
		t.Errorf("vllm:kv_cache_usage_perc %g while one request runs, want between %g (its prompt) and %g (prompt and output)", first, 7.0/256, 38.0/256)
	}
	deadline := time.Now().Add(10 * time.Second)
poll:
	for !grew && time.Now().Before(deadline) {
		select {
		case <-done:
			break poll
		case <-time.After(20 * time.Millisecond):
		}
		u := usage()
		if u > 38.0/256 {
			t.Fatalf("vllm:kv_cache_usage_perc %g, above the %g the whole sequence takes", u, 38.0/256)
		}
		grew = u > first
	}
	if !grew {
		t.Errorf("vllm:kv_cache_usage_perc stayed at %g while the request decoded: output blocks are not allocated as tokens fill them", first)
	}
	<-done
}

func TestLive_LlamaCppFaceReportsCacheLikeLlamaServer(t *testing.T) {
	mc := fastModel()
	_, url := startServer(t, Config{Models: []ModelConfig{mc}, Seed: 1, Engine: EngineLlamaCpp})
	body := `{"model":"m","max_tokens":3,"messages":[{"role":"system","content":"` + words(300, "w") + `"},{"role":"user","content":"hi"}]}`
	u1, p1, c1, t1 := chatUsage(t, url, body)
	if c1 != 0 || !strings.Contains(u1, `"prompt_tokens_details":{"cached_tokens":0}`) {
		t.Errorf("first request: usage %s, want {\"cached_tokens\":0} as llama-server reports it", u1)
	}
	if t1["cache_n"] != 0 || int(t1["prompt_n"]) != p1 {
		t.Errorf("first timings %v, want cache_n 0, prompt_n %d", t1, p1)
	}
	_, p2, c2, t2 := chatUsage(t, url, body)
	// llama-server reuses all but the last token of a repeated prompt.
	if c2 != p2-1 || int(t2["cache_n"]) != c2 || t2["prompt_n"] != 1 {
		t.Errorf("repeat: cached_tokens %d, timings %v; want %d cached, cache_n %d, prompt_n 1", c2, t2, p2-1, p2-1)
	}
	_, text := get(t, url+"/metrics")
	m := string(text)
	if got, want := metricLine(t, m, "llamacpp:prompt_tokens_cached_total"), fmt.Sprint(c2); got != want {
		t.Errorf("llamacpp:prompt_tokens_cached_total %s, want %s", got, want)
	}
	if got, want := metricLine(t, m, "llamacpp:prompt_tokens_total"), fmt.Sprint(2*p1-c2); got != want {
		t.Errorf("llamacpp:prompt_tokens_total %s, want %s (prompt tokens computed, cached ones excluded)", got, want)
	}
	for _, name := range []string{"llamacpp:requests_processing", "llamacpp:requests_deferred"} {
		if got := metricLine(t, m, name); got != "0" {
			t.Errorf("%s %s when idle, want 0", name, got)
		}
	}
	if strings.Contains(m, "vllm:") {
		t.Errorf("the llama.cpp face serves vLLM metric names:\n%s", m)
	}
}

func TestPrefixCache_SmallCacheEvictsOlderSessionsPrefixes(t *testing.T) {
	mc := fastModel()
	mc.MaxModelLen, mc.KVCacheTokens = 1024, 1024 // room for two of the ~470-token prompts and their answers, not three
	a, na := textHashes(words(400, "a"), DefaultBlockSize)
	b, nb := textHashes(words(400, "b"), DefaultBlockSize)
	c, nc := textHashes(words(400, "c"), DefaultBlockSize)
	s := time.Second
	res := runVirtual(t, mc, []simReq{
		{at: 0, prompt: na, target: 4, hashes: a},
		{at: 1 * s, prompt: nb, target: 4, hashes: b},
		{at: 2 * s, prompt: nc, target: 4, hashes: c}, // needs room: evicts a's blocks, tail first
		{at: 3 * s, prompt: nb, target: 4, hashes: b}, // b, freed after a, survived whole
		{at: 4 * s, prompt: na, target: 4, hashes: a}, // a's tail is gone
	}, nil)
	if na+nb+nc <= 1024 || na+nb > 1024-16 {
		t.Fatalf("prompts of %d, %d, %d tokens do not exercise a 1024-token cache", na, nb, nc)
	}
	if want := (nb - 1) / 16 * 16; res[3].cached != want {
		t.Errorf("b again: %d cached, want %d (all its blocks)", res[3].cached, want)
	}
	if res[4].cached >= (na-1)/16*16 {
		t.Errorf("a again: %d cached of %d, want fewer: c's admission evicted a's tail", res[4].cached, na)
	}
	if res[4].ttft() <= res[3].ttft() {
		t.Errorf("a's TTFT %v not above b's %v, though more of a was prefilled", res[4].ttft(), res[3].ttft())
	}
}

func TestPrefixCache_AFinishedAnswersBlocksAreCachedAsTheTail(t *testing.T) {
	// A: 9 prompt tokens (2 full blocks of 4) and 8 generated: 5 blocks,
	// the last 3 anonymous. Its answer completes 2 blocks (the prompt's
	// last partial one and the next), entered in the cache when it
	// finishes; the third is left empty.
	for _, done := range []bool{true, false} {
		t.Run(fmt.Sprint("finished=", done), func(t *testing.T) {
			c := newKVCache(ModelConfig{BlockSize: 4, KVCacheTokens: 64}) // 16 blocks
			a := seqWith(9, 8, 11, 12)
			a.outHashes = []uint64{13, 14}
			if _, ok := c.admit(a, a.promptTokens, false); !ok {
				t.Fatal("admit refused")
			}
			a.prefilled = a.promptTokens
			c.computed(a)
			if !c.allocate(a, 9+8) || c.used != 5 {
				t.Fatalf("A holds %d blocks, want 5", c.used)
			}
			c.release(a, done)
			if !done {
				// Preempted or aborted: its output is not entered.
				if c.used != 0 || c.evictable != 2 || c.cached[13] != nil {
					t.Fatalf("released unfinished: used %d, evictable %d; want 0 and its 2 prompt blocks only", c.used, c.evictable)
				}
				return
			}
			if c.used != 0 || c.evictable != 4 || c.cached[13] == nil || c.cached[14] == nil {
				t.Fatalf("after A finished: used %d, evictable %d; want 0 and 4 (2 prompt, 2 answer blocks)", c.used, c.evictable)
			}
			// The next turn starts with A's prompt and answer: 4 blocks hit.
			b := seqWith(22, 1, 11, 12, 13, 14, 15)
			if hit := c.lookup(b.hashes, b.promptTokens); len(hit) != 4 {
				t.Fatalf("next turn hit %d blocks, want 4", len(hit))
			}
			// Tail first: the answer's last block is evicted first, then
			// its first, then the prompt's from its end.
			var order []uint64
			for b := c.lru.next; b != &c.lru; b = b.next {
				order = append(order, b.hash)
			}
			if fmt.Sprint(order) != "[14 13 12 11]" {
				t.Fatalf("eviction order %v, want [14 13 12 11]", order)
			}
		})
	}
}

func TestLive_TheNextTurnFindsThePreviousAnswerCached(t *testing.T) {
	// A chat's second turn repeats the first turn's prompt and its answer:
	// as in vLLM, which caches the blocks a request's output filled, the
	// cached share covers the answer too, not only the first prompt.
	mc := fastModel()
	_, url := startServer(t, Config{Models: []ModelConfig{mc}, Seed: 1})
	msgs := `[{"role":"system","content":"` + words(300, "w") + `"},{"role":"user","content":"hi"}`
	code, _, b := post(t, url+"/v1/chat/completions", `{"model":"m","max_tokens":64,"ignore_eos":true,"messages":`+msgs+`]}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var first struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &first); err != nil || len(first.Choices) != 1 {
		t.Fatalf("%v: %s", err, b)
	}
	answer, _ := json.Marshal(first.Choices[0].Message.Content)
	p1 := first.Usage.PromptTokens
	_, p2, c2, _ := chatUsage(t, url, `{"model":"m","max_tokens":3,"messages":`+msgs+`,{"role":"assistant","content":`+string(answer)+`},{"role":"user","content":"go on"}]}`)
	if c2 <= (p1-1)/16*16 || c2 >= p2 {
		t.Fatalf("second turn: %d of %d prompt tokens cached; want more than the first prompt's %d (the answer's blocks too)", c2, p2, (p1-1)/16*16)
	}
	// A different answer in the history: only the first prompt's blocks.
	_, _, c3, _ := chatUsage(t, url, `{"model":"m","max_tokens":3,"messages":`+msgs+`,{"role":"assistant","content":"`+words(60, "x")+`"},{"role":"user","content":"go on"}]}`)
	if c3 > (p1-1)/16*16+16 {
		t.Fatalf("an answer the simulator did not give: %d cached; want at most the first prompt's blocks (%d) and the header's block", c3, (p1-1)/16*16)
	}
	t.Logf("first prompt %d tokens; second turn %d of %d cached", p1, c2, p2)
}
