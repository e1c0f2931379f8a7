package sim

import (
	"sync"
	"sync/atomic"
	"time"
)

// seq is one request inside an engine. The fields before mu are owned by
// the engine goroutine (cancelled excepted); the published state after mu
// is read by the HTTP handler.
type seq struct {
	promptTokens int
	target       int // tokens to generate; 0 for pooling (embedding) requests
	prefillLen   int // tokens the current prefill covers: the prompt, or after a preemption the prompt and the tokens generated
	prefilled    int // of them, computed (or found in the prefix cache)
	generated    int
	preemptions  int // times the scheduler preempted it
	arrival      time.Time
	scheduled    time.Time // first step that included it
	firstToken   time.Time
	lastToken    time.Time
	prevToken    time.Time
	finishReason string // "stop" or "length", for vllm:request_success_total
	cancelled    atomic.Bool

	// Prefix cache state (see kvcache.go): the chained hashes of the
	// prompt's full blocks, the prompt tokens found cached at admission,
	// the blocks held and how many of them are entered in the cache.
	hashes []uint64
	// outHashes continues hashes over the answer as the next turn's prompt
	// renders it (a chat answer of plain text): the hashes of the blocks
	// that the prompt's tail and the answer fill, entered in the cache when
	// the sequence finishes, as vLLM caches every full block a request
	// computed, its output's too.
	outHashes    []uint64
	cached       int
	kvHeld       []*kvBlock
	kvAnon       int
	kvRegistered int

	mu        sync.Mutex
	pubTokens int  // tokens generated so far
	pubDone   bool // all tokens generated (or prefill done, for pooling)
	pubCached int  // prompt tokens served from the prefix cache
	notify    chan struct{}
}

func newSeq(promptTokens, target int) *seq {
	p := max(promptTokens, 1)
	return &seq{promptTokens: p, prefillLen: p, target: target, notify: make(chan struct{}, 1)}
}

// cachedTokens returns the prompt tokens the engine found in its prefix
// cache, as published with the first token.
func (s *seq) cachedTokens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pubCached
}

// snapshot returns the published progress.
func (s *seq) snapshot() (tokens int, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pubTokens, s.pubDone
}

func (s *seq) publish() {
	s.mu.Lock()
	s.pubTokens = s.generated
	s.pubDone = s.generated >= s.target && s.prefilled >= s.prefillLen
	s.pubCached = s.cached
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// prefillChunk is part (or all) of one sequence's prompt processed in a step.
type prefillChunk struct {
	s *seq
	n int
}

// batch is what one engine step computes.
type batch struct {
	decode  []*seq
	prefill []prefillChunk
	dur     time.Duration
	tokens  int // prompt (and recomputed) tokens prefilled in this step
}

func (b *batch) empty() bool { return len(b.decode) == 0 && len(b.prefill) == 0 }

// scheduler is the continuous-batching core, free of clocks and goroutines
// so tests can drive it step by step. It mirrors vLLM V1's scheduler:
// running sequences are served first (one decode token each, or the next
// chunk of an unfinished prefill), then waiting sequences are admitted in
// FIFO order while fewer than MaxNumSeqs run and the step's token budget
// (MaxNumBatchedTokens) lasts. A prompt larger than the remaining budget is
// prefilled in chunks over several steps (chunked prefill, on by default in
// vLLM V1). A sequence's first token is sampled in the step that completes
// its prefill, together with the decode tokens of the other sequences.
//
// KV-cache blocks are allocated as vLLM V1's scheduler allocates them (see
// kvcache.go): a waiting request is admitted when the blocks of what this
// step prefills of it fit; a running one gets a block whenever its prefill
// or decoding fills the last. When none is free, the most recently admitted
// running request is preempted (recompute mode, vLLM's only one in V1): its
// blocks are freed, it goes back to the front of the waiting queue and,
// when admitted again, prefills its prompt and the tokens it had generated
// (prefix-cache hits credited), and the step that completes that prefill
// samples its next token. Its client sees a stall; no token is lost or
// sent twice. If the request that needs the block is itself the most
// recent, it is the one preempted, and the step goes on without it. No
// waiting request is admitted in a step that preempted.
type scheduler struct {
	mc          ModelConfig
	kv          *kvCache // nil: no memory bound and no prefix cache
	waiting     []*seq
	head        int // waiting[head:] are queued
	running     []*seq
	aborted     int    // sequences dropped because their client went away, not yet counted
	preemptions uint64 // cumulative, for vllm:num_preemptions_total
}

func (s *scheduler) numWaiting() int { return len(s.waiting) - s.head }

// enqueue adds a request to the waiting queue, or reports false when the
// queue is full.
func (s *scheduler) enqueue(q *seq) bool {
	if s.mc.MaxQueue > 0 && s.numWaiting() >= s.mc.MaxQueue {
		return false
	}
	s.waiting = append(s.waiting, q)
	return true
}

// schedule removes cancelled sequences, allocates KV blocks (preempting
// when they run out), admits waiting sequences and returns the next step's
// batch.
func (s *scheduler) schedule(now time.Time) batch {
	s.dropCancelled()
	budget := s.mc.MaxNumBatchedTokens
	if budget <= 0 {
		budget = int(^uint(0) >> 1)
	}
	var b batch
	preempted := false
	for i := 0; i < len(s.running) && budget > 0; i++ {
		q := s.running[i]
		n, kvTokens := 1, q.promptTokens+q.generated // a decode writes the last sampled token's KV
		prefill := q.prefilled < q.prefillLen
		if prefill {
			n = min(q.prefillLen-q.prefilled, budget)
			kvTokens = q.prefilled + n
		}
		if s.kv != nil && !s.kv.allocate(q, kvTokens) {
			// Preempt from the most recently admitted down, until q's
			// blocks fit or q itself is preempted (it was the last). The
			// victims come after q in running, so none is in the batch yet.
			self := false
			for !self && !s.kv.allocate(q, kvTokens) {
				victim := s.running[len(s.running)-1]
				s.preempt()
				preempted = true
				self = victim == q
			}
			if self {
				break
			}
		}
		if prefill {
			b.prefill = append(b.prefill, prefillChunk{q, n})
			b.tokens += n
		} else {
			b.decode = append(b.decode, q)
		}
		budget -= n
	}
	for !preempted && s.numWaiting() > 0 && len(s.running) < s.mc.MaxNumSeqs && budget > 0 {
		q := s.waiting[s.head]
		n := min(q.prefillLen-q.prefilled, budget)
		if s.kv != nil {
			var ok bool
			if n, ok = s.kv.admit(q, budget, len(s.running) > 0); !ok {
				// Not enough free KV-cache blocks: it waits, and so does
				// everything behind it, until running sequences free some.
				break
			}
		}
		s.waiting[s.head] = nil
		s.head++
		if q.scheduled.IsZero() {
			q.scheduled = now
		}
		s.running = append(s.running, q)
		b.prefill = append(b.prefill, prefillChunk{q, n})
		b.tokens += n
		budget -= n
	}
	if s.head > 1024 && s.head*2 > len(s.waiting) {
		s.waiting = append([]*seq(nil), s.waiting[s.head:]...)
		s.head = 0
	}
	if b.empty() {
		return b
	}
	b.dur = s.mc.DecodeBase + time.Duration(len(b.decode)+len(b.prefill))*s.mc.DecodePerSeq
	if b.tokens > 0 {
		b.dur += s.mc.PrefillBase + time.Duration(b.tokens)*s.mc.PrefillPerToken
	}
	return b
}

// preempt preempts the most recently admitted running sequence, as vLLM's
// _preempt_request does in recompute mode: it frees its blocks and puts it
// at the front of the waiting queue, keeping the tokens it generated; its
// next prefill covers them and its prompt.
func (s *scheduler) preempt() {
	last := len(s.running) - 1
	q := s.running[last]
	s.running[last] = nil
	s.running = s.running[:last]
	s.kv.release(q, false)
	q.prefillLen = q.promptTokens + q.generated
	q.prefilled = 0
	q.preemptions++
	s.preemptions++
	if s.head > 0 {
		s.head--
		s.waiting[s.head] = q
	} else {
		s.waiting = append(s.waiting, nil)
		copy(s.waiting[1:], s.waiting)
		s.waiting[0] = q
	}
}

// complete applies a finished step at time end: every decoding sequence
// gains a token, and every sequence whose prefill completed gains its first.
// It returns the sequences that progressed; finished ones leave running.
func (s *scheduler) complete(b batch, end time.Time) []*seq {
	touched := make([]*seq, 0, len(b.decode)+len(b.prefill))
	for _, q := range b.decode {
		q.generated++
		q.prevToken = q.lastToken
		q.lastToken = end
		touched = append(touched, q)
	}
	for _, c := range b.prefill {
		q := c.s
		q.prefilled += c.n
		if s.kv != nil {
			s.kv.computed(q)
		}
		if q.prefilled >= q.prefillLen {
			switch {
			case q.target == 0:
			case q.generated == 0:
				q.generated = 1
				q.firstToken = end
				q.lastToken = end
			default: // recomputed after a preemption: the next token
				q.generated++
				q.prevToken = q.lastToken
				q.lastToken = end
			}
			touched = append(touched, q)
		}
	}
	kept := s.running[:0]
	for _, q := range s.running {
		if q.prefilled >= q.prefillLen && q.generated >= q.target {
			if s.kv != nil {
				s.kv.release(q, true)
			}
			continue
		}
		kept = append(kept, q)
	}
	for i := len(kept); i < len(s.running); i++ {
		s.running[i] = nil
	}
	s.running = kept
	return touched
}

// dropCancelled removes sequences whose client went away, as vLLM aborts
// requests on disconnect.
func (s *scheduler) dropCancelled() {
	kept := s.running[:0]
	for _, q := range s.running {
		if !q.cancelled.Load() {
			kept = append(kept, q)
		} else {
			if s.kv != nil {
				s.kv.release(q, false)
			}
			s.aborted++
		}
	}
	for i := len(kept); i < len(s.running); i++ {
		s.running[i] = nil
	}
	s.running = kept
	w := s.waiting[s.head:]
	keptW := w[:0]
	for _, q := range w {
		if !q.cancelled.Load() {
			keptW = append(keptW, q)
		} else {
			s.aborted++
		}
	}
	for i := len(keptW); i < len(w); i++ {
		w[i] = nil
	}
	s.waiting = s.waiting[:s.head+len(keptW)]
}
