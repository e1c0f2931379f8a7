package sim

// The KV cache and its prefix cache, as vLLM V1's block pool keeps them
// (vllm/v1/core/block_pool.py, kv_cache_manager.py):
//
//   - the cache holds KVCacheTokens / BlockSize blocks of BlockSize tokens;
//   - a waiting request is admitted when blocks for its whole prompt (a
//     preempted one's: its prompt and the tokens it generated) are free,
//     beyond the prefix-cache hits it reuses (vLLM's
//     --scheduler-reserve-full-isl, on by default; with it off, only the
//     part this step prefills, its first chunk under chunked prefill, must
//     fit), and, when other requests are running, beyond a watermark of
//     --watermark of the blocks (0 by default, as in vLLM). Only the blocks
//     of the part this step prefills are taken. When they are not free, the
//     request waits, and so do the requests behind it (FIFO, as vLLM's
//     scheduler stops at the first request it cannot allocate);
//   - a running request gets its further blocks as its prefill chunks and
//     its decoded tokens fill them (KVCacheManager.allocate_slots). When
//     none is free, even after evicting idle cached blocks, the scheduler
//     preempts the most recently admitted running request (see
//     scheduler.preempt): its blocks are freed and it is recomputed later;
//   - every full block of a prompt has a hash that depends on all tokens up
//     to its end (hash chaining), so two prompts share a cached block only
//     when they share everything before it too;
//   - once computed, a full prompt block is entered in the cache under its
//     hash; a later request whose prompt starts with the same blocks reuses
//     them and skips their prefill. At least the last prompt token is always
//     computed (the engine needs its logits), so a prompt of P tokens hits at
//     most (P-1)/BlockSize whole blocks;
//   - blocks no running request holds stay cached until space is needed; they
//     are then evicted least recently freed first, and the tail blocks of a
//     prompt before its head (a request frees its blocks in reverse order),
//     so a shared prefix outlives the histories that extend it.
//
// Output tokens and a prompt's last partial block take blocks as anonymous
// ones. When a chat request whose answer is plain text finishes, the blocks
// its answer filled are entered in the cache under the hashes the next
// turn's prompt gives them (seq.outHashes: the prompt's hasher continued
// over the answer's text, the generation prompt hashed as the assistant
// message's header), as vLLM caches every full block a request computed and
// the next turn's prompt repeats the answer token for token. Answers with
// reasoning or tool calls (which templates re-render), completions, and the
// output of preempted or aborted requests are not entered.
//
// The llama.cpp face (ModelConfig.reserveOutput) keeps the older rule of
// reserving the prompt and the whole output at admission: llama-server's
// slots each own their context, and it never preempts.

// kvBlock is one cached or held block.
type kvBlock struct {
	hash       uint64
	hashed     bool // in kvCache.cached under hash
	ref        int  // running sequences holding it
	prev, next *kvBlock
}

// kvCache is one engine's block pool. It is owned by the scheduler (the
// engine goroutine under engine.mu).
type kvCache struct {
	blockSize int
	capacity  int  // blocks
	caching   bool // prefix caching on
	reserve   bool // reserve prompt + output at admission, never grow (llama.cpp)
	watermark int  // blocks an admission leaves free when others are running
	fullISL   bool // an admission needs room for the whole prompt, not its first chunk
	minShare  float64
	used      int // blocks held by running sequences
	cached    map[uint64]*kvBlock
	lru       kvBlock // sentinel of the evictable list: ref 0, hashed; lru.next is evicted first
	evictable int
	// queries and hits are prompt tokens looked up and found, for
	// vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total.
	queries, hits uint64
}

func newKVCache(mc ModelConfig) *kvCache {
	bs := max(mc.BlockSize, 1)
	c := &kvCache{blockSize: bs, capacity: mc.KVCacheTokens / bs, caching: !mc.NoPrefixCaching, reserve: mc.reserveOutput,
		minShare: mc.minPrefixShare, cached: map[uint64]*kvBlock{}}
	if !c.reserve {
		c.watermark = int(mc.Watermark * float64(c.capacity))
		c.fullISL = !mc.NoReserveFullISL
	}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// usage is the fraction of blocks held by running sequences (vLLM's
// kv_cache_usage_perc: cached blocks nobody holds count as free).
func (c *kvCache) usage() float64 {
	if c.capacity == 0 {
		return 0
	}
	return float64(c.used) / float64(c.capacity)
}

// blocksFor is the number of blocks n tokens take.
func (c *kvCache) blocksFor(n int) int { return (n + c.blockSize - 1) / c.blockSize }

// lookup returns the cached blocks a prompt of promptTokens tokens with
// full-block hashes hashes starts with, at most (promptTokens-1)/blockSize.
func (c *kvCache) lookup(hashes []uint64, promptTokens int) []*kvBlock {
	if !c.caching {
		return nil
	}
	limit := min(len(hashes), (promptTokens-1)/c.blockSize)
	var hit []*kvBlock
	for _, h := range hashes[:max(limit, 0)] {
		b, ok := c.cached[h]
		if !ok {
			break
		}
		hit = append(hit, b)
	}
	if float64(len(hit)*c.blockSize) < c.minShare*float64(promptTokens) {
		// llama-server gives a prompt that matches no slot well enough the
		// least recently used slot, which holds another prompt.
		return nil
	}
	return hit
}

// admit tries to allocate the blocks of waiting request q for a step that
// may prefill up to budget tokens of it, and returns how many it prefills.
// busy says whether other requests are running (the watermark then
// applies). On success q.kvHeld holds its full prompt blocks
// (the cached ones first), q.kvAnon counts the rest, q.prefilled is the
// number of tokens found in the cache and, on its first admission, q.cached
// too. A request resumed after preemption looks up its prompt again (its
// prefill covers prompt and generated tokens); its lookups are not counted
// in queries and hits, as vLLM counts them apart (preempted_queries).
func (c *kvCache) admit(q *seq, budget int, busy bool) (int, bool) {
	hit := c.lookup(q.hashes, q.prefillLen)
	computed := len(hit) * c.blockSize
	n := min(q.prefillLen-computed, budget)
	need := c.blocksFor(computed + n)
	wm := 0
	if busy {
		wm = c.watermark
	}
	if c.reserve {
		need = c.blocksFor(q.promptTokens + q.target)
	}
	need = min(need, c.capacity) // a request larger than the cache runs alone (validate keeps this from happening)
	newBlocks := need - len(hit)
	// The admission gate: room for the whole prompt, though only this
	// step's part of it is taken now.
	gate := newBlocks
	if c.fullISL {
		gate = min(c.blocksFor(q.prefillLen), c.capacity) - len(hit)
	}
	// Cached blocks nobody holds are evictable, but the hits among them are
	// about to be held, not evicted.
	idleHits := 0
	for _, b := range hit {
		if b.ref == 0 {
			idleHits++
		}
	}
	if c.capacity-c.used-idleHits-wm < max(newBlocks, gate) {
		return 0, false
	}
	if c.caching && q.preemptions == 0 {
		c.queries += uint64(q.promptTokens)
		c.hits += uint64(computed)
	}
	for _, b := range hit {
		if b.ref == 0 {
			c.unlink(b)
			c.used++
		}
		b.ref++
	}
	q.kvHeld = append(q.kvHeld[:0], hit...)
	q.kvAnon = 0
	c.grow(q, newBlocks)
	if q.preemptions == 0 {
		q.cached = computed
	}
	q.prefilled = computed
	q.kvRegistered = len(hit)
	return n, true
}

// allocate makes running request q hold blocks for its first tokens
// tokens, taking the missing ones, and reports false, taking none, when
// too few are free (the scheduler then preempts).
func (c *kvCache) allocate(q *seq, tokens int) bool {
	if c.reserve {
		return true // everything was reserved at admission
	}
	n := min(c.blocksFor(tokens), c.capacity) - len(q.kvHeld) - q.kvAnon
	if n <= 0 {
		return true
	}
	if c.capacity-c.used < n {
		return false
	}
	c.grow(q, n)
	return true
}

// grow gives q n more blocks: its full prompt blocks as blocks it can enter
// in the cache, then anonymous ones (a prompt's last partial block and its
// output). Blocks are taken in token order, so q.kvHeld covers its first
// blocks and q.kvAnon those after them.
func (c *kvCache) grow(q *seq, n int) {
	full := min(len(q.hashes), q.promptTokens/c.blockSize)
	for range n {
		if q.kvAnon == 0 && len(q.kvHeld) < full {
			q.kvHeld = append(q.kvHeld, c.take())
			continue
		}
		c.makeRoom()
		c.used++
		q.kvAnon++
	}
}

// take returns a new held block, evicting the least recently freed cached
// block when the pool has no empty one.
func (c *kvCache) take() *kvBlock {
	c.makeRoom()
	c.used++
	return &kvBlock{ref: 1}
}

// makeRoom evicts one idle cached block if no empty block is left.
func (c *kvCache) makeRoom() {
	if c.capacity-c.used-c.evictable > 0 {
		return
	}
	if b := c.lru.next; b != &c.lru {
		c.unlink(b)
		delete(c.cached, b.hash)
		b.hashed = false
	}
}

func (c *kvCache) unlink(b *kvBlock) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
	c.evictable--
}

func (c *kvCache) pushIdle(b *kvBlock) {
	b.prev, b.next = c.lru.prev, &c.lru
	c.lru.prev.next = b
	c.lru.prev = b
	c.evictable++
}

// computed enters the full prompt blocks of q that its prefill has covered
// into the cache. A block whose hash another sequence entered first stays
// private to q, as in vLLM.
func (c *kvCache) computed(q *seq) {
	if !c.caching {
		return
	}
	upto := min(q.prefilled/c.blockSize, len(q.kvHeld))
	for i := q.kvRegistered; i < upto; i++ {
		b := q.kvHeld[i]
		if _, dup := c.cached[q.hashes[i]]; !dup && !b.hashed {
			b.hash, b.hashed = q.hashes[i], true
			c.cached[b.hash] = b
		}
	}
	q.kvRegistered = max(q.kvRegistered, upto)
}

// release frees the blocks of a sequence that finished, was aborted or was
// preempted:
// cached blocks become evictable, tail first; the others become empty.
// A sequence that finished (done) first enters the blocks its answer
// filled (q.outHashes, at most as many as it holds beyond its full prompt
// blocks) in the cache, as the tail.
func (c *kvCache) release(q *seq, done bool) {
	if done && c.caching {
		for i := min(len(q.outHashes), q.kvAnon) - 1; i >= 0; i-- {
			h := q.outHashes[i]
			if _, dup := c.cached[h]; dup {
				continue
			}
			b := &kvBlock{hash: h, hashed: true}
			c.cached[h] = b
			c.pushIdle(b)
			c.used--
			q.kvAnon--
		}
	}
	for i := len(q.kvHeld) - 1; i >= 0; i-- {
		b := q.kvHeld[i]
		b.ref--
		if b.ref > 0 {
			continue
		}
		c.used--
		if b.hashed {
			c.pushIdle(b)
		}
	}
	c.used -= q.kvAnon
	q.kvHeld, q.kvAnon = nil, 0
}

// prefixHasher turns a prompt into the chained hashes of its full blocks,
// token by token, with the simulator's token boundaries (four bytes of
// text per token, special tokens one each; see countTextTokens). Each
// block's hash is the FNV-1a state after all tokens up to its end, so it
// depends on everything before it.
type prefixHasher struct {
	blockSize int
	n         int
	h         uint64
	blocks    []uint64
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func newPrefixHasher(blockSize int) *prefixHasher {
	return &prefixHasher{blockSize: max(blockSize, 1), h: fnvOffset64}
}

// token adds one token with text t.
func (p *prefixHasher) token(t string) {
	if p == nil {
		return
	}
	h := p.h
	for i := 0; i < len(t); i++ {
		h ^= uint64(t[i])
		h *= fnvPrime64
	}
	h ^= 0x1ff // token boundary, not a byte value
	h *= fnvPrime64
	p.h = h
	p.n++
	if p.n%p.blockSize == 0 {
		p.blocks = append(p.blocks, h)
	}
}

// text adds the tokens of s, as countTextTokens counts them.
func (p *prefixHasher) text(s string) {
	if p == nil {
		return
	}
	for i := 0; i < len(s); i += bytesPerToken {
		p.token(s[i:min(i+bytesPerToken, len(s))])
	}
}

// special adds n special tokens named name (template framing).
func (p *prefixHasher) special(name string, n int) {
	if p == nil {
		return
	}
	for i := range n {
		p.token("\x00" + name + string(rune('0'+i)))
	}
}

// continued returns the hashes of the full blocks that text s, appended to
// what p has hashed, completes (p unchanged), or nil for a nil hasher.
func (p *prefixHasher) continued(s string) []uint64 {
	if p == nil {
		return nil
	}
	c := *p
	c.blocks = p.blocks[:len(p.blocks):len(p.blocks)] // appends go to a copy
	c.text(s)
	return c.blocks[len(p.blocks):]
}

// hashes returns the full blocks' hashes, or nil for a nil hasher.
func (p *prefixHasher) hashes() []uint64 {
	if p == nil {
		return nil
	}
	return p.blocks
}
