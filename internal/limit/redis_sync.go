package limit

// How the Redis limiter survives Redis.
//
// Restarts. Redis holds an epoch marker (<prefix>epoch), a random value set
// by the first replica that finds it missing. Every acquire, release and
// seed script carries the epoch its replica last synced with; on a mismatch
// the script changes nothing and says so, and the replica resyncs at once
// (the request waits for it, up to two seconds, then decides on its local
// share; see "Together" below). An idle replica notices
// within one heartbeat: the heartbeat reads the marker, and it compares
// Redis's run_id, so that a Redis restarted from a snapshot (marker
// restored, counters old) is noticed too; the replica then replaces the
// marker and every replica resyncs.
//
// Resync. The replica reads every budgeted key's spend from the ledger,
// then, holding its gate exclusively so that none of its own scripts run,
// sets in one pipelined round trip for every budget window: settled =
// max(settled, ledger); its reservation field ("r:") = exactly what its
// requests in flight reserved; and its "u:" field = the costs it settled
// that Redis did not count (during an outage, or since a restart), which
// the ledger may not have yet. A second resync a second later, when the
// ledger has written them, clears that field. It re-adds its concurrency
// leases. Each replica writes only its own fields and the settled figure
// only grows, so the result does not depend on the order in which replicas
// resync, and reservations in flight are not lost.
// Rate buckets (RPM, TPM) of the scopes used in the last minute are rebuilt
// from the ledger's last minute and what this replica used that the ledger
// may not have yet: its requests in flight and those that finished in the
// last holdFor (see redis_rates.go), so a restart hands out no fresh minute.
//
// Outages. A script that fails (connection refused, time-out) switches the
// replica to its local fallback (fallback.go) - or, with FailOpen, to no
// limits - with one log line. It then probes Redis every 100 ms; when Redis
// answers, a resync corrects the shared counters from the ledger and from
// what this replica settled meanwhile, the fallback is dropped, and one
// line says so.
//
// Together. After Redis lost its data or was unreachable, a replica
// returns to the shared counters only when every other replica it knew of
// has announced itself in the replica set since this recovery began (each
// does so only in the transaction that puts its part into the counters),
// or after three heartbeats: one spending from re-seeded counters while
// another still spends its local share would spend that share twice.
// Until then it stays on its local share, which it reserves in the
// counters meanwhile. A replica that stops waiting (the others are slow,
// cannot read the ledger, cannot reach Redis, or died) keeps reserving, in
// its own reservation field, one whole share of every budget for each
// replica still missing, until as many have announced themselves or for
// forgetAfter (a replica silent that long is forgotten): what they may
// spend locally is then not handed out a second time from the shared
// counters.
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

	"llmgate/internal/sat"
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

// epochScript returns Redis's epoch, creating it when missing, and Redis's
// time (ms); in replace mode it first discards the marker if it still holds
// the caller's epoch (Redis restarted from a snapshot, as its run_id tells).
var epochScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if ARGV[3] == 'replace' and cur == ARGV[1] then cur = false end
if not cur then
  redis.call('SET', KEYS[1], ARGV[2])
  cur = ARGV[2]
end
local t = redis.call('TIME')
return {cur, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
`)

// epochOf runs epochScript.
func (r *Redis) epochOf(ctx context.Context, known, mode string) (epoch string, now int64, err error) {
	vals, err := epochScript.Run(ctx, r.c, []string{r.epochKey()}, known, newEpoch(), mode).Slice()
	if err != nil {
		return "", 0, err
	}
	if len(vals) != 2 {
		return "", 0, fmt.Errorf("unexpected epoch reply %v", vals)
	}
	epoch, _ = vals[0].(string)
	return epoch, toInt(vals[1]), nil
}

// heartbeatScript announces a replica - only if Redis's epoch is the one
// it synced with: an announcement says its part of the counters is in -,
// forgets replicas silent for too long, and returns the live count,
// whether the replica was missing, and the epoch.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ep = redis.call('GET', KEYS[2]) or ''
local added = 0
if ep == ARGV[4] then added = redis.call('ZADD', KEYS[1], now, ARGV[1]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
local n = redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[2]), '+inf')
return {n, added, ep}
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
	ep, _, err := r.epochOf(ctx, "", "join")
	if err != nil {
		return err
	}
	id, _ := r.serverRunID(ctx)
	r.gate.Lock()
	r.epoch, r.runID = ep, id
	r.gate.Unlock()
	live, _, _, err := r.beatOnce(ctx)
	if live >= 1 {
		r.live.Store(live)
	}
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
	r.gate.RLock()
	known := r.epoch
	r.gate.RUnlock()
	vals, err := heartbeatScript.Run(ctx, r.c, []string{r.replicasKey(), r.epochKey()}, r.replica,
		(3 * r.heartbeat).Milliseconds(), forgetAfter.Milliseconds(), known).Slice()
	if err != nil {
		return 0, false, "", err
	}
	if len(vals) != 3 {
		return 0, false, "", fmt.Errorf("unexpected heartbeat reply %v", vals)
	}
	live = toInt(vals[0])
	epoch, _ = vals[2].(string)
	return live, toInt(vals[1]) == 1, epoch, nil
}

// loop heartbeats, checks for Redis restarts, renews leases, and while
// Redis is unreachable probes it to recover.
func (r *Redis) loop() {
	defer close(r.done)
	t := time.NewTicker(min(probeEvery, r.heartbeat/2))
	defer t.Stop()
	lastBeat, lastRenew := time.Now(), time.Now()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if r.down.Load() {
			r.probe()
			continue
		}
		if time.Since(lastBeat) >= r.heartbeat {
			r.beat()
			lastBeat = time.Now()
		}
		if time.Since(lastRenew) >= r.lease/3 {
			r.renew()
			lastRenew = time.Now()
		}
	}
}

// probeEvery is how often a replica on its local shares asks Redis whether
// it is back: replicas should return to the shared counters together.
const probeEvery = 100 * time.Millisecond

// probe asks an unreachable Redis whether it is back, and resyncs if so.
func (r *Redis) probe() {
	ctx, cancel := context.WithTimeout(context.Background(), max(r.heartbeat, time.Second))
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
	live, added, ep, err := r.beatOnce(ctx)
	if err != nil {
		r.markDown("redis unreachable", err)
		return
	}
	id, _ := r.serverRunID(ctx)
	r.gate.RLock()
	known, knownRun := r.epoch, r.runID
	r.gate.RUnlock()
	if live >= 1 && ep == known && !added {
		// Only a count from the Redis this replica synced with: a fresh
		// one starts empty and would under-count the others.
		r.live.Store(live)
	}
	if ep != known || added || id != "" && knownRun != "" && id != knownRun {
		// The resync tells a restart from a snapshot by the run_id itself.
		_ = r.resync(ctx, "redis restarted or lost its data")
	} else if r.holdsDone(ctx) {
		_ = r.resync(ctx, "the replicas it waited for are back")
	}
}

// holdsDone says whether this replica holds shares for missing replicas
// (see "Together") that it can drop: enough others have announced
// themselves since (their parts are in the counters), or they waited
// forgetAfter.
func (r *Redis) holdsDone(ctx context.Context) bool {
	r.gate.RLock()
	n, since, need, until := len(r.holds), r.holdSince, r.holdNeed, r.holdUntil
	r.gate.RUnlock()
	if n == 0 {
		return false
	}
	if !time.Now().Before(until) {
		return true
	}
	back, err := r.c.ZRangeByScore(ctx, r.replicasKey(), &redis.ZRangeBy{Min: strconv.FormatInt(since, 10), Max: "+inf"}).Result()
	if err != nil {
		return false
	}
	others := int64(0)
	for _, m := range back {
		if m != r.replica {
			others++
		}
	}
	return others >= need
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
	r.log.Warn(fmt.Sprintf("%s: this replica now enforces its own share of every limit (1/%d of each RPM, TPM and concurrency limit and of what is left of each budget) until the shared counters are back", why, n),
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
	} else if !r.failLog && !errors.Is(err, errJoinWait) {
		r.failLog = true
		r.log.Warn("redis resync failed; will retry", "why", why, "err", err)
	}
	r.resyncMu.Unlock()
	close(ch)
	return err
}

// resyncItem is one budget window to re-seed.
type resyncItem struct {
	key                     string
	ledger, inUse, unsynced int64
	ttl                     time.Duration
}

// holdFor is how long costs this replica settled while Redis could not
// count them stay in its "u:" field after a resync: long enough for its
// ledger to write them (it writes every 200 ms, and the gateway has it
// store what it holds before each read of the ledger), after which a
// second resync finds them in the ledger's figure and clears the field. Until then they
// may be counted twice, which errs towards refusing. (Records that take
// longer, held in the spool while the database is away, are counted again
// by the periodic seeding once written.) For the same reason a resync
// counts the requests this replica finished in the holdFor before it read
// the ledger's last minute into the rebuilt rate buckets.
const holdFor = time.Second

// doResync is one resync, in its stages: adopt Redis's epoch; read the
// ledger (budget spend, then the last minute's requests); see whether the
// other replicas are back; then, holding the gate, gather what this
// replica knows, write it in one transaction, and go back to the shared
// counters (or keep waiting on the local share).
func (r *Redis) doResync(why string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ep, redisNow, runID, why, err := r.adoptEpoch(ctx, why)
	if err != nil {
		return err
	}
	seeds, err := r.readBudgetSeeds(ctx, why)
	if err != nil {
		return err
	}
	// Requests that finish from a moment before the next read on may be
	// missing from it: this replica counts them itself.
	from := r.keepFinished(time.Now())
	defer r.keepFinished(time.Time{})
	rateSeeds, err := r.readRateSeeds(ctx, why)
	if err != nil {
		return err
	}
	back, missing, err := r.othersBack(ctx, redisNow)
	if err != nil {
		return err
	}
	// Shares held for replicas that are back by now are dropped.
	dropHolds := r.holdsDone(ctx)
	r.gate.Lock()
	defer r.gate.Unlock()
	if runID != "" {
		r.runID = runID
	}
	// What this replica knows is frozen while the gate is held.
	fb := r.fb.Load()
	local := !back && fb != nil // still on the local share after this resync
	items, snap := r.gather(seeds)
	r.reserveShares(items, seeds, fb, local, missing, dropHolds)
	rateItems := r.rateItems(rateSeeds, snap.now, from, r.rateHold(snap.now, local))
	if err := r.writeResync(ctx, ep, items, snap, rateItems); err != nil {
		return err
	}
	held := r.keepUnsynced(items, snap.now)
	r.epoch = ep
	r.gen++
	if !back {
		return errJoinWait
	}
	r.backOnShared(why, held, missing, len(items), len(rateItems))
	return nil
}

// adoptEpoch adopts Redis's epoch, creating it if Redis lost it. A Redis
// restarted from a snapshot has its old marker back, with old counters: a
// new run_id replaces the marker, so that every replica resyncs. It
// returns the epoch, Redis's clock, its run_id ("" if unknown) and why
// this resync runs, corrected when it finds Redis restarted.
func (r *Redis) adoptEpoch(ctx context.Context, why string) (ep string, redisNow int64, runID, reason string, err error) {
	r.gate.RLock()
	prev, knownRun := r.epoch, r.runID
	r.gate.RUnlock()
	mode := "join"
	runID, _ = r.serverRunID(ctx)
	if runID != "" && knownRun != "" && runID != knownRun {
		mode, why = "replace", "redis restarted (new run_id)"
	}
	ep, redisNow, err = r.epochOf(ctx, prev, mode)
	if err != nil {
		r.markDown("redis unreachable", err)
		return "", 0, "", why, err
	}
	restarted := prev != "" && ep != prev
	if restarted && mode == "join" {
		why = "redis restarted or lost its data"
	}
	if restarted {
		// Every replica passes through its local share while the counters
		// are rebuilt (see "Together").
		r.markDown(why, errors.New("re-seeding the shared counters"))
		r.sawRestart, r.restartReason = true, why
	}
	return ep, redisNow, runID, why, nil
}

// readBudgetSeeds reads every budget's spend from the ledger (none without
// one).
func (r *Redis) readBudgetSeeds(ctx context.Context, why string) ([]BudgetSeed, error) {
	fn := r.ledger.Load()
	if fn == nil {
		return nil, nil
	}
	seeds, err := (*fn)(ctx)
	if err != nil {
		// Counters that Redis lost, re-seeded without the ledger, would
		// start from what this replica knows: stay on the local shares
		// until it reads. Counters Redis kept stay in use.
		if r.down.Load() {
			r.markDown(why+", and budget spend cannot be read from the ledger", err)
		}
		return nil, fmt.Errorf("read budget spend from the ledger: %w", err)
	}
	return seeds, nil
}

// readRateSeeds reads the ledger's last minute of every rate-limited scope
// (none without a reader).
func (r *Redis) readRateSeeds(ctx context.Context, why string) ([]RateSeed, error) {
	fn := r.rates.Load()
	if fn == nil {
		return nil, nil
	}
	seeds, err := (*fn)(ctx, time.Now().Add(-time.Minute))
	if err != nil {
		if r.down.Load() {
			r.markDown(why+", and the last minute's requests cannot be read from the ledger", err)
		}
		return nil, fmt.Errorf("read the last minute's requests from the ledger: %w", err)
	}
	return seeds, nil
}

// othersBack says whether this replica returns to the shared counters now:
// at once when it was not down; after a Redis loss only when every other
// replica it knew of has announced itself since this recovery began, or
// when it waited joinWait, with missing replicas still not back.
func (r *Redis) othersBack(ctx context.Context, redisNow int64) (back bool, missing int64, err error) {
	if !r.down.Load() {
		return true, 0, nil
	}
	if r.recoverAt == 0 {
		r.recoverAt, r.recoverSince = redisNow, time.Now()
	}
	others, err := r.c.ZCount(ctx, r.replicasKey(), strconv.FormatInt(r.recoverAt, 10), "+inf").Result()
	if err != nil {
		r.markDown("redis unreachable", err)
		return false, 0, err
	}
	if sc, err := r.c.ZScore(ctx, r.replicasKey(), r.replica).Result(); err == nil && int64(sc) >= r.recoverAt {
		others-- // this replica's own announcement of an earlier attempt
	}
	need := r.shareOf() - 1
	switch {
	case others >= need:
		return true, 0, nil
	case time.Since(r.recoverSince) >= r.joinWait():
		return true, need - others, nil
	}
	return false, 0, nil
}

// known is what this replica holds that a resync puts back, taken at one
// moment: its concurrency leases (keys and members, one for one) and when.
type known struct {
	leaseKeys []string
	members   []any
	now       time.Time
}

// gather makes one item per budget window: the ledger's spend of each, and
// this replica's reservations in flight and costs Redis did not count (with
// those of the last holdFor that the ledger may not have yet). The caller
// holds the gate exclusively.
func (r *Redis) gather(seeds []BudgetSeed) (map[string]*resyncItem, known) {
	items := map[string]*resyncItem{}
	for _, s := range seeds {
		k := r.spendKey(s.ScopeID, s.Window)
		items[k] = &resyncItem{key: k, ledger: s.Nanos, ttl: s.TTL}
		r.noteSeed(s.ScopeID, s.Window, s.Nanos)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	snap := known{now: time.Now()}
	for k, b := range r.budgets {
		it := items[k]
		if it == nil {
			it = &resyncItem{key: k, ttl: b.ttl}
			items[k] = it
		}
		it.inUse, it.unsynced = b.inflight, b.unsynced
		if b.held > 0 && snap.now.Sub(b.heldAt) < holdFor {
			it.unsynced += b.held
		}
	}
	for m, cks := range r.active {
		for _, ck := range cks {
			snap.leaseKeys = append(snap.leaseKeys, ck)
			snap.members = append(snap.members, m)
		}
	}
	return items, snap
}

// reserveShares adds to the items' reservations the local shares that must
// not be handed out from the shared counters too: this replica's own while
// it stays on its local share (local), and one share per replica missing
// when this one stopped waiting (see "Together"), held until they are back
// (dropHolds) or forgotten. The caller holds the gate exclusively.
func (r *Redis) reserveShares(items map[string]*resyncItem, seeds []BudgetSeed, fb *fallback, local bool, missing int64, dropHolds bool) {
	if local {
		// Still on the local share: reserve in Redis what this replica may
		// yet spend locally, so that replicas already back on the shared
		// counters cannot spend it too.
		for _, s := range seeds {
			k := r.spendKey(s.ScopeID, s.Window)
			items[k].inUse += fb.room(k, s)
		}
	}
	// Shares held for replicas missing when this one stopped waiting: the
	// windows held before are asserted again, with or without them.
	for k := range r.holds {
		if items[k] == nil {
			items[k] = &resyncItem{key: k}
		}
	}
	if dropHolds {
		r.holds, r.holdRates = nil, 0
	}
	if missing > 0 && fb != nil {
		r.holdRates = missing
		r.holds = map[string]int64{}
		for _, s := range seeds {
			k := r.spendKey(s.ScopeID, s.Window)
			if h := sat.Mul(missing, fb.share(k, s)); h > 0 {
				r.holds[k] = h
			}
		}
		r.holdSince, r.holdNeed, r.holdUntil = r.recoverAt, r.shareOf()-1, time.Now().Add(forgetAfter)
	}
	for k, h := range r.holds {
		items[k].inUse = sat.Add(items[k].inUse, h)
	}
}

// rateHold is how many replicas' local shares the rebuilt rate buckets
// leave out, as the budgets do: the missing replicas', and this replica's
// own while it stays on its local share.
func (r *Redis) rateHold(now time.Time, local bool) int64 {
	var n int64
	if now.Before(r.holdUntil) {
		n = r.holdRates
	}
	if local {
		n++
	}
	return n
}

// writeResync writes this replica's part in one transaction: another
// replica's seed, which drops the fields of replicas not in the live set,
// must not run between these fields and the announcement that puts this
// replica in it.
func (r *Redis) writeResync(ctx context.Context, ep string, items map[string]*resyncItem, snap known, rateItems []rateItem) error {
	pipe := r.c.TxPipeline()
	var cmds []*redis.Cmd
	for _, it := range items {
		cmds = append(cmds, seedScript.Eval(ctx, pipe, []string{r.epochKey(), it.key, r.replicasKey()},
			ep, it.ledger, r.rfield, it.inUse, r.ufield, it.unsynced, "1", int64(it.ttl/time.Second)))
	}
	for _, it := range rateItems {
		cmds = append(cmds, rateSeedScript.Eval(ctx, pipe, []string{r.epochKey(), it.key}, ep, it.rpm, it.tpm, it.rl, it.tl))
	}
	for start := 0; start < len(snap.leaseKeys); start += 500 {
		end := min(start+500, len(snap.leaseKeys))
		renewScript.Eval(ctx, pipe, snap.leaseKeys[start:end], append([]any{r.lease.Milliseconds(), "add"}, snap.members[start:end]...)...)
	}
	// Announced after this replica's part is in, never before.
	heartbeatScript.Eval(ctx, pipe, []string{r.replicasKey(), r.epochKey()}, r.replica,
		(3 * r.heartbeat).Milliseconds(), forgetAfter.Milliseconds(), ep)
	if _, err := pipe.Exec(ctx); err != nil {
		r.markDown("redis unreachable", err)
		return err
	}
	for _, c := range cmds {
		if v, _ := c.Int64(); v == -1 {
			return errors.New("redis epoch changed during the resync")
		}
	}
	return nil
}

// keepUnsynced moves the costs Redis did not count, now in its "u:" fields,
// to each budget's held figure for holdFor (a later resync clears them
// once the ledger has them), and says whether any are held.
func (r *Redis) keepUnsynced(items map[string]*resyncItem, now time.Time) (held bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, b := range r.budgets {
		if b.unsynced > 0 {
			b.held, b.heldAt = items[k].unsynced, now
		} else if now.Sub(b.heldAt) >= holdFor {
			b.held = 0
		}
		b.unsynced = 0
		held = held || b.held > 0
		r.tidy(k, b)
	}
	return held
}

// backOnShared drops the local share and says so: after a restart, after
// an outage, and when other replicas were not back in time.
func (r *Redis) backOnShared(why string, held bool, missing int64, budgets, rateScopes int) {
	r.state.Lock()
	wasDown := r.down.Load()
	var downFor time.Duration
	if wasDown {
		downFor = time.Since(r.downAt)
	}
	r.fb.Store(nil)
	r.down.Store(false)
	r.recoverAt = 0
	r.state.Unlock()
	if held {
		r.clearHeldLater()
	}
	if missing > 0 {
		r.log.Warn(fmt.Sprintf("%d other replica(s) not back on the shared counters after %v: this replica uses them, and keeps their local share of every budget reserved until they are back (at most %v)",
			missing, r.joinWait(), forgetAfter), "replicas", r.shareOf())
	}
	switch {
	case r.sawRestart:
		attrs := []any{"budgets", budgets, "rate_scopes", rateScopes, "replicas", r.shareOf(), "local_shares_for", downFor.Round(time.Millisecond).String()}
		r.log.Warn("shared limits restored after "+r.restartWhy(why)+": budget counters re-seeded from the ledger (the larger value wins), RPM/TPM buckets rebuilt from its last minute; this replica's reservations, requests in flight and concurrency leases put back",
			attrs...)
	case wasDown:
		r.log.Info("redis reachable again: shared limits restored, local shares dropped; budget counters corrected from the ledger (the larger value wins), RPM/TPM buckets lowered to its last minute",
			"down_for", downFor.Round(time.Millisecond).String(), "budgets", budgets, "rate_scopes", rateScopes, "replicas", r.shareOf())
	}
	r.sawRestart, r.restartReason = false, ""
}

// restartWhy names the restart this recovery followed, which an earlier
// attempt may have seen.
func (r *Redis) restartWhy(why string) string {
	if r.restartReason != "" {
		return r.restartReason
	}
	return why
}

// errJoinWait says a resync put this replica's part into Redis but waits
// for the other replicas before it uses the shared counters.
var errJoinWait = errors.New("waiting for the other replicas to return to redis")

// joinWait bounds how long a replica waits for the others (one that died
// meanwhile never returns): three heartbeats, within 300 ms to 5 s.
func (r *Redis) joinWait() time.Duration {
	return min(max(3*r.heartbeat, 300*time.Millisecond), 5*time.Second)
}

// clearHeldLater resyncs once the ledger has had time to write the costs
// put into this replica's "u:" fields, which that resync clears; it tries
// again while it fails.
func (r *Redis) clearHeldLater() {
	time.AfterFunc(holdFor+100*time.Millisecond, func() {
		select {
		case <-r.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if r.resync(ctx, "costs settled while Redis could not count them are in the ledger") != nil {
			r.clearHeldLater()
		}
	})
}

// String describes the limiter's state for logs and tests.
func (r *Redis) String() string {
	if r.down.Load() {
		return "redis limiter (unreachable; local shares of 1/" + strconv.FormatInt(r.shareOf(), 10) + ")"
	}
	return "redis limiter (shared)"
}
