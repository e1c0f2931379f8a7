package limit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis keeps limiter state in Redis so every replica enforces the same
// limits. Each Acquire and each Release is one atomic Lua script: one round
// trip. Time comes from the Redis server (TIME), so replicas' clocks do not
// matter. Concurrency slots are leases in a sorted set scored by expiry;
// this process renews its leases every LeaseTTL/3, so the slots of a
// replica that dies expire within LeaseTTL.
type Redis struct {
	c       *redis.Client
	prefix  string
	lease   time.Duration
	replica string
	seq     atomic.Uint64

	mu     sync.Mutex
	active map[string][]string // lease member -> concurrency keys
	stop   chan struct{}
	done   chan struct{}
}

var _ Limiter = (*Redis)(nil)

// RedisOptions configures NewRedis.
type RedisOptions struct {
	// Prefix starts every key (default "llmgate:").
	Prefix string
	// LeaseTTL bounds how long a dead replica's concurrency slots stay
	// taken (default 30s).
	LeaseTTL time.Duration
}

// NewRedis connects to the Redis server at url (redis://host:port/db).
func NewRedis(ctx context.Context, url string, opt RedisOptions) (*Redis, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %w", url, err)
	}
	o.PoolSize = max(o.PoolSize, 64)
	c := redis.NewClient(o)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("connect to redis %s: %w (is it running? check redis: in the config)", o.Addr, err)
	}
	if opt.Prefix == "" {
		opt.Prefix = "llmgate:"
	}
	if opt.LeaseTTL <= 0 {
		opt.LeaseTTL = 30 * time.Second
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	r := &Redis{c: c, prefix: opt.Prefix, lease: opt.LeaseTTL, replica: hex.EncodeToString(b[:]),
		active: map[string][]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	go r.renewLoop()
	return r, nil
}

// Client exposes the Redis client (tests clean up their keys with it).
func (r *Redis) Client() *redis.Client { return r.c }

func (r *Redis) keys(s *Scope) (rate, conc, budget string) {
	return r.prefix + "rate:" + s.ID, r.prefix + "conc:" + s.ID, r.prefix + "budget:" + s.ID + ":" + s.BudgetWindow
}

// acquireScript checks every scope, then takes from all of them, or
// nothing. Bucket levels are stored with the millisecond they refer to.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tokens = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local member = ARGV[3]
local lease = tonumber(ARGV[4])
local n = #KEYS / 3
local rl, tl = {}, {}
for i = 1, n do rl[i], tl[i] = 0, 0 end
local res = {1, 0, 0, 0}
for i = 1, n do
  local a = 4 + (i - 1) * 5
  local rpm, tpm, mc, budget = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4])
  local rk, ck, bk = KEYS[(i-1)*3+1], KEYS[(i-1)*3+2], KEYS[(i-1)*3+3]
  rl[i], tl[i] = 0, 0
  if rpm > 0 or tpm > 0 then
    local h = redis.call('HMGET', rk, 'r', 'rt', 't', 'tt', 'rl', 'tl')
    -- A raised limit adds its extra capacity at once; a lowered one caps.
    if rpm > 0 then
      rl[i] = rpm
      if h[1] then
        local up = math.max(0, rpm - tonumber(h[5] or rpm))
        rl[i] = math.min(rpm, tonumber(h[1]) + up + math.max(0, now - tonumber(h[2])) * rpm / 60000)
      end
    end
    if tpm > 0 then
      tl[i] = tpm
      if h[3] then
        local up = math.max(0, tpm - tonumber(h[6] or tpm))
        tl[i] = math.min(tpm, tonumber(h[3]) + up + math.max(0, now - tonumber(h[4])) * tpm / 60000)
      end
    end
  end
  local code, spent = 0, 0
  if mc > 0 then
    redis.call('ZREMRANGEBYSCORE', ck, '-inf', now)
    if redis.call('ZCARD', ck) >= mc then code = 1 end
  end
  if code == 0 and rpm > 0 and rl[i] < 1 then code = 2 end
  if code == 0 and tpm > 0 and tl[i] < math.min(tokens, tpm) then code = 3 end
  if code == 0 and budget > 0 then
    spent = tonumber(redis.call('GET', bk) or '0')
    if spent + cost > budget then code = 4 end
  end
  if code ~= 0 then
    res = {0, i, code, spent}
    break
  end
end
if res[1] == 1 then
  for i = 1, n do
    local a = 4 + (i - 1) * 5
    local rpm, tpm, mc, budget, ttl = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4]), tonumber(ARGV[a+5])
    local rk, ck, bk = KEYS[(i-1)*3+1], KEYS[(i-1)*3+2], KEYS[(i-1)*3+3]
    local ns = string.format('%.0f', now)
    if rpm > 0 then
      rl[i] = rl[i] - 1
      redis.call('HSET', rk, 'r', string.format('%.6f', rl[i]), 'rt', ns, 'rl', rpm)
    end
    if tpm > 0 then
      tl[i] = tl[i] - tokens
      redis.call('HSET', rk, 't', string.format('%.6f', tl[i]), 'tt', ns, 'tl', tpm)
    end
    if rpm > 0 or tpm > 0 then redis.call('PEXPIRE', rk, 600000) end
    if mc > 0 then
      redis.call('ZADD', ck, string.format('%.0f', now + lease), member)
      redis.call('PEXPIRE', ck, lease * 2)
    end
    if budget > 0 then
      redis.call('INCRBY', bk, cost)
      if ttl > 0 then redis.call('EXPIRE', bk, ttl) end
    end
  end
end
for i = 1, n do
  res[#res + 1] = string.format('%.6f', rl[i])
  res[#res + 1] = string.format('%.6f', tl[i])
end
return res
`)

var releaseScript = redis.NewScript(`
local dtok = tonumber(ARGV[1])
local dcost = tonumber(ARGV[2])
local member = ARGV[3]
local n = #KEYS / 3
for i = 1, n do
  local a = 3 + (i - 1) * 3
  local tpm, mc, budget = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3])
  local rk, ck, bk = KEYS[(i-1)*3+1], KEYS[(i-1)*3+2], KEYS[(i-1)*3+3]
  if mc > 0 then redis.call('ZREM', ck, member) end
  if tpm > 0 and dtok ~= 0 then
    local cur = redis.call('HGET', rk, 't')
    if cur then redis.call('HSET', rk, 't', string.format('%.6f', math.min(tpm, tonumber(cur) - dtok))) end
  end
  if budget > 0 and dcost ~= 0 and redis.call('EXISTS', bk) == 1 then
    redis.call('INCRBY', bk, dcost)
  end
end
return 1
`)

var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = string.format('%.0f', now + tonumber(ARGV[1]))
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', exp, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]) * 2)
end
return 1
`)

// Acquire implements Limiter.
func (r *Redis) Acquire(ctx context.Context, req Request) (Lease, Decision, error) {
	member := r.replica + ":" + strconv.FormatUint(r.seq.Add(1), 36)
	keys := make([]string, 0, 3*req.N)
	args := make([]any, 0, 4+5*req.N)
	args = append(args, req.Tokens, req.CostMicros, member, r.lease.Milliseconds())
	var concKeys []string
	for i := 0; i < req.N; i++ {
		s := &req.Scopes[i]
		rk, ck, bk := r.keys(s)
		keys = append(keys, rk, ck, bk)
		args = append(args, s.RPM, s.TPM, s.MaxConc, s.BudgetMicros, int64(s.BudgetTTL/time.Second))
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
	vals, err := acquireScript.Run(ctx, r.c, keys, args...).Slice()
	if err != nil || len(vals) < 4+2*req.N {
		r.forget(member)
		if err == nil {
			err = fmt.Errorf("unexpected limiter reply %v", vals)
		}
		return Lease{}, Decision{}, fmt.Errorf("redis limiter: %w", err)
	}
	var rl, tl [MaxScopes]float64
	for i := 0; i < req.N; i++ {
		rl[i] = parseFloat(vals[4+2*i])
		tl[i] = parseFloat(vals[5+2*i])
	}
	d := Decision{Allowed: toInt(vals[0]) == 1}
	if !d.Allowed {
		r.forget(member)
		i := int(toInt(vals[1])) - 1
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
			d.Limit, d.BudgetMicros, d.SpentMicros = LimitBudget, s.BudgetMicros, toInt(vals[3])
		}
		// Levels of scopes after the refusing one were not read.
		fillHeaders(&d, &req, i+1, &rl, &tl)
		return Lease{}, d, nil
	}
	fillHeaders(&d, &req, req.N, &rl, &tl)
	return Lease{Scopes: req.Scopes, N: req.N, Tokens: req.Tokens, CostMicros: req.CostMicros, member: member}, d, nil
}

func (r *Redis) forget(member string) {
	r.mu.Lock()
	delete(r.active, member)
	r.mu.Unlock()
}

// Release implements Limiter.
func (r *Redis) Release(ctx context.Context, l Lease, actualTokens, actualCostMicros int64) error {
	r.forget(l.member)
	keys := make([]string, 0, 3*l.N)
	args := make([]any, 0, 3+3*l.N)
	args = append(args, actualTokens-l.Tokens, actualCostMicros-l.CostMicros, l.member)
	for i := 0; i < l.N; i++ {
		s := &l.Scopes[i]
		rk, ck, bk := r.keys(s)
		keys = append(keys, rk, ck, bk)
		args = append(args, s.TPM, s.MaxConc, s.BudgetMicros)
	}
	if err := releaseScript.Run(ctx, r.c, keys, args...).Err(); err != nil {
		return fmt.Errorf("redis limiter release: %w", err)
	}
	return nil
}

// SeedBudget implements Limiter.
func (r *Redis) SeedBudget(ctx context.Context, scopeID, window string, micros int64, ttl time.Duration) error {
	s := Scope{ID: scopeID, BudgetWindow: window}
	_, _, bk := r.keys(&s)
	if ttl > 0 {
		return r.c.SetNX(ctx, bk, micros, ttl).Err()
	}
	return r.c.SetNX(ctx, bk, micros, 0).Err()
}

// Spent implements Limiter.
func (r *Redis) Spent(ctx context.Context, scopeID, window string) (int64, error) {
	s := Scope{ID: scopeID, BudgetWindow: window}
	_, _, bk := r.keys(&s)
	v, err := r.c.Get(ctx, bk).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return v, err
}

func (r *Redis) renewLoop() {
	defer close(r.done)
	t := time.NewTicker(r.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		var keys []string
		args := []any{r.lease.Milliseconds()}
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
			_ = renewScript.Run(ctx, r.c, keys[start:end], append([]any{args[0]}, args[1+start:1+end]...)...).Err()
			cancel()
		}
	}
}

// Close stops lease renewal and closes the connection. Leases still held
// expire within LeaseTTL.
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
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func parseFloat(v any) float64 {
	s, _ := v.(string)
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
