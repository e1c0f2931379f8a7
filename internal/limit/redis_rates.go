package limit

// Rate buckets after Redis lost them.
//
// A Redis that restarts empty (or is away while replicas admit on their
// local shares) has buckets that no longer know the last minute: full
// buckets would hand every key and model a fresh minute (an RPM 60 key
// measured 138 requests in 20 s across a restart). So every resync also
// rebuilds the RPM and TPM buckets of the scopes that were used in the last
// minute, from the ledger (SetRates: what each scope used, second by
// second, as the ledger has it) and from what this replica used that the
// ledger may not have yet: its requests in flight, and those that finished
// in the last holdFor. The ledger writes a finished request's record a
// moment after its lease is released (in batches, every 200 ms unless the
// gateway asks it to store them before reading), so a
// restart just after a burst finds the burst's end in neither the ledger
// nor the requests in flight; nor would it find requests that finish while
// the resync reads the ledger. Finished requests are kept in two slots of
// holdFor per scope, and a resync keeps every one that finished from
// holdFor before its ledger read on until it has used them. Those the
// ledger already has are counted twice, which errs towards refusing: a
// restart costs a scope at most two seconds of this replica's use.
//
// The rebuilt level is a lower bound of what the bucket holds: the bucket
// is replayed from empty a minute ago (it refills completely in a minute,
// so a bucket idle for that minute is full again), each second's use taken
// at the end of its second, and this replica's own use (in flight and just
// finished) taken now. A level never goes below zero in the replay (RPM
// buckets cannot; TPM buckets in debt are treated as empty). The script
// lowers a bucket to that level and never raises one, so replicas
// resyncing in any order, and a resync of buckets Redis kept, only correct
// counts that are too generous.

import (
	"context"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"llmgate/internal/sat"
)

// Use is what a scope used in one second (requests the gateway let
// through, and their tokens).
type Use struct {
	// At is the end of the second (the use is taken as late as it can
	// have been, which leaves the least refill after it).
	At               time.Time
	Requests, Tokens int64
}

// RateSeed is the ledger's last minute of one rate-limited scope.
type RateSeed struct {
	ScopeID  string
	RPM, TPM int64 // the scope's limits now
	Uses     []Use // in any order
}

// SetRates gives the limiter the ledger's last minute of every
// rate-limited scope, read at every resync (after a Redis restart or
// outage). Without it a resync lowers the RPM and TPM buckets only by what
// this replica has in flight or finished in the last holdFor (after a
// restart the others start full).
func (r *Redis) SetRates(fn func(ctx context.Context, since time.Time) ([]RateSeed, error)) {
	r.rates.Store(&fn)
}

// FinishedCountedFor is how long before a resync's ledger read a request
// this replica finished may still be counted by the replica itself (holdFor,
// in whole slots): one that finished earlier counts only as the ledger has
// it.
const FinishedCountedFor = 2 * holdFor

// inflightRate is this replica's use of one rate scope that the ledger may
// not have yet: its requests in flight (their estimates) and those that
// finished lately (what they settled).
type inflightRate struct {
	requests, tokens int64
	// rpm and tpm are the scope's limits as of its last admission, for a
	// resync that finds nothing of the scope in the ledger.
	rpm, tpm int64
	// done[0] is what finished in time slot slot (Unix ns / holdFor);
	// done[1] is what finished before it that a resync may still need.
	done [2]rateUse
	slot int64
}

// rateUse is a number of requests and their tokens.
type rateUse struct{ requests, tokens int64 }

func (u rateUse) plus(v rateUse) rateUse {
	return rateUse{sat.Add(u.requests, v.requests), sat.Add(u.tokens, v.tokens)}
}

// finish counts a request that finished at (Unix ns) having settled
// tokens. keep (Unix ns, 0 = none) is where the window of a resync that is
// reading the ledger begins: until it is done, nothing that finished after
// keep is dropped.
func (f *inflightRate) finish(at, keep, tokens int64) {
	h := int64(holdFor)
	if s := at / h; s > f.slot {
		p := f.slot
		switch {
		case keep > 0 && p*h > keep: // done[1] may hold some of the window
			f.done[1] = f.done[1].plus(f.done[0])
		case s == p+1 || keep > 0 && (p+1)*h > keep:
			f.done[1] = f.done[0]
		default:
			f.done[1] = rateUse{}
		}
		f.done[0], f.slot = rateUse{}, s
	}
	f.done[0] = f.done[0].plus(rateUse{1, tokens})
}

// finishedSince returns what finished since from (Unix ns), and perhaps
// some of the holdFor before it (slots count whole). Nothing that finished
// since from is missing if every finish from holdFor after from on was
// told keep = from: a resync that reads the ledger at from + holdFor.
func (f *inflightRate) finishedSince(from int64) rateUse {
	h := int64(holdFor)
	switch {
	case (f.slot+1)*h <= from:
		return rateUse{}
	case f.slot*h <= from:
		return f.done[0]
	}
	return f.done[0].plus(f.done[1])
}

// trackAdmit counts an admitted request under each of its rate-limited
// scopes.
func (r *Redis) trackAdmit(scopes *[MaxScopes]Scope, n int, tokens int64) {
	r.mu.Lock()
	for i := 0; i < n; i++ {
		s := &scopes[i]
		if s.RPM <= 0 && s.TPM <= 0 {
			continue
		}
		f := r.inflight[s.ID]
		if f == nil {
			f = &inflightRate{}
			r.inflight[s.ID] = f
		}
		// An entry at zero stays (no allocation per request); resyncs drop
		// the idle ones.
		f.requests++
		f.tokens = sat.Add(f.tokens, tokens)
		f.rpm, f.tpm = s.RPM, s.TPM
	}
	r.mu.Unlock()
}

// trackDone moves a request that finished at (Unix ns), which reserved
// estimate and settled actual tokens, from in flight to finished under each
// of its rate-limited scopes.
func (r *Redis) trackDone(scopes *[MaxScopes]Scope, n int, estimate, actual, at int64) {
	r.mu.Lock()
	for i := 0; i < n; i++ {
		s := &scopes[i]
		if s.RPM <= 0 && s.TPM <= 0 {
			continue
		}
		f := r.inflight[s.ID]
		if f == nil { // not expected: resyncs drop only idle entries
			f = &inflightRate{rpm: s.RPM, tpm: s.TPM}
			r.inflight[s.ID] = f
		} else {
			f.requests--
			f.tokens = sat.Add(f.tokens, -estimate)
		}
		f.finish(at, r.keepFrom, max(0, actual))
	}
	r.mu.Unlock()
}

// keepFinished marks the start of a resync's ledger read at t (zero: the
// resync is done) and returns where its window of finished requests
// begins: holdFor before the read, for the ledger to have written them.
func (r *Redis) keepFinished(t time.Time) int64 {
	var from int64
	if !t.IsZero() {
		from = t.Add(-holdFor).UnixNano()
	}
	r.mu.Lock()
	r.keepFrom = from
	r.mu.Unlock()
	return from
}

// replayLevel returns the level of a bucket of the given limit at now,
// replayed from empty a minute before now through the uses (each taken by
// take) and, at now, what this replica used that the ledger may not have.
func replayLevel(limit int64, now time.Time, uses []Use, take func(Use) int64, local int64) float64 {
	sort.Slice(uses, func(i, j int) bool { return uses[i].At.Before(uses[j].At) })
	level, at := 0.0, now.Add(-time.Minute).UnixNano()
	for _, u := range uses {
		t := min(u.At.UnixNano(), now.UnixNano())
		level = refill(level, at, t, limit)
		at = max(at, t)
		level = max(0, level-float64(take(u)))
	}
	level = refill(level, at, now.UnixNano(), limit)
	return max(0, level-float64(local))
}

// rateItem is one scope's buckets to lower at a resync (-1: no bucket).
type rateItem struct {
	key      string
	rpm, tpm int64
	rl, tl   float64
}

// rateItems turns the ledger's seeds and what this replica used that the
// ledger may not have (in flight, and finished since from, Unix ns) into
// levels, less hold local shares of each bucket (replicas spending from
// their local buckets meanwhile: a bucket refills within a minute, as long
// as a missing replica is waited for); r.mu must not be held. A scope the
// ledger has nothing of is rebuilt from this replica's use alone.
func (r *Redis) rateItems(seeds []RateSeed, now time.Time, from int64, hold int64) []rateItem {
	r.mu.Lock()
	defer r.mu.Unlock()
	local := make(map[string]rateUse, len(r.inflight))
	for id, f := range r.inflight {
		u := rateUse{max(0, f.requests), max(0, f.tokens)}.plus(f.finishedSince(from))
		if u == (rateUse{}) {
			delete(r.inflight, id)
			continue
		}
		local[id] = u
	}
	out := make([]rateItem, 0, len(seeds)+len(local))
	n := r.shareOf()
	held := func(limit int64) float64 { return float64(sat.Mul(hold, share(limit, n))) }
	item := func(id string, rpm, tpm int64, uses []Use) {
		u := local[id]
		delete(local, id)
		it := rateItem{key: r.prefix + "rate:" + id, rpm: rpm, tpm: tpm, rl: -1, tl: -1}
		if rpm > 0 {
			it.rl = max(0, replayLevel(rpm, now, uses, func(u Use) int64 { return u.Requests }, u.requests)-held(rpm))
		}
		if tpm > 0 {
			it.tl = max(0, replayLevel(tpm, now, uses, func(u Use) int64 { return u.Tokens }, u.tokens)-held(tpm))
		}
		out = append(out, it)
	}
	for i := range seeds {
		if s := &seeds[i]; s.RPM > 0 || s.TPM > 0 {
			item(s.ScopeID, s.RPM, s.TPM, s.Uses)
		}
	}
	for id := range local {
		if f := r.inflight[id]; f.rpm > 0 || f.tpm > 0 {
			item(id, f.rpm, f.tpm, nil)
		}
	}
	return out
}

// rateSeedScript lowers a scope's request and token buckets to the levels
// given (-1: leave it), never raising them: the level Redis holds, refilled
// to now, wins when it is lower. A stale epoch changes nothing (-1).
var rateSeedScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rk = KEYS[2]
local rpm, tpm, rl, tl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local h = redis.call('HMGET', rk, 'r', 'rt', 't', 'tt', 'rl', 'tl')
local ns = string.format('%.0f', now)
if rpm > 0 and rl >= 0 then
  local cur = rpm
  if h[1] then
    local up = math.max(0, rpm - tonumber(h[5] or rpm))
    cur = math.min(rpm, tonumber(h[1]) + up + math.max(0, now - tonumber(h[2])) * rpm / 60000)
  end
  redis.call('HSET', rk, 'r', string.format('%.6f', math.min(cur, rl)), 'rt', ns, 'rl', rpm)
end
if tpm > 0 and tl >= 0 then
  local cur = tpm
  if h[3] then
    local up = math.max(0, tpm - tonumber(h[6] or tpm))
    cur = math.min(tpm, tonumber(h[3]) + up + math.max(0, now - tonumber(h[4])) * tpm / 60000)
  end
  redis.call('HSET', rk, 't', string.format('%.6f', math.min(cur, tl)), 'tt', ns, 'tl', tpm)
end
redis.call('PEXPIRE', rk, 600000)
return 1
`)
