package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/fairq"
)

// Attempt sends the request to one deployment. committed reports whether
// anything reached the client (after which no retry is possible); err is
// the failure, an *apierror.Error when it should reach the client as is.
type Attempt func(ctx context.Context, dep Deployment) (committed bool, err error)

// maxAttempts bounds the deployments one request may try, so that a model
// with many deployments and fallbacks cannot hold a client for long.
const maxAttempts = 8

// Forward runs attempt against the route's deployments until one serves
// the request. A failure before anything reached the client (connection
// refused, time-out, 429, 5xx) moves on to the next healthy deployment
// after a short backoff, then to the model's fallbacks in order; a 4xx the
// request caused, a client that went away, or a failure after the first
// byte ends the request. The error returned is the one the client should
// see when nothing served it.
func (t *Table) Forward(ctx context.Context, route *Route, attempt Attempt) error {
	return t.ForwardHint(ctx, route, Hint{}, attempt)
}

// ForwardHint is Forward for a request whose prefix hashes or session key
// the route's balancing reads (Route.WantsPrefix, Route.WantsSession). A
// hint that Pick filled in has the deployment Pick named tried first.
func (t *Table) ForwardHint(ctx context.Context, route *Route, hint Hint, attempt Attempt) error {
	fallbacks := route.fallbacks
	var gate FallbackGate
	if len(fallbacks) > 0 {
		if p, ok := ctx.Value(fallbacksKey{}).(Fallbacks); ok {
			if p.Cut {
				fallbacks = p.Routes
			}
			gate = p.Gate
		}
	}
	if len(route.Deployments) == 1 && len(fallbacks) == 0 {
		// The common single-deployment route: no ordering, no retries.
		d := route.Deployments[0]
		ok, probe := d.s.allow(ctx, t.opt.Now())
		if !ok {
			return t.unavailable(route, fallbacks)
		}
		slot, err := t.admit(ctx, route, d, nil, nil)
		if err != nil {
			t.unprobe(d, probe)
			return err
		}
		_, err, _ = t.try(ctx, route, d, probe, &hint, slot, attempt)
		return err
	}
	var (
		buf      [maxAttempts]int
		attempts int
		lastErr  error
		gateErr  error               // the last refusal of a fallback model's gate
		tried    [maxAttempts]string // backend names and codes, formatted only on failure
		codes    [maxAttempts]string
	)
routes:
	for ri := -1; ri < len(fallbacks); ri++ {
		r := route
		gated := ri < 0 || gate == nil
		if ri >= 0 {
			r = fallbacks[ri]
			if attempts > 0 {
				t.log().Info("every deployment failed; trying the fallback model", "model", route.Model, "fallback", r.Model, "attempts", attempts)
			}
		}
		order := t.order(r, buf[:0], &hint)
		t.roomFirst(r, order)
		if ri < 0 && hint.first > 0 && hint.first <= len(r.Deployments) {
			putFirst(order, hint.first-1) // the deployment Pick named
		}
		switches := 0
		for k := 0; k < len(order); k++ {
			if attempts == maxAttempts {
				break
			}
			d := r.Deployments[order[k]]
			ok, probe := d.s.allow(ctx, t.opt.Now())
			if !ok {
				continue
			}
			if !gated {
				// The fallback model's own limits, asked once, before its
				// first deployment that may be tried.
				if err := gate(ctx, r); err != nil {
					t.unprobe(d, probe)
					t.log().Info("fallback model refused the request: skipping it", "model", route.Model, "fallback", r.Model, "err", err)
					gateErr, lastErr = err, err
					continue routes
				}
				gated = true
			}
			if attempts > 0 {
				if err := t.backoff(ctx, attempts); err != nil {
					t.unprobe(d, probe)
					return lastErr
				}
			}
			// A full deployment is waited for in its fair queue, but
			// only when no equal one (later in the group) has a free
			// slot now: another request may have taken the one
			// roomFirst saw. A request that waited its queue_timeout,
			// or whose client left, ends here: it has had its wait.
			elsewhere := func() bool {
				if switches >= maxAttempts {
					return false
				}
				j := t.roomier(r, order, k)
				if j < 0 {
					return false
				}
				order[k], order[j] = order[j], order[k]
				switches++
				return true
			}
			peers := func() []*fairq.Queue { return t.peerQueues(r, order, k) }
			slot, err := t.admit(ctx, r, d, elsewhere, peers)
			if err == errElsewhere {
				t.unprobe(d, probe)
				k-- // try the deployment swapped into this place
				continue
			}
			if err != nil {
				t.unprobe(d, probe)
				return err
			}
			committed, err, retry := t.try(ctx, r, d, probe, &hint, slot, attempt)
			tried[attempts], codes[attempts] = d.Backend.Name, errCode(err)
			attempts++
			if err == nil || committed || !retry {
				return err
			}
			lastErr = err
		}
	}
	if attempts == 0 {
		if gateErr != nil {
			// Nothing was tried but a fallback that its own limits
			// refused: that refusal says when to come back.
			return gateErr
		}
		return t.unavailable(route, fallbacks)
	}
	if attempts == 1 && gateErr == nil {
		return lastErr
	}
	return exhausted(route, lastErr, tried[:attempts], codes[:attempts])
}

// FallbackGate is asked before a request's first attempt at a deployment
// of a fallback model r: nil lets it on; an error (the fallback model's
// own limits refuse it) skips that fallback model, and is the error the
// client sees when nothing serves the request after it.
type FallbackGate func(ctx context.Context, r *Route) error

// Fallbacks is how one request may fall back.
type Fallbacks struct {
	// Cut says the request may fall back only to Routes, a subset of the
	// route's (those the key's model allow-list names: a key must not
	// reach, by failing its own model, one it may not name).
	Cut    bool
	Routes []*Route
	// Gate, when set, admits the request to each fallback model.
	Gate FallbackGate
}

type fallbacksKey struct{}

// WithFallbacks returns ctx for a Forward whose request falls back as p
// says.
func WithFallbacks(ctx context.Context, p Fallbacks) context.Context {
	return context.WithValue(ctx, fallbacksKey{}, p)
}

// unprobe gives back a half-open breaker's probe that was not used.
func (t *Table) unprobe(d Deployment, probe bool) {
	if probe {
		d.s.br.record(t.opt.Now(), outcomeNeutral, 0, "")
	}
}

// try runs one attempt holding slot (nil: the deployment has no queue)
// and settles the deployment's breaker. retry reports whether another
// deployment may be tried. The slot and the counts of requests in flight
// are given back on every path, a panic in the attempt included.
func (t *Table) try(ctx context.Context, r *Route, d Deployment, probe bool, hint *Hint, slot *fairq.Slot, attempt Attempt) (committed bool, err error, retry bool) {
	if len(hint.Prefix) > 0 && r.WantsPrefix() {
		d.prefixHeld = t.remember(d, hint.Prefix)
	}
	committed, err = t.run(ctx, d, slot, attempt)
	o, retryAfter := classify(ctx, err)
	if o == outcomeSuccess && !probe && err == nil && d.s.br.fastSuccess(t.opt.Now()) {
		return committed, nil, false
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	from, to := d.s.br.record(t.opt.Now(), o, retryAfter, msg)
	if to != "" {
		t.logTransition(r, d, from, to, msg)
	}
	retry = !committed && (o == outcomeFailure || o == outcomeTimeout || o == outcomeRefused || o == outcomeRateLimited)
	return committed, err, retry
}

// run is the attempt between taking and giving back its place.
func (t *Table) run(ctx context.Context, d Deployment, slot *fairq.Slot, attempt Attempt) (bool, error) {
	d.s.outstanding.Add(1)
	d.s.be.inflight.Add(1)
	defer func() {
		d.s.be.inflight.Add(-1)
		d.s.outstanding.Add(-1)
		slot.Release()
	}()
	if slot != nil {
		ctx = context.WithValue(ctx, slotKey{}, slot)
	}
	return attempt(ctx, d)
}

// classify turns an attempt's error into a breaker outcome.
func classify(ctx context.Context, err error) (outcome, time.Duration) {
	if err == nil {
		return outcomeSuccess, 0
	}
	if ctx.Err() != nil {
		return outcomeNeutral, 0
	}
	e := apierror.From(err)
	switch {
	case errors.Is(e, apierror.ErrClientClosed) || e.Kind == apierror.KindClientClosed:
		return outcomeNeutral, 0
	case e.Kind == apierror.KindRateLimit || e.Status == http.StatusTooManyRequests:
		return outcomeRateLimited, retryAfter(e.Header)
	case e.Kind == apierror.KindTimeout || e.Status == http.StatusGatewayTimeout:
		return outcomeTimeout, 0
	case errors.Is(err, syscall.ECONNREFUSED):
		return outcomeRefused, 0
	case e.Status >= 400 && e.Status < 500:
		// The request itself was refused (context too long, bad
		// parameter): the deployment is healthy and another would refuse
		// it too.
		return outcomeSuccess, 0
	}
	return outcomeFailure, 0
}

// retryAfter reads Retry-After as seconds or an HTTP date.
func retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && !math.IsInf(s, 0) {
		return time.Duration(s * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil {
		return time.Until(at)
	}
	return 0
}

// backoff pauses before attempt n+1: base·2^(n-1), plus up to half again as
// jitter so that many failed requests do not retry in lockstep.
func (t *Table) backoff(ctx context.Context, n int) error {
	d := t.opt.Backoff << min(n-1, 4)
	d += time.Duration(rand.Int64N(int64(d)/2 + 1))
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// unavailable is the answer when no deployment of the model (or its
// fallbacks) may be tried now: 503 with Retry-After at the earliest time one
// will be.
func (t *Table) unavailable(route *Route, fallbacks []*Route) error {
	now := t.opt.Now()
	var soonest time.Time
	var why []string
	onlyRateLimited := true
	routes := append([]*Route{route}, fallbacks...)
	for _, r := range routes {
		for _, d := range r.Deployments {
			at := d.s.readyAt(now)
			if !at.IsZero() && (soonest.IsZero() || at.Before(soonest)) {
				soonest = at
			}
			reason, limited := t.reason(d, now)
			onlyRateLimited = onlyRateLimited && limited
			why = append(why, reason)
		}
	}
	e := apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "no_healthy_deployment",
		"model %q has no healthy deployment right now (%s); retry shortly, or see GET /v1/models?health=1",
		route.Model, strings.Join(why, "; "))
	if onlyRateLimited {
		// Every deployment asked us to wait: that is a rate limit, and
		// clients handle 429 with Retry-After best.
		e.Status, e.Kind, e.Code = http.StatusTooManyRequests, apierror.KindRateLimit, "backend_rate_limited"
	}
	secs := 1
	if !soonest.IsZero() {
		secs = max(1, int(math.Ceil(soonest.Sub(now).Seconds())))
	}
	e.Header = http.Header{"Retry-After": {strconv.Itoa(secs)}}
	return e
}

// reason says in a few words why a deployment is not taking requests, and
// whether that is only a rate limit.
func (t *Table) reason(d Deployment, now time.Time) (string, bool) {
	name := d.Backend.Name + "/" + d.UpstreamModel
	if d.Backend.Unavailable != "" {
		return name + ": " + d.Backend.Unavailable, false
	}
	if d.s.be.down.Load() {
		d.s.be.checkMu.Lock()
		defer d.s.be.checkMu.Unlock()
		return fmt.Sprintf("%s: failing health checks (%s)", name, d.s.be.checkErr), false
	}
	if _, awaits := d.s.br.awaitsListener(now); awaits {
		return fmt.Sprintf("%s: connections to %s were refused: is the engine running? It is taken back at the first request after it serves again (checked at most four times a second)",
			name, d.Backend.BaseURL), false
	}
	st := d.s.br.status(now)
	switch {
	case st.State == StateOpen && st.OpenFor > 0:
		return fmt.Sprintf("%s: circuit open for %s more after repeated failures", name, st.OpenFor.Round(time.Second)), false
	case st.RestingFor > 0:
		return fmt.Sprintf("%s: rate limited for %s more", name, st.RestingFor.Round(time.Second)), true
	case st.State == StateHalfOpen || st.State == StateOpen:
		return name + ": being probed after failures", false
	}
	return name + ": healthy", false
}

// exhausted is the error after several deployments failed: the last
// failure's status and headers (a 429 keeps its Retry-After), with the
// trail of what was tried.
func exhausted(route *Route, last error, tried, codes []string) error {
	e := apierror.From(last)
	out := *e
	trail := make([]string, len(tried))
	for i := range tried {
		trail[i] = tried[i] + ": " + codes[i]
	}
	out.Message = fmt.Sprintf("model %q: all %d attempts failed (%s); last: %s", route.Model, len(trail), strings.Join(trail, ", "), e.Message)
	return &out
}

func errCode(err error) string {
	if err == nil {
		return "ok"
	}
	return apierror.From(err).Code
}

func (t *Table) logTransition(r *Route, d Deployment, from, to, msg string) {
	log := t.log()
	attrs := []any{"model", r.Model, "backend", d.Backend.Name, "upstream_model", d.UpstreamModel, "from", from, "to", to}
	switch to {
	case StateOpen:
		st := d.s.br.status(t.opt.Now())
		log.Warn("deployment circuit opened: skipping it", append(attrs, "for", st.OpenFor.Round(time.Millisecond), "penalty", st.Penalty, "last_error", msg)...)
	case StateClosed:
		log.Info("deployment circuit closed: probe succeeded", attrs...)
	default:
		log.Info("deployment circuit state", attrs...)
	}
}
