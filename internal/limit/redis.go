package limit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"llmgate/internal/redact"
	"llmgate/internal/sat"
)

// Redis keeps limiter state in Redis so every replica enforces the same
// limits. Each Acquire and each Release is one atomic Lua script: one round
// trip. Time comes from the Redis server (TIME), so replicas' clocks do not
// matter. Concurrency slots are leases in a sorted set scored by expiry;
// this process renews its leases every LeaseTTL/3, so the slots of a
// replica that dies expire within LeaseTTL.
//
// Budget counters are hashes: "s" holds settled spend, "r:<replica>" each
// replica's reservations in flight, and "u:<replica>" costs a replica
// settled while Redis could not count them, until the ledger surely has
// them. Every replica knows its own part, so that it can put it back after
// Redis lost it (see redis_sync.go: restarts are
// noticed through an epoch marker, outages fall back to local shares of each
// limit, and both end with the counters corrected from the ledger).
type Redis struct {
	c         *redis.Client
	prefix    string
	lease     time.Duration
	replica   string
	rfield    string // this replica's reservation field in budget hashes
	ufield    string // its field of settled costs the ledger may not have yet
	seq       atomic.Uint64
	log       *slog.Logger
	failOpen  bool
	fixedN    int64
	heartbeat time.Duration

	// gate is held shared by every Acquire, Release and seed while it
	// reads or writes this replica's share of the counters, and
	// exclusively by a resync, which thereby asserts exact figures.
	gate  sync.RWMutex
	epoch string // Redis's epoch as last synced (guarded by gate)
	runID string // Redis's run_id as last synced (guarded by gate)
	gen   uint64 // resync generation (guarded by gate)

	mu       sync.Mutex
	active   map[string][]string     // lease member -> concurrency keys
	budgets  map[string]*localBudget // spend key -> this replica's part
	lastSeed map[string]ledgerFigure // scope ID -> the ledger's last figure

	snaps sync.Map // scope ID -> *snapshot: the shared figures last seen

	state    sync.Mutex // guards down transitions
	down     atomic.Bool
	downAt   time.Time
	fb       atomic.Pointer[fallback]
	live     atomic.Int64 // replicas alive at the last heartbeat
	ledger   atomic.Pointer[func(context.Context) ([]BudgetSeed, error)]
	rates    atomic.Pointer[func(context.Context, time.Time) ([]RateSeed, error)]
	inflight map[string]*inflightRate // scope ID -> this replica's use the ledger may not have (mu)
	keepFrom int64                    // start of a running resync's window of finished requests, Unix ns (mu)
	resyncMu sync.Mutex
	resyncCh chan struct{} // closed when the running resync ends
	failLog  bool          // the last resync failure was logged (resyncMu)

	// Used by the one running resync only: since when (Redis ms, local
	// time) this replica is coming back to the shared counters, and the
	// restart it saw on the way, if any.
	recoverAt     int64
	recoverSince  time.Time
	sawRestart    bool
	restartReason string

	// Shares this replica holds for replicas that had not rejoined when
	// it stopped waiting for them (see "Together" in redis_sync.go):
	// spend key -> nanos, added to its reservation field; the replicas
	// announced since holdSince (Redis ms) that release them, at least
	// holdNeed others; and when they go anyway. Written by the resync
	// holding the gate exclusively.
	holds     map[string]int64
	holdSince int64
	holdNeed  int64
	holdUntil time.Time
	// holdRates is how many replicas' local shares of every RPM and TPM
	// bucket the rate seeds take out, alongside holds.
	holdRates int64

	stop chan struct{}
	done chan struct{}
}

// ledgerFigure is a budget window's spend as the ledger last said.
type ledgerFigure struct {
	window string
	nanos  int64
}

// noteSeed keeps the ledger's figure of a scope's current window.
func (r *Redis) noteSeed(scopeID, window string, nanos int64) {
	r.mu.Lock()
	r.lastSeed[scopeID] = ledgerFigure{window, nanos}
	r.mu.Unlock()
}

// seeded is the ledger's last figure of a budget window (0 if unknown).
func (r *Redis) seeded(scopeID, window string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.lastSeed[scopeID]; f.window == window {
		return f.nanos
	}
	return 0
}

// localBudget is this replica's part of one budget window's counter.
type localBudget struct {
	inflight int64         // reservations of its requests in flight
	unsynced int64         // settled costs Redis has not counted
	held     int64         // unsynced costs put into Redis at the last resync
	heldAt   time.Time     // ... and when
	ttl      time.Duration // the counter's lifetime
}

var _ Limiter = (*Redis)(nil)

// ErrUnavailable is returned by Acquire while Redis is unreachable and
// FailOpen is set: the caller decides (llmgate admits without limits).
var ErrUnavailable = errors.New("redis limiter unavailable")

// RedisOptions configures NewRedis.
type RedisOptions struct {
	// Prefix starts every key (default "llmgate:").
	Prefix string
	// LeaseTTL bounds how long a dead replica's concurrency slots stay
	// taken (default 30s).
	LeaseTTL time.Duration
	// FailOpen makes Acquire return ErrUnavailable while Redis is
	// unreachable instead of enforcing this replica's share of each limit
	// locally.
	FailOpen bool
	// Replicas is the number of replicas sharing the limits, which sets
	// each one's share while Redis is unreachable; 0 counts them through
	// heartbeats in Redis (the last count seen before the outage; 1 when
	// none was ever seen).
	Replicas int
	// Heartbeat is how often this replica announces itself in Redis and
	// checks whether Redis restarted (default 1s); while Redis is
	// unreachable it probes twice as often.
	Heartbeat time.Duration
	// Logger receives the fall-back and recovery lines.
	Logger *slog.Logger
}

// NewRedis connects to the Redis server at url (redis://host:port/db). An
// unreachable server is not an error: the limiter starts on its local
// fallback (or, with FailOpen, without limits) and joins Redis when it
// answers.
func NewRedis(ctx context.Context, url string, opt RedisOptions) (*Redis, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %w", redact.Secrets(url), err)
	}
	o.PoolSize = max(o.PoolSize, 64)
	// A limiter must notice an outage in about a second, not after
	// go-redis' default 5 s dial and read time-outs times its retries;
	// one retry still rides over a connection that died with a restart.
	if o.DialTimeout == 0 {
		o.DialTimeout = time.Second
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = time.Second
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 1
	}
	o.DialerRetries = 1
	if opt.Prefix == "" {
		opt.Prefix = "llmgate:"
	}
	if opt.LeaseTTL <= 0 {
		opt.LeaseTTL = 30 * time.Second
	}
	if opt.Heartbeat <= 0 {
		opt.Heartbeat = time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	quietClient.Do(func() { redis.SetLogger(debugLogger{opt.Logger}) })
	var b [6]byte
	_, _ = rand.Read(b[:])
	r := &Redis{c: redis.NewClient(o), prefix: opt.Prefix, lease: opt.LeaseTTL, replica: hex.EncodeToString(b[:]),
		log: opt.Logger, failOpen: opt.FailOpen, fixedN: int64(opt.Replicas), heartbeat: opt.Heartbeat,
		active: map[string][]string{}, budgets: map[string]*localBudget{}, lastSeed: map[string]ledgerFigure{}, inflight: map[string]*inflightRate{},
		stop: make(chan struct{}), done: make(chan struct{})}
	r.rfield, r.ufield = "r:"+r.replica, "u:"+r.replica
	r.live.Store(1)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = r.join(pctx)
	cancel()
	if err != nil {
		r.markDown("redis unreachable at start", fmt.Errorf("connect to redis %s: %w (is it running? check redis: in the config)", o.Addr, err))
	}
	go r.loop()
	return r, nil
}

// quietClient routes go-redis' own messages (one per failed dial, every
// probe of an outage) to debug logs once per process: the limiter says
// itself, once, when Redis goes away and when it is back.
var quietClient sync.Once

type debugLogger struct{ log *slog.Logger }

func (d debugLogger) Printf(ctx context.Context, format string, v ...any) {
	d.log.DebugContext(ctx, fmt.Sprintf(format, v...))
}

// Client exposes the Redis client (tests clean up their keys with it).
func (r *Redis) Client() *redis.Client { return r.c }

func (r *Redis) keys(s *Scope) (rate, conc, spend string) {
	return r.prefix + "rate:" + s.ID, r.prefix + "conc:" + s.ID, r.spendKey(s.ID, s.BudgetWindow)
}

// spendKey names a budget window's counter. (Before budgets were split into
// settled and reserved parts they were plain integers under "budget:";
// those are ignored and expire.)
func (r *Redis) spendKey(scopeID, window string) string {
	return r.prefix + "spend:" + scopeID + ":" + window
}

func (r *Redis) epochKey() string    { return r.prefix + "epoch" }
func (r *Redis) replicasKey() string { return r.prefix + "replicas" }

// Acquire implements Limiter. While Redis is unreachable it admits on the
// local fallback (or returns ErrUnavailable with FailOpen); when Redis has
// restarted it re-seeds first.
func (r *Redis) Acquire(ctx context.Context, req Request) (Lease, Decision, error) {
	for try := 0; ; try++ {
		r.gate.RLock()
		if r.down.Load() {
			if r.failOpen {
				r.gate.RUnlock()
				return Lease{}, Decision{}, ErrUnavailable
			}
			l, d := r.fb.Load().acquire(r, req)
			r.gate.RUnlock()
			if d.Allowed {
				r.trackAdmit(&req.Scopes, req.N, req.Tokens)
			}
			return l, d, nil
		}
		l, d, stale, err := r.acquireShared(ctx, req)
		r.gate.RUnlock()
		switch {
		case err != nil:
			// Whether the script ran is unknown: the resync that follows
			// sets this replica's reservations in Redis exactly.
			r.markDown("redis unreachable", err)
			if ctx.Err() != nil {
				return Lease{}, Decision{}, fmt.Errorf("redis limiter: %w", ctx.Err())
			}
		case !stale:
			if d.Allowed {
				r.trackAdmit(&req.Scopes, req.N, req.Tokens)
			}
			return l, d, nil
		case try >= 2:
			// Redis keeps changing under us: decide locally this once.
			r.markDown("redis keeps changing its epoch", errors.New("three epoch changes in a row"))
		default:
			_ = r.resync(ctx, "redis restarted or lost its data")
		}
	}
}

// scriptTimeout bounds one limiter script. Scripts run apart from the
// request's context: a client that leaves while a script runs must not
// lose its reply, or the reservation it made would stay in Redis.
const scriptTimeout = 2 * time.Second

func scriptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), scriptTimeout)
}

// acquireShared runs the acquire script; the caller holds the gate shared.
func (r *Redis) acquireShared(ctx context.Context, req Request) (Lease, Decision, bool, error) {
	member := r.replica + ":" + strconv.FormatUint(r.seq.Add(1), 36)
	keys := make([]string, 0, 1+3*req.N)
	args := make([]any, 0, 6+5*req.N)
	keys = append(keys, r.epochKey())
	args = append(args, r.epoch, req.Tokens, req.CostNanos, member, r.lease.Milliseconds(), r.rfield)
	var concKeys []string
	for i := 0; i < req.N; i++ {
		s := &req.Scopes[i]
		rk, ck, bk := r.keys(s)
		keys = append(keys, rk, ck, bk)
		args = append(args, s.RPM, s.TPM, s.MaxConc, s.BudgetNanos, int64(s.BudgetTTL/time.Second))
		if s.MaxConc > 0 {
			concKeys = append(concKeys, ck)
		}
	}
	if len(concKeys) > 0 {
		// Register before the script runs so the renewer never misses a
		// lease that is already in Redis.
		r.mu.Lock()
		r.active[member] = concKeys
		r.mu.Unlock()
	}
	sctx, cancel := scriptContext(ctx)
	vals, err := acquireScript.Run(sctx, r.c, keys, args...).Slice()
	cancel()
	if err == nil && len(vals) == 1 && toInt(vals[0]) == -1 {
		r.forget(member)
		return Lease{}, Decision{}, true, nil
	}
	if err != nil || len(vals) < 5+4*req.N {
		r.forget(member)
		if err == nil {
			err = fmt.Errorf("unexpected limiter reply %v", vals)
		}
		return Lease{}, Decision{}, false, err
	}
	var rl, tl [MaxScopes]float64
	for i := 0; i < req.N; i++ {
		rl[i] = parseFloat(vals[5+4*i])
		tl[i] = parseFloat(vals[6+4*i])
	}
	at := toInt(vals[4])
	d := Decision{Allowed: toInt(vals[0]) == 1}
	if !d.Allowed {
		r.forget(member)
		i := int(toInt(vals[1])) - 1
		r.remember(&req, i+1, false, at, &rl, &tl, vals[5:])
		s := &req.Scopes[i]
		d.Scope = s.ID
		switch toInt(vals[2]) {
		case 1:
			d.Limit, d.RetryAfter = LimitConcurrency, time.Second
		case 2:
			d.Limit, d.RetryAfter = LimitRequests, wait(rl[i], 1, s.RPM)
		case 3:
			need := float64(min(req.Tokens, s.TPM))
			d.Limit, d.RetryAfter = LimitTokens, wait(tl[i], need, s.TPM)
		case 4:
			d.Limit, d.BudgetNanos, d.SpentNanos = LimitBudget, s.BudgetNanos, toInt(vals[3])
		}
		// Levels of scopes after the refusing one were not read.
		fillHeaders(&d, &req, i+1, &rl, &tl)
		return Lease{}, d, false, nil
	}
	r.remember(&req, req.N, true, at, &rl, &tl, vals[5:])
	r.reserve(&req, req.CostNanos)
	fillHeaders(&d, &req, req.N, &rl, &tl)
	return Lease{Scopes: req.Scopes, N: req.N, Tokens: req.Tokens, CostNanos: req.CostNanos, member: member, gen: r.gen}, d, false, nil
}

// reserve counts an admitted request's reservation in this replica's part
// of each budget it is under.
func (r *Redis) reserve(req *Request, cost int64) {
	if cost == 0 {
		return
	}
	r.mu.Lock()
	for i := 0; i < req.N; i++ {
		if s := &req.Scopes[i]; s.BudgetNanos > 0 {
			b := r.localBudget(r.spendKey(s.ID, s.BudgetWindow), s.BudgetTTL)
			b.inflight = sat.Add(b.inflight, cost)
		}
	}
	r.mu.Unlock()
}

// localBudget returns this replica's part of a counter; r.mu is held.
func (r *Redis) localBudget(key string, ttl time.Duration) *localBudget {
	b := r.budgets[key]
	if b == nil {
		b = &localBudget{}
		r.budgets[key] = b
	}
	if ttl > 0 {
		b.ttl = ttl
	}
	return b
}

func (r *Redis) forget(member string) {
	if member == "" {
		return
	}
	r.mu.Lock()
	delete(r.active, member)
	r.mu.Unlock()
}

// Release implements Limiter. Costs that cannot reach Redis (it is down,
// or restarted since the lease was taken) are kept and added to the shared
// counter when this replica resyncs.
func (r *Redis) Release(ctx context.Context, l Lease, actualTokens, actualCostNanos int64) error {
	r.forget(l.member)
	r.trackDone(&l.Scopes, l.N, l.Tokens, actualTokens, time.Now().UnixNano())
	r.gate.RLock()
	r.settleLocal(&l)
	if l.fb != nil {
		l.fb.release(&l, actualTokens, actualCostNanos)
	}
	if r.down.Load() {
		r.unsynced(&l, actualCostNanos)
		r.gate.RUnlock()
		return nil
	}
	// A reservation is in Redis if the lease was admitted there, or if a
	// resync since its admission put it there.
	reserved := l.CostNanos
	if l.fb != nil && l.gen == r.gen {
		reserved = 0
	}
	dtok := actualTokens - l.Tokens
	if l.fb != nil {
		dtok = 0 // the shared bucket never held its estimate
	}
	keys := make([]string, 0, 1+3*l.N)
	args := make([]any, 0, 6+4*l.N)
	keys = append(keys, r.epochKey())
	args = append(args, r.epoch, dtok, actualCostNanos, reserved, l.member, r.rfield)
	for i := 0; i < l.N; i++ {
		s := &l.Scopes[i]
		rk, ck, bk := r.keys(s)
		keys = append(keys, rk, ck, bk)
		args = append(args, s.TPM, s.MaxConc, s.BudgetNanos, int64(s.BudgetTTL/time.Second))
	}
	sctx, cancel := scriptContext(ctx)
	vals, err := releaseScript.Run(sctx, r.c, keys, args...).Slice()
	cancel()
	stale := err == nil && (len(vals) < 2 || toInt(vals[0]) == -1)
	if err != nil || stale {
		r.unsynced(&l, actualCostNanos)
	} else {
		r.rememberSpent(&l, toInt(vals[1]), vals[2:])
	}
	r.gate.RUnlock()
	switch {
	case err != nil:
		// The cost waits in unsynced; whether the script ran is unknown,
		// and the resync that follows sets the shared counters exactly.
		r.markDown("redis unreachable", err)
		return nil
	case stale:
		go func() {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = r.resync(rctx, "redis restarted or lost its data")
		}()
	}
	return nil
}

// settleLocal drops a finished lease's reservation from this replica's
// parts; the gate is held shared.
func (r *Redis) settleLocal(l *Lease) {
	if l.CostNanos == 0 {
		return
	}
	r.mu.Lock()
	for i := 0; i < l.N; i++ {
		if s := &l.Scopes[i]; s.BudgetNanos > 0 {
			k := r.spendKey(s.ID, s.BudgetWindow)
			if b := r.budgets[k]; b != nil {
				b.inflight -= l.CostNanos
				r.tidy(k, b)
			}
		}
	}
	r.mu.Unlock()
}

// unsynced keeps a settled cost Redis did not count.
func (r *Redis) unsynced(l *Lease, cost int64) {
	if cost == 0 {
		return
	}
	r.mu.Lock()
	for i := 0; i < l.N; i++ {
		if s := &l.Scopes[i]; s.BudgetNanos > 0 {
			b := r.localBudget(r.spendKey(s.ID, s.BudgetWindow), s.BudgetTTL)
			b.unsynced = sat.Add(b.unsynced, cost)
		}
	}
	r.mu.Unlock()
}

// tidy forgets a part with nothing in it; r.mu is held.
func (r *Redis) tidy(k string, b *localBudget) {
	if b.inflight == 0 && b.unsynced == 0 && b.held == 0 {
		delete(r.budgets, k)
	}
}

// SeedBudget implements Limiter.
func (r *Redis) SeedBudget(ctx context.Context, scopeID, window string, nanos int64, ttl time.Duration) error {
	k := r.spendKey(scopeID, window)
	r.noteSeed(scopeID, window, nanos)
	r.gate.RLock()
	if r.down.Load() {
		if fb := r.fb.Load(); fb != nil {
			fb.seed(k, nanos)
		}
		r.gate.RUnlock()
		return nil
	}
	v, err := seedScript.Run(ctx, r.c, []string{r.epochKey(), k, r.replicasKey()},
		r.epoch, nanos, r.rfield, 0, r.ufield, 0, "0", int64(ttl/time.Second)).Int64()
	r.gate.RUnlock()
	switch {
	case err != nil && ctx.Err() == nil:
		r.markDown("redis unreachable", err)
		return nil
	case err != nil:
		return fmt.Errorf("redis limiter seed: %w", err)
	case v == -1:
		return r.resync(ctx, "redis restarted or lost its data")
	}
	return nil
}

// Spent implements Limiter. While Redis is unreachable it returns what the
// local fallback counts.
func (r *Redis) Spent(ctx context.Context, scopeID, window string) (Spend, error) {
	k := r.spendKey(scopeID, window)
	if r.down.Load() {
		if fb := r.fb.Load(); fb != nil {
			return fb.spent(r, k, scopeID, window), nil
		}
		return Spend{Settled: r.seeded(scopeID, window)}, nil
	}
	h, err := r.c.HGetAll(ctx, k).Result()
	if err != nil {
		return Spend{}, fmt.Errorf("redis limiter: %w", err)
	}
	var sp Spend
	for f, v := range h {
		n, _ := strconv.ParseInt(v, 10, 64)
		if strings.HasPrefix(f, "r:") {
			sp.Reserved += n
		} else { // "s" and "u:..."
			sp.Settled += n
		}
	}
	return sp, nil
}

// Close stops the heartbeat and lease renewal and closes the connection.
// Leases still held expire within LeaseTTL.
func (r *Redis) Close() error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
		<-r.done
	}
	return r.c.Close()
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			// A script's '%.0f' of a saturated counter is 2^63, one past
			// the int64 range: it saturates rather than wrapping negative.
			f, _ := strconv.ParseFloat(x, 64)
			return sat.FromFloat(f)
		}
		return n
	}
	return 0
}

func parseFloat(v any) float64 {
	s, _ := v.(string)
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
