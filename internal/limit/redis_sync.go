package limit

// How the Redis limiter survives Redis.
//
// Restarts. Redis holds an epoch marker (<prefix>epoch), a random value set
// by the first replica that finds it missing. Every acquire, release and
// seed script carries the epoch its replica last synced with; on a mismatch
// the script changes nothing and says so, and the replica resyncs at once
// (the request waits for it, up to two seconds). An idle replica notices
// within one heartbeat: the heartbeat reads the marker, and it compares
// Redis's run_id, so that a Redis restarted from a snapshot (marker
// restored, counters old) is noticed too; the replica then replaces the
// marker and every replica resyncs.
//
// Resync. The replica reads every budgeted key's spend from the ledger,
// then, holding its gate exclusively so that none of its own scripts run,
// sets in one pipelined round trip for every budget window: settled =
// max(settled + the costs it settled that Redis did not count, ledger), and
// its own reservation field = exactly what its requests in flight reserved.
// It re-adds its concurrency leases. Each replica writes only its own field
// and the settled figure only grows, so the result does not depend on the
// order in which replicas resync, and reservations in flight are not lost.
// Rate buckets (RPM, TPM) start full again after Redis lost them.
//
// Outages. A script that fails (connection refused, time-out) switches the
// replica to its local fallback (fallback.go) - or, with FailOpen, to no
// limits - with one log line. It then probes Redis twice per heartbeat;
// when Redis answers, a resync corrects the shared counters from the ledger
// and from what this replica settled meanwhile, the fallback is dropped,
// and one line says so.
//
// Replica count. Every replica adds itself to a sorted set
// (<prefix>replicas) scored by the time of its last heartbeat; those seen in
// the last three heartbeats are live. The last count seen before an outage
// sets each replica's share (RedisOptions.Replicas fixes it instead).
// Replicas silent for a minute are removed, and their reservation fields
// with them at the next seed: a replica that crashed with requests in
// flight no longer holds budget, and the records of what it did serve reach
// the ledger when its spool is replayed.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SetLedger gives the limiter the ledger's budget spend, read at every
// resync (after a Redis restart or outage). Without it a resync restores
// only what this replica knows.
func (r *Redis) SetLedger(fn func(context.Context) ([]BudgetSeed, error)) {
	r.ledger.Store(&fn)
}

// Shared reports whether the limiter is using Redis's shared counters
// (false while it falls back, or is off, because Redis is unreachable).
func (r *Redis) Shared() bool { return !r.down.Load() }

// Replicas is the number of replicas this one counts as sharing the
// limits: the configured number, else the live count at the last heartbeat.
func (r *Redis) Replicas() int { return int(r.shareOf()) }

func (r *Redis) shareOf() int64 {
	if r.fixedN > 0 {
		return r.fixedN
	}
	return max(1, r.live.Load())
}

// epochScript returns Redis's epoch, creating it when missing; in replace
// mode it first discards the marker if it still holds the caller's epoch
// (Redis restarted from a snapshot, as its run_id tells). The caller is
// announced as alive.
var epochScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if ARGV[4] == 'replace' and cur == ARGV[1] then cur = false end
if not cur then
  redis.call('SET', KEYS[1], ARGV[2])
  cur = ARGV[2]
end
local t = redis.call('TIME')
redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[3])
return cur
`)

// heartbeatScript announces a replica, forgets replicas silent for too
// long, and returns the live count, whether the replica was missing, and
// the epoch.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local added = redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
local n = redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[2]), '+inf')
return {n, added, redis.call('GET', KEYS[2]) or ''}
`)

// forgetAfter is how long a silent replica stays in the replica set (and
// keeps its reservations).
const forgetAfter = time.Minute

func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// join adopts Redis's epoch (creating it) at start.
func (r *Redis) join(ctx context.Context) error {
	ep, err := epochScript.Run(ctx, r.c, []string{r.epochKey(), r.replicasKey()}, "", newEpoch(), r.replica, "join").Text()
	if err != nil {
		return err
	}
	id, _ := r.serverRunID(ctx)
	r.gate.Lock()
	r.epoch, r.runID = ep, id
	r.gate.Unlock()
	_, _, _, err = r.beatOnce(ctx)
	return err
}

func (r *Redis) serverRunID(ctx context.Context) (string, error) {
	info, err := r.c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", nil
}

func (r *Redis) beatOnce(ctx context.Context) (live int64, added bool, epoch string, err error) {
	vals, err := heartbeatScript.Run(ctx, r.c, []string{r.replicasKey(), r.epochKey()}, r.replica,
		(3 * r.heartbeat).Milliseconds(), forgetAfter.Milliseconds()).Slice()
	if err != nil {
		return 0, false, "", err
	}
	if len(vals) != 3 {
		return 0, false, "", fmt.Errorf("unexpected heartbeat reply %v", vals)
	}
	live = toInt(vals[0])
	if live >= 1 {
		r.live.Store(live)
	}
	epoch, _ = vals[2].(string)
	return live, toInt(vals[1]) == 1, epoch, nil
}

// loop heartbeats, checks for Redis restarts, renews leases, and while
// Redis is unreachable probes it to recover.
func (r *Redis) loop() {
	defer close(r.done)
	t := time.NewTicker(r.heartbeat / 2)
	defer t.Stop()
	lastRenew := time.Now()
	for n := 0; ; n++ {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if r.down.Load() {
			r.probe()
			continue
		}
		if n%2 == 1 {
			r.beat()
		}
		if time.Since(lastRenew) >= r.lease/3 {
			r.renew()
			lastRenew = time.Now()
		}
	}
}

// probe asks an unreachable Redis whether it is back, and resyncs if so.
func (r *Redis) probe() {
	ctx, cancel := context.WithTimeout(context.Background(), r.heartbeat)
	defer cancel()
	if r.c.Ping(ctx).Err() != nil {
		return
	}
	_ = r.resync(ctx, "redis reachable again")
}

// beat announces this replica and resyncs when Redis restarted or had
// forgotten it.
func (r *Redis) beat() {
	ctx, cancel := context.WithTimeout(context.Background(), r.heartbeat)
	defer cancel()
	_, added, ep, err := r.beatOnce(ctx)
	if err != nil {
		r.markDown("redis unreachable", err)
		return
	}
	id, _ := r.serverRunID(ctx)
	r.gate.RLock()
	known, knownRun := r.epoch, r.runID
	r.gate.RUnlock()
	if ep != known || added || id != "" && knownRun != "" && id != knownRun {
		// The resync tells a restart from a snapshot by the run_id itself.
		_ = r.resync(ctx, "redis restarted or lost its data")
	}
}

func (r *Redis) renew() {
	r.mu.Lock()
	var keys []string
	args := []any{r.lease.Milliseconds(), "xx"}
	for m, cks := range r.active {
		for _, ck := range cks {
			keys = append(keys, ck)
			args = append(args, m)
		}
	}
	r.mu.Unlock()
	for start := 0; start < len(keys); start += 500 {
		end := min(start+500, len(keys))
		ctx, cancel := context.WithTimeout(context.Background(), r.lease/3)
		_ = renewScript.Run(ctx, r.c, keys[start:end], append([]any{args[0], args[1]}, args[2+start:2+end]...)...).Err()
		cancel()
	}
}

// markDown switches to the local fallback (or to no limits with FailOpen)
// and says so once.
func (r *Redis) markDown(why string, err error) {
	r.state.Lock()
	defer r.state.Unlock()
	if r.down.Load() {
		return
	}
	n := r.shareOf()
	if !r.failOpen {
		r.fb.Store(newFallback(r, n))
	}
	r.downAt = time.Now()
	r.down.Store(true)
	if r.failOpen {
		r.log.Warn(why+": rate limits, concurrency limits and budgets are OFF on this replica until Redis answers again (redis_fail_open: true)", "err", err)
		return
	}
	r.log.Warn(fmt.Sprintf("%s: this replica now enforces its own share of every limit (1/%d of each RPM, TPM and concurrency limit and of what is left of each budget) until Redis answers again", why, n),
		"err", err, "replicas", n)
}

// resync re-seeds the shared counters and puts back this replica's part of
// them (see the top of this file). Concurrent calls share one run; a
// caller waits for it at most two seconds.
func (r *Redis) resync(ctx context.Context, why string) error {
	r.resyncMu.Lock()
	if ch := r.resyncCh; ch != nil {
		r.resyncMu.Unlock()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
			return errors.New("redis resync still running")
		}
	}
	ch := make(chan struct{})
	r.resyncCh = ch
	r.resyncMu.Unlock()
	err := r.doResync(why)
	r.resyncMu.Lock()
	r.resyncCh = nil
	if err == nil {
		r.failLog = false
	} else if !r.failLog {
		r.failLog = true
		r.log.Warn("redis resync failed; will retry", "why", why, "err", err)
	}
	r.resyncMu.Unlock()
	close(ch)
	return err
}

// resyncItem is one budget window to re-seed.
type resyncItem struct {
	key                string
	ledger, add, inUse int64
	ttl                time.Duration
}

func (r *Redis) doResync(why string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seeds []BudgetSeed
	if fn := r.ledger.Load(); fn != nil {
		s, err := (*fn)(ctx)
		if err != nil {
			// Counters re-seeded without the ledger would start from what
			// this replica knows: stay on the local shares until it reads.
			r.markDown(why+", and budget spend cannot be read from the ledger", err)
			return fmt.Errorf("read budget spend from the ledger: %w", err)
		}
		seeds = s
	}
	r.gate.Lock()
	defer r.gate.Unlock()
	// A Redis restarted from a snapshot has its old epoch marker back, with
	// old counters: a new run_id replaces the marker, so that every replica
	// resyncs.
	mode := "join"
	if id, err := r.serverRunID(ctx); err == nil && id != "" {
		if r.runID != "" && id != r.runID {
			mode, why = "replace", "redis restarted (new run_id)"
		}
		r.runID = id
	}
	prev := r.epoch
	ep, err := epochScript.Run(ctx, r.c, []string{r.epochKey(), r.replicasKey()}, prev, newEpoch(), r.replica, mode).Text()
	if err != nil {
		r.markDown("redis unreachable", err)
		return err
	}
	// What this replica knows is frozen while the gate is held.
	items := map[string]*resyncItem{}
	r.mu.Lock()
	for _, s := range seeds {
		k := r.spendKey(s.ScopeID, s.Window)
		items[k] = &resyncItem{key: k, ledger: s.Nanos, ttl: s.TTL}
		r.lastSeed[k] = s.Nanos
	}
	for k, b := range r.budgets {
		it := items[k]
		if it == nil {
			it = &resyncItem{key: k, ttl: b.ttl}
			items[k] = it
		}
		it.add, it.inUse = b.unsynced, b.inflight
	}
	var concKeys []string
	var members []any
	for m, cks := range r.active {
		for _, ck := range cks {
			concKeys = append(concKeys, ck)
			members = append(members, m)
		}
	}
	r.mu.Unlock()

	pipe := r.c.Pipeline()
	var cmds []*redis.Cmd
	for _, it := range items {
		cmds = append(cmds, seedScript.Eval(ctx, pipe, []string{r.epochKey(), it.key, r.replicasKey()},
			ep, it.ledger, it.add, r.rfield, it.inUse, "1", int64(it.ttl/time.Second)))
	}
	for start := 0; start < len(concKeys); start += 500 {
		end := min(start+500, len(concKeys))
		renewScript.Eval(ctx, pipe, concKeys[start:end], append([]any{r.lease.Milliseconds(), "add"}, members[start:end]...)...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		r.markDown("redis unreachable", err)
		return err
	}
	for _, c := range cmds {
		if v, _ := c.Int64(); v == -1 {
			return errors.New("redis epoch changed during the resync")
		}
	}
	r.mu.Lock()
	for k, b := range r.budgets {
		b.unsynced = 0
		r.tidy(k, b)
	}
	r.mu.Unlock()
	r.epoch = ep
	r.gen++
	r.state.Lock()
	wasDown := r.down.Load()
	downFor := time.Since(r.downAt)
	r.fb.Store(nil)
	r.down.Store(false)
	r.state.Unlock()
	switch {
	case wasDown:
		lost := ""
		if prev != "" && ep != prev {
			lost = "; Redis had restarted meanwhile"
		}
		r.log.Info("redis reachable again: shared limits restored, local shares dropped; budget counters corrected from the ledger (the larger value wins)"+lost,
			"down_for", downFor.Round(time.Millisecond).String(), "budgets", len(items), "replicas", r.shareOf())
	case prev != "" && ep != prev:
		r.log.Warn(why+": budget counters re-seeded from the ledger (the larger value wins); this replica's reservations and concurrency leases put back",
			"budgets", len(items))
	}
	return nil
}

// String describes the limiter's state for logs and tests.
func (r *Redis) String() string {
	if r.down.Load() {
		return "redis limiter (unreachable; local shares of 1/" + strconv.FormatInt(r.shareOf(), 10) + ")"
	}
	return "redis limiter (shared)"
}
