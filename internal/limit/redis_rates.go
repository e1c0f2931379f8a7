package limit

// Rate buckets after Redis lost them.
//
// A Redis that restarts empty (or is away while replicas admit on their
// local shares) has buckets that no longer know the last minute: full
// buckets would hand every key and model a fresh minute (an RPM 60 key
// measured 138 requests in 20 s across a restart). So every resync also
// rebuilds the RPM and TPM buckets of the scopes that were used in the last
// minute, from the ledger (SetRates: what each scope used, second by
// second, as the ledger has it) and from this replica's requests in flight,
// which the ledger does not have yet.
//
// The rebuilt level is a lower bound of what the bucket holds: the bucket
// is replayed from empty a minute ago (it refills completely in a minute,
// so a bucket idle for that minute is full again), each second's use taken
// at the end of its second, and requests in flight taken now. A level
// never goes below zero in the replay (RPM buckets cannot; TPM buckets in
// debt are treated as empty). The script lowers a bucket to that level and
// never raises one, so replicas resyncing in any order, and a resync of
// buckets Redis kept, only correct counts that are too generous.

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
// outage). Without it a resync leaves the RPM and TPM buckets as Redis has
// them (full, after a restart).
func (r *Redis) SetRates(fn func(ctx context.Context, since time.Time) ([]RateSeed, error)) {
	r.rates.Store(&fn)
}

// inflightRate is this replica's requests in flight under one rate scope.
type inflightRate struct{ requests, tokens int64 }

// trackRates counts an admitted request (sign 1) or a finished one (-1)
// under each of its rate-limited scopes.
func (r *Redis) trackRates(scopes *[MaxScopes]Scope, n int, tokens, sign int64) {
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
		f.requests += sign
		f.tokens = sat.Add(f.tokens, sign*tokens)
	}
	r.mu.Unlock()
}

// replayLevel returns the level of a bucket of the given limit at now,
// replayed from empty a minute before now through the uses (each taken by
// take) and, at now, what is in flight.
func replayLevel(limit int64, now time.Time, uses []Use, take func(Use) int64, inflight int64) float64 {
	sort.Slice(uses, func(i, j int) bool { return uses[i].At.Before(uses[j].At) })
	level, at := 0.0, now.Add(-time.Minute).UnixNano()
	for _, u := range uses {
		t := min(u.At.UnixNano(), now.UnixNano())
		level = refill(level, at, t, limit)
		at = max(at, t)
		level = max(0, level-float64(take(u)))
	}
	level = refill(level, at, now.UnixNano(), limit)
	return max(0, level-float64(inflight))
}

// rateItem is one scope's buckets to lower at a resync (-1: no bucket).
type rateItem struct {
	key      string
	rpm, tpm int64
	rl, tl   float64
}

// rateItems turns the ledger's seeds and this replica's requests in flight
// into levels; r.mu must not be held.
func (r *Redis) rateItems(seeds []RateSeed, now time.Time) []rateItem {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, f := range r.inflight {
		if f.requests <= 0 {
			delete(r.inflight, id)
		}
	}
	out := make([]rateItem, 0, len(seeds))
	for i := range seeds {
		s := &seeds[i]
		if s.RPM <= 0 && s.TPM <= 0 {
			continue
		}
		var in inflightRate
		if f := r.inflight[s.ScopeID]; f != nil {
			in = *f
		}
		it := rateItem{key: r.prefix + "rate:" + s.ScopeID, rpm: s.RPM, tpm: s.TPM, rl: -1, tl: -1}
		if s.RPM > 0 {
			it.rl = replayLevel(s.RPM, now, s.Uses, func(u Use) int64 { return u.Requests }, in.requests)
		}
		if s.TPM > 0 {
			it.tl = replayLevel(s.TPM, now, s.Uses, func(u Use) int64 { return u.Tokens }, in.tokens)
		}
		out = append(out, it)
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
