package router

import (
	"math"
	"sync"
	"time"

	"llmgate/internal/config"
)

// BreakerConfig tunes the passive circuit breaker kept per deployment.
type BreakerConfig struct {
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row (a time-out counts TimeoutWeight).
	ConsecutiveFailures float64
	// FailureRate opens the breaker when the recent failure share reaches
	// it, once at least MinVolume recent requests were seen.
	FailureRate float64
	MinVolume   float64
	// HalfLife is how fast recent counts fade: a failure HalfLife ago
	// weighs half as much as one now.
	HalfLife time.Duration
	// OpenBase is the first open period; each trip within PenaltyDecay of
	// the last doubles it up to OpenMax, and every PenaltyDecay without a
	// trip forgives one doubling.
	OpenBase     time.Duration
	OpenMax      time.Duration
	PenaltyDecay time.Duration
	// TimeoutWeight is what a time-out counts as failure: a slow backend is
	// busy rather than broken, so it is taken out more reluctantly.
	TimeoutWeight float64
	// RateLimitDefault is how long a deployment rests after a 429 without
	// Retry-After; RateLimitMax caps any Retry-After.
	RateLimitDefault time.Duration
	RateLimitMax     time.Duration
}

// DefaultBreaker is the breaker used when Options leave it zero.
var DefaultBreaker = BreakerConfig{
	ConsecutiveFailures: 5,
	FailureRate:         0.5,
	MinVolume:           10,
	HalfLife:            30 * time.Second,
	OpenBase:            5 * time.Second,
	OpenMax:             2 * time.Minute,
	PenaltyDecay:        time.Minute,
	TimeoutWeight:       0.5,
	RateLimitDefault:    time.Second,
	RateLimitMax:        time.Minute,
}

// BreakerFromConfig is DefaultBreaker with the configured settings
// (routing.circuit_breaker) laid over it.
func BreakerFromConfig(c config.CircuitBreaker) BreakerConfig {
	b := DefaultBreaker
	if c.Enabled != nil && !*c.Enabled {
		// Never opens for failures; 429 rests still apply.
		b.ConsecutiveFailures = math.Inf(1)
		b.FailureRate = math.Inf(1)
		return b
	}
	setF := func(dst *float64, v float64) {
		if v > 0 {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v config.Duration) {
		if v > 0 {
			*dst = time.Duration(v)
		}
	}
	setF(&b.ConsecutiveFailures, c.ConsecutiveFailures)
	setF(&b.FailureRate, c.FailureRate)
	setF(&b.MinVolume, c.MinRequests)
	setD(&b.HalfLife, c.HalfLife)
	setD(&b.OpenBase, c.OpenFor)
	setD(&b.OpenMax, c.OpenMax)
	setD(&b.RateLimitDefault, c.RateLimitWait)
	setD(&b.RateLimitMax, c.RateLimitMax)
	if c.TimeoutWeight != nil {
		b.TimeoutWeight = *c.TimeoutWeight
	}
	b.OpenMax = max(b.OpenMax, b.OpenBase)
	return b
}

// Breaker states.
const (
	StateClosed   = "closed"
	StateOpen     = "open"
	StateHalfOpen = "half_open"
)

// outcome classifies an attempt for the breaker.
type outcome int

const (
	outcomeSuccess     outcome = iota // the deployment answered (even a 4xx the request caused)
	outcomeFailure                    // connection error, 5xx, broken stream
	outcomeTimeout                    // no answer in time
	outcomeRateLimited                // 429
	outcomeNeutral                    // says nothing about the deployment (client went away)
	outcomeRefused                    // a failure: the connection was refused (nothing listens there)
)

// breaker is the health state of one deployment. All methods take the
// current time so tests can drive it with a fake clock.
type breaker struct {
	cfg *BreakerConfig

	mu          sync.Mutex
	state       string
	consecutive float64
	fails       float64 // exponentially decayed counts
	total       float64
	decayedAt   time.Time
	openUntil   time.Time
	level       int // penalty doublings
	lastTrip    time.Time
	probing     bool
	restUntil   time.Time // 429 cool-down
	trips       int
	lastErr     string
	lastErrAt   time.Time
	// refused: the last failure was a refused connection. An engine
	// that is not running refuses connections until it is started
	// again; once something serves there the open period may end early
	// (listening).
	refused bool
}

func newBreaker(cfg *BreakerConfig) *breaker { return &breaker{cfg: cfg, state: StateClosed} }

// allow reports whether a request may go to the deployment now. In the
// half-open state one probe at a time is let through; probe reports it, and
// the caller must settle it with record.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok, probe = b.check(now)
	if probe && b.state == StateOpen {
		b.state = StateHalfOpen // the open period is over
	}
	if ok && probe {
		b.probing = true
	}
	return ok, ok && probe
}

// peek is allow without its effects: whether a request may go to the
// deployment now, and whether it would be the half-open probe. It takes
// no probe, so nothing needs to be given back.
func (b *breaker) peek(now time.Time) (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.check(now)
}

// check is the decision of allow and peek, with mu held: whether a request
// may go now, and whether it is past the open period (the request would
// be the half-open probe, and ok says no other probe is out).
func (b *breaker) check(now time.Time) (ok, probe bool) {
	if now.Before(b.restUntil) {
		return false, false
	}
	switch b.state {
	case StateClosed:
		return true, false
	case StateOpen:
		if now.Before(b.openUntil) {
			return false, false
		}
	}
	return !b.probing, true
}

// record settles an attempt. It returns the state transition, if any, for
// logging ("" when the state did not change).
func (b *breaker) record(now time.Time, o outcome, retryAfter time.Duration, errMsg string) (from, to string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from = b.state
	b.decay(now)
	switch o {
	case outcomeNeutral:
		b.probing = false
		return "", ""
	case outcomeRateLimited:
		if retryAfter <= 0 {
			retryAfter = b.cfg.RateLimitDefault
		}
		retryAfter = min(retryAfter, b.cfg.RateLimitMax)
		b.restUntil = now.Add(retryAfter)
		b.probing = false // inconclusive: the next probe decides
		b.lastErr, b.lastErrAt = errMsg, now
		return "", ""
	case outcomeSuccess:
		b.total++
		b.consecutive = 0
		b.refused = false
		if b.state == StateHalfOpen {
			b.state = StateClosed
			b.probing = false
			b.fails, b.total = 0, 0
		}
	case outcomeFailure, outcomeTimeout, outcomeRefused:
		w := 1.0
		if o == outcomeTimeout {
			w = b.cfg.TimeoutWeight
		}
		b.refused = o == outcomeRefused
		b.total++
		b.fails += w
		b.consecutive += w
		b.lastErr, b.lastErrAt = errMsg, now
		if b.state == StateHalfOpen ||
			b.consecutive >= b.cfg.ConsecutiveFailures ||
			(b.total >= b.cfg.MinVolume && b.fails >= b.cfg.FailureRate*b.total) {
			b.trip(now)
		}
	}
	if b.state != from {
		return from, b.state
	}
	return "", ""
}

// trip opens the breaker for a period that doubles with each recent trip.
func (b *breaker) trip(now time.Time) {
	b.level = b.penalty(now) + 1
	d := b.cfg.OpenBase << (b.level - 1)
	if d <= 0 || d > b.cfg.OpenMax {
		d = b.cfg.OpenMax
	}
	b.state = StateOpen
	b.openUntil = now.Add(d)
	b.lastTrip = now
	b.probing = false
	b.consecutive, b.fails, b.total = 0, 0, 0
	b.trips++
}

// awaitsListener reports whether the breaker is open, its open period
// not over, because connections were refused: since when (the trip) if
// so.
func (b *breaker) awaitsListener(now time.Time) (since time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != StateOpen || !b.refused || !now.Before(b.openUntil) {
		return time.Time{}, false
	}
	return b.lastTrip, true
}

// listening ends the open period of a breaker that awaits a listener:
// something serves at the backend's address again (an engine that was
// restarted), so the next request is the half-open probe instead of
// waiting out a period that grows with each trip. The trip's penalty is
// kept: if the probe fails, the next open period is longer. servingAt is
// when the backend was seen serving: a trip after it is not ended by it.
func (b *breaker) listening(now, servingAt time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == StateOpen && b.refused && !b.lastTrip.After(servingAt) {
		b.openUntil = now
	}
}

// penalty is the number of doublings still owed, after forgiving one per
// PenaltyDecay since the last trip.
func (b *breaker) penalty(now time.Time) int {
	if b.level == 0 || b.cfg.PenaltyDecay <= 0 {
		return b.level
	}
	forgiven := int(now.Sub(b.lastTrip) / b.cfg.PenaltyDecay)
	return max(0, b.level-forgiven)
}

// decay fades the recent counts by the time since the last update.
func (b *breaker) decay(now time.Time) {
	if b.decayedAt.IsZero() || b.cfg.HalfLife <= 0 {
		b.decayedAt = now
		return
	}
	dt := now.Sub(b.decayedAt)
	if dt <= 0 {
		return
	}
	f := math.Exp2(-float64(dt) / float64(b.cfg.HalfLife))
	b.fails *= f
	b.total *= f
	b.decayedAt = now
}

// BreakerStatus is a snapshot of a deployment's breaker for display.
type BreakerStatus struct {
	State string `json:"state"`
	// RestingFor is the time left in a 429 cool-down.
	RestingFor time.Duration `json:"-"`
	// OpenFor is the time left before a half-open probe.
	OpenFor     time.Duration `json:"-"`
	Penalty     int           `json:"penalty"`
	Consecutive float64       `json:"consecutive_failures"`
	FailureRate float64       `json:"failure_rate"`
	Trips       int           `json:"trips"`
	LastError   string        `json:"last_error,omitempty"`
	LastErrorAt time.Time     `json:"last_error_at,omitzero"`
}

func (b *breaker) status(now time.Time) BreakerStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.decay(now)
	st := BreakerStatus{State: b.state, Penalty: b.penalty(now), Consecutive: b.consecutive, Trips: b.trips,
		LastError: b.lastErr, LastErrorAt: b.lastErrAt}
	if b.state == StateOpen && !now.Before(b.openUntil) {
		st.State = StateHalfOpen
	}
	if b.state == StateOpen && now.Before(b.openUntil) {
		st.OpenFor = b.openUntil.Sub(now)
	}
	if now.Before(b.restUntil) {
		st.RestingFor = b.restUntil.Sub(now)
	}
	if b.total > 0 {
		st.FailureRate = b.fails / b.total
	}
	return st
}

// readyAt is when the deployment may next be tried (zero if now).
func (b *breaker) readyAt(now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.restUntil
	if b.state == StateOpen && b.openUntil.After(t) {
		t = b.openUntil
	}
	if !t.After(now) {
		return time.Time{}
	}
	return t
}

// fastSuccess settles a success without the bookkeeping when there is
// nothing to update but the decayed volume: the breaker is closed, there
// is no failure streak and no recent failure. It keeps the hot path of a
// healthy deployment to one uncontended lock.
func (b *breaker) fastSuccess(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != StateClosed || b.consecutive != 0 {
		return false
	}
	b.decay(now)
	b.total++
	return true
}
