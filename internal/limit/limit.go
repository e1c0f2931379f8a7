// Package limit enforces per-key and per-model limits: requests per minute
// (RPM), tokens per minute (TPM), concurrent requests, and spend budgets.
// Two implementations share one interface and one test suite: Memory for a
// single process and Redis for replicas that must share their counters.
//
// Rates are token buckets ("GCRA"-style continuous refill): a limit of N per
// minute is a bucket of N that refills at N/60 per second. A burst may use
// the whole bucket at once; after that requests pass at the refill rate. In
// any window of length T the bucket admits at most N + N*T/60, so within a
// minute never more than twice the limit and, for a burst shorter than a
// second, at most N+1 - unlike fixed windows, which admit 2N across a window
// boundary in an instant.
//
// TPM reserves the request's estimated tokens at admission and corrects by
// the real count at release; a bucket may go into debt, which delays later
// requests. Concurrency is a count of slots (in Redis: leases that expire
// unless renewed, so a crashed replica's slots free themselves).
//
// Budgets count nano-USD in two parts: settled spend (what finished requests
// cost) and reservations of requests in flight. A request is admitted only
// if settled + reserved + its own reservation fits under the budget. Settled
// spend is also known to the usage ledger, which is the durable record: a
// counter that is missing or behind the ledger (a fresh process, a Redis that
// restarted empty) is raised to the ledger's figure by SeedBudget, and the
// larger of the two always wins, so no seeding ever lowers what is counted.
// Nano-USD make a counter's sum equal the ledger's sum of float costs for
// prices with up to three decimals per million tokens (see NanosPerUSD).
package limit

import (
	"context"
	"time"
)

// MaxScopes is the number of scopes one request can be checked against
// (the key's and the model's).
const MaxScopes = 2

// Scope is one set of limits: a key's or a model's. Zero means unlimited.
type Scope struct {
	// ID names the counters, such as "key:key_abc" or "model:qwen".
	ID      string
	RPM     int64
	TPM     int64
	MaxConc int64
	// BudgetNanos is the budget in nano-USD; 0 = none.
	BudgetNanos int64
	// BudgetWindow names the current budget period ("d2026-11-30",
	// "m2026-11", "all"); a new window starts from zero.
	BudgetWindow string
	// BudgetTTL is how long the window's counter must live (until the
	// period ends, plus slack); 0 = forever.
	BudgetTTL time.Duration
}

// Request is what one API request asks of the limiter. Scopes[:N] are
// checked together: all pass or nothing is taken.
type Request struct {
	Scopes [MaxScopes]Scope
	N      int
	// Tokens is the estimated token count (prompt + expected output).
	Tokens int64
	// CostNanos is the estimated cost reserved against budgets.
	CostNanos int64
}

// NanosPerUSD converts USD to the budget counters' unit.
const NanosPerUSD = 1e9

// Limits named in refusals.
const (
	LimitRequests    = "requests per minute"
	LimitTokens      = "tokens per minute"
	LimitConcurrency = "concurrent requests"
	LimitBudget      = "budget"
)

// Decision is the outcome of Acquire and the figures for OpenAI's
// x-ratelimit-* headers, on refusals and admissions alike: for requests
// and for tokens, those of the scope with the least left, as of this
// decision (after taking this request when it was admitted). Zero limits
// mean no scope has that rate limit.
type Decision struct {
	Allowed bool
	// Scope and Limit name what refused the request.
	Scope string
	Limit string
	// RetryAfter is when a retry can pass (0 = unknown, as for budgets
	// that never reset).
	RetryAfter time.Duration
	// BudgetNanos and SpentNanos describe a budget refusal (spent includes
	// reservations in flight).
	BudgetNanos, SpentNanos int64

	LimitRequests, RemainingRequests int64
	ResetRequests                    time.Duration
	LimitTokens, RemainingTokens     int64
	ResetTokens                      time.Duration
}

// Lease is an admitted request's hold on the limiter; pass it to Release.
type Lease struct {
	Scopes    [MaxScopes]Scope
	N         int
	Tokens    int64
	CostNanos int64
	// member identifies a lease in Redis (its concurrency slots and its
	// share of the replica's reservations).
	member string
	// fb is the local fallback that admitted the lease while Redis was
	// unreachable, and gen the resync generation it was admitted in.
	fb  *fallback
	gen uint64
}

// Spend is a budget window's spend in nano-USD.
type Spend struct {
	// Settled is what finished requests cost (at least the ledger's figure
	// once seeded).
	Settled int64
	// Reserved is held by requests in flight: their estimates until they
	// finish.
	Reserved int64
}

// BudgetSeed is the ledger's spend of one budget window, for SeedBudget.
type BudgetSeed struct {
	ScopeID, Window string
	Nanos           int64
	// TTL is how long the window's counter must live; 0 = forever.
	TTL time.Duration
	// BudgetNanos is the budget itself (0 = unknown), which sets what a
	// replica on its local share may still spend.
	BudgetNanos int64
}

// Limiter checks and takes capacity.
type Limiter interface {
	// Acquire checks every scope of req and, if all pass, takes a request,
	// the estimated tokens, a concurrency slot and the cost reservation.
	Acquire(ctx context.Context, req Request) (Lease, Decision, error)
	// Release frees the concurrency slot, corrects the token bucket from
	// the estimate to the actual count, and settles the budget: the
	// reservation is dropped and the actual cost added to settled spend.
	Release(ctx context.Context, l Lease, actualTokens, actualCostNanos int64) error
	// SeedBudget raises a budget window's settled spend to nanos (the
	// ledger's figure) when it counts less; the larger value wins, and
	// reservations in flight are kept.
	SeedBudget(ctx context.Context, scopeID, window string, nanos int64, ttl time.Duration) error
	// Spent returns a budget window's settled spend and reservations.
	Spent(ctx context.Context, scopeID, window string) (Spend, error)
	Close() error
}

// bucket is token-bucket arithmetic shared by both implementations' tests
// and by Memory: level after refill at now (ns).
func refill(level float64, last, now int64, limit int64) float64 {
	if now > last {
		level += float64(now-last) * float64(limit) / float64(time.Minute)
	}
	return min(level, float64(limit))
}

// raised returns the capacity a raised limit adds at once: raising a
// limit takes effect immediately, lowering it caps the bucket at the new
// size (refill clamps).
func raised(old, now int64) float64 {
	if old > 0 && now > old {
		return float64(now - old)
	}
	return 0
}

// wait returns how long until a bucket at level holds need.
func wait(level, need float64, limit int64) time.Duration {
	if level >= need || limit <= 0 {
		return 0
	}
	return time.Duration((need - level) * float64(time.Minute) / float64(limit))
}
