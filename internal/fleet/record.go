package fleet

import "sync"

// DefaultCacheTokens is the KV capacity assumed for an engine that does
// not report its own (vLLM's cache_config_info, SGLang's
// max_total_num_tokens): about what one 80 GB GPU holds for an 8B model.
const DefaultCacheTokens = 262144

// Record is the gateway's memory of which prefix blocks it sent to one
// deployment: a bounded LRU of block hashes, evicting the least recently
// sent block first, as an engine's prefix cache evicts the least recently
// used KV blocks. Its capacity follows the engine's KV capacity, so that
// it forgets about when the engine does. Safe for concurrent use.
type Record struct {
	mu  sync.Mutex
	cap int
	// nominal is the capacity the engine's KV size suggests; cap is
	// nominal scaled down after the engine's cached_tokens showed it
	// holding less than the record thought (Miss), and back up as it
	// confirms (Hit).
	nominal int
	idx     map[uint64]int32
	nodes   []node // nodes[0] is the list's sentinel
	free    []int32
}

type node struct {
	hash       uint64
	prev, next int32
}

// NewRecord returns a record holding at most capBlocks hashes (at least 1).
func NewRecord(capBlocks int) *Record {
	r := &Record{cap: max(capBlocks, 1), nominal: max(capBlocks, 1), idx: map[uint64]int32{}}
	r.nodes = append(r.nodes, node{})
	return r
}

// BlocksFor is the record capacity for an engine holding tokens of KV
// cache (DefaultCacheTokens when tokens ≤ 0).
func BlocksFor(tokens int) int {
	if tokens <= 0 {
		tokens = DefaultCacheTokens
	}
	return max(1, tokens*BytesPerToken/BlockBytes)
}

// Cap returns the capacity in blocks.
func (r *Record) Cap() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cap
}

// Len returns the number of blocks held.
func (r *Record) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.idx)
}

// Nominal returns the capacity the engine's KV size suggests.
func (r *Record) Nominal() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nominal
}

// SetCap changes the nominal capacity (and the capacity with it),
// evicting the oldest blocks when it shrinks.
func (r *Record) SetCap(capBlocks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nominal = max(capBlocks, 1)
	r.resize(r.nominal)
}

func (r *Record) resize(capBlocks int) {
	r.cap = max(capBlocks, 1)
	for len(r.idx) > r.cap {
		r.evict()
	}
}

// Miss says the engine served from its cache much less of a prompt than
// the record predicted: it evicts sooner than the record does (other
// clients use it, or its KV capacity is smaller than assumed). The
// capacity drops by a quarter, down to a sixteenth of the nominal one,
// and the oldest blocks go.
func (r *Record) Miss() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resize(max(r.cap*3/4, r.nominal/16))
}

// Hit says the engine confirmed the prediction: the capacity grows back
// by a sixteenth towards the nominal one.
func (r *Record) Hit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cap < r.nominal {
		r.cap = min(r.nominal, r.cap+max(r.nominal/16, 1))
	}
}

// Match returns how many leading blocks of hashes the deployment probably
// holds: the count before the first one not in the record. Blocks are
// chained, so a later block held without an earlier one cannot be used by
// the engine either.
func (r *Record) Match(hashes []uint64) int {
	if len(hashes) == 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, h := range hashes {
		if _, ok := r.idx[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Add records that the deployment was sent hashes: each becomes the most
// recently used, the last block most recent of all (an engine evicts a
// prompt's tail before its head, which other requests share).
func (r *Record) Add(hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A prompt longer than the whole capacity keeps its head: that is
	// what later turns share.
	if len(hashes) > r.cap {
		hashes = hashes[:r.cap]
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		if n, ok := r.idx[h]; ok {
			r.unlink(n)
			r.pushFront(n)
			continue
		}
		if len(r.idx) >= r.cap {
			r.evict()
		}
		var n int32
		if k := len(r.free); k > 0 {
			n, r.free = r.free[k-1], r.free[:k-1]
		} else {
			r.nodes = append(r.nodes, node{})
			n = int32(len(r.nodes) - 1)
		}
		r.nodes[n].hash = h
		r.idx[h] = n
		r.pushFront(n)
	}
}

// Forget drops every block from the first one of hashes not cached on
// the engine: the engine's cached_tokens said it held only cachedBlocks
// of them.
func (r *Record) Forget(hashes []uint64, cachedBlocks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range hashes[min(max(cachedBlocks, 0), len(hashes)):] {
		if n, ok := r.idx[h]; ok {
			r.unlink(n)
			delete(r.idx, h)
			r.free = append(r.free, n)
		}
	}
}

// The list is kept most recent first: nodes[0].next is the newest,
// nodes[0].prev the oldest.

func (r *Record) pushFront(n int32) {
	first := r.nodes[0].next
	r.nodes[n].prev, r.nodes[n].next = 0, first
	r.nodes[first].prev = n
	r.nodes[0].next = n
}

func (r *Record) unlink(n int32) {
	p, q := r.nodes[n].prev, r.nodes[n].next
	r.nodes[p].next = q
	r.nodes[q].prev = p
}

func (r *Record) evict() {
	last := r.nodes[0].prev
	if last == 0 {
		return
	}
	r.unlink(last)
	delete(r.idx, r.nodes[last].hash)
	r.free = append(r.free, last)
}
