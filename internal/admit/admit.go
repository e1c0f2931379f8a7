// Package admit decides whether a request may proceed: per-key and
// per-model rate limits, concurrency and budgets, on a limit.Limiter (in
// memory, or Redis shared by replicas). It implements policy.Admission.
//
// Budgets are enforced under concurrency by reservation: before the call,
// the request's cost is estimated from the gateway's decoded reading of it
// (prompt bytes / 4 tokens, plus the most output the backend may produce:
// the largest token-limit alias times the choices, what the model's
// context leaves when none is set, or DefaultOutputTokens when that is
// unknown too) and reserved against the key's budget; a request is admitted only while
// settled spend + reservations in flight + its own estimate fit the budget.
// After the call, the reservation is replaced by the real cost. Spend can
// therefore exceed a budget only by what admitted requests cost beyond
// their estimates: overspend <= sum over requests in flight when the budget
// ran out of max(0, actual cost - reserved estimate). A request that sets
// an output limit cannot produce more output than reserved, so only a
// prompt whose tokens outnumber its bytes/4 (or an unbounded request on a
// model of unknown context) can overrun.
//
// A model's fallbacks may serve its requests, at their own prices: the
// record is priced by the model that served (the record's ServedModel,
// which Ticket.Done reads), and the reservation of a request to a model
// with fallbacks is priced at the highest input and output prices among
// the model and its fallbacks
// (AdmitRequest.Fallbacks; the relay's OutputTokens is already the most
// over their deployments). Per-model rate limits and concurrency apply to
// the requested model at admission, and to a fallback model when the
// request reaches it (AdmitFallback): a fallback whose own limits refuse
// the request is skipped.
package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/policy"
	"llmgate/internal/sat"
	"llmgate/internal/usage"
)

// DefaultOutputTokens is reserved when a request's output is unbounded as
// far as the gateway knows (policy.UnknownOutput). The gateway's relay
// always passes a bound (codec.DefaultOutputTokens when neither a limit nor
// the model's context is known); other callers may not.
const DefaultOutputTokens = 1024

// ModelPolicy holds a model's prices and limits (across all keys).
type ModelPolicy struct {
	// Prices in USD per 1M tokens. CachedInputPrice 0 = InputPrice.
	InputPrice, OutputPrice, CachedInputPrice float64
	RPM, TPM, MaxConc                         int64
}

// Cost prices a request.
func (p *ModelPolicy) Cost(prompt, cached, completion int) float64 {
	if p == nil {
		return 0
	}
	cp := p.CachedInputPrice
	if cp == 0 {
		cp = p.InputPrice
	}
	cached = max(0, min(cached, prompt))
	return (float64(prompt-cached)*p.InputPrice + float64(cached)*cp + float64(completion)*p.OutputPrice) / 1e6
}

// reservation prices a request's estimate: token counts of any size (an
// int conversion would truncate them on 32-bit platforms), in float64,
// which nanos saturates.
func (p *ModelPolicy) reservation(prompt, completion int64) float64 {
	if p == nil {
		return 0
	}
	return (float64(prompt)*p.InputPrice + float64(completion)*p.OutputPrice) / 1e6
}

// Options configures an Admission.
type Options struct {
	Limiter limit.Limiter
	Models  map[string]ModelPolicy
	// DefaultOutputTokens overrides the package default.
	DefaultOutputTokens int
	Logger              *slog.Logger
	Now                 func() time.Time
}

// Admission implements policy.Admission.
type Admission struct {
	lim      limit.Limiter
	models   map[string]*model
	defOut   int64
	log      *slog.Logger
	now      func() time.Time
	keyIDs   sync.Map // key ID -> "key:"+ID, so the hot path does not concatenate
	refusals sync.Map // key ID -> refused: a recent key-scope refusal, for Precheck
	windows  windowCache
	unpriced priceTicket  // the ticket of a model without prices or limits
	failLogs atomic.Int64 // unix second of the last "limiter unavailable" log
	local    bool         // the limiter is in process: no deadlines needed
}

type model struct {
	name   string
	scope  string
	policy ModelPolicy
	free   priceTicket
}

var _ policy.Admission = (*Admission)(nil)

// New returns an Admission.
func New(opt Options) *Admission {
	a := &Admission{lim: opt.Limiter, models: map[string]*model{}, defOut: int64(opt.DefaultOutputTokens), log: opt.Logger, now: opt.Now}
	_, a.local = opt.Limiter.(*limit.Memory)
	if a.defOut <= 0 {
		a.defOut = DefaultOutputTokens
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.now == nil {
		a.now = time.Now
	}
	for name, p := range opt.Models {
		m := &model{name: name, scope: "model:" + name, policy: p}
		m.free = priceTicket{a: a, policy: &m.policy}
		a.models[name] = m
	}
	a.unpriced = priceTicket{a: a}
	return a
}

// Limiter returns the limiter in use.
func (a *Admission) Limiter() limit.Limiter { return a.lim }

func (a *Admission) keyScope(id string) string {
	if v, ok := a.keyIDs.Load(id); ok {
		return v.(string)
	}
	s := "key:" + id
	a.keyIDs.Store(id, s)
	return s
}

// priceTicket only prices the record (master key, unlimited keys). It is
// shared by every such request of its model, so Done changes nothing in it.
type priceTicket struct {
	a      *Admission
	policy *ModelPolicy
}

func (t *priceTicket) Done(rec *usage.Record) {
	rec.CostUSD = t.a.served(t.policy, rec.ServedModel).Cost(rec.PromptTokens, rec.CachedTokens, rec.CompletionTokens)
}

// served is the policy that prices a request admitted under p (its
// requested model's) and served by the model servedBy ("": the requested
// model itself, a fallback otherwise). Only a request a fallback served
// looks a model up.
func (a *Admission) served(p *ModelPolicy, servedBy string) *ModelPolicy {
	if servedBy == "" {
		return p
	}
	if m := a.models[servedBy]; m != nil {
		return &m.policy
	}
	return nil
}

// worstPrices returns the highest input and output prices among p (the
// requested model's) and the policies of the models in fallbacks: any of
// them may serve the request, so its reservation assumes the dearest.
func (a *Admission) worstPrices(p *ModelPolicy, fallbacks []string) ModelPolicy {
	var w ModelPolicy
	if p != nil {
		w.InputPrice, w.OutputPrice = p.InputPrice, p.OutputPrice
	}
	for _, f := range fallbacks {
		if m := a.models[f]; m != nil {
			w.InputPrice, w.OutputPrice = max(w.InputPrice, m.policy.InputPrice), max(w.OutputPrice, m.policy.OutputPrice)
		}
	}
	return w
}

// ticket holds an admitted request's lease until Done settles it.
type ticket struct {
	a      *Admission
	policy *ModelPolicy
	lease  limit.Lease
	rates  rates // the x-ratelimit figures as of admission
}

var _ policy.RateLimitTicket = (*ticket)(nil)

// RateLimitHeaders implements policy.RateLimitTicket: the answer to an
// admitted request carries the same x-ratelimit-* headers as a refusal,
// with the figures as of its admission (this request already counted).
func (t *ticket) RateLimitHeaders(h http.Header) { t.rates.set(h) }

// rates are the figures of OpenAI's x-ratelimit-* headers.
type rates struct {
	limitReq, remainingReq, limitTok, remainingTok int64
	resetReq, resetTok                             time.Duration
}

func ratesOf(d *limit.Decision) rates {
	return rates{limitReq: d.LimitRequests, remainingReq: d.RemainingRequests, resetReq: d.ResetRequests,
		limitTok: d.LimitTokens, remainingTok: d.RemainingTokens, resetTok: d.ResetTokens}
}

// Canonical header names, so setting them needs no canonicalisation.
const (
	hLimitReq     = "X-Ratelimit-Limit-Requests"
	hRemainingReq = "X-Ratelimit-Remaining-Requests"
	hResetReq     = "X-Ratelimit-Reset-Requests"
	hLimitTok     = "X-Ratelimit-Limit-Tokens"
	hRemainingTok = "X-Ratelimit-Remaining-Tokens"
	hResetTok     = "X-Ratelimit-Reset-Tokens"
)

// set adds the headers of the rate limits that apply: the requests trio
// when an RPM limit applies, the tokens trio when a TPM limit does, none
// without rate limits. Reset values are Go durations as OpenAI sends them
// ("1s", "6m0s", "17ms").
func (r *rates) set(h http.Header) {
	if r.limitReq <= 0 && r.limitTok <= 0 {
		return
	}
	// All values share one string and the value slices one array: two
	// allocations per answer.
	var buf [128]byte
	var ends [6]int
	b, n := buf[:0], 0
	if r.limitReq > 0 {
		b = strconv.AppendInt(b, r.limitReq, 10)
		ends[0] = len(b)
		b = strconv.AppendInt(b, r.remainingReq, 10)
		ends[1] = len(b)
		b = appendReset(b, r.resetReq)
		ends[2] = len(b)
		n = 3
	}
	if r.limitTok > 0 {
		b = strconv.AppendInt(b, r.limitTok, 10)
		ends[n] = len(b)
		b = strconv.AppendInt(b, r.remainingTok, 10)
		ends[n+1] = len(b)
		b = appendReset(b, r.resetTok)
		ends[n+2] = len(b)
		n += 3
	}
	all := string(b)
	v := make([]string, n)
	names := [6]string{hLimitReq, hRemainingReq, hResetReq, hLimitTok, hRemainingTok, hResetTok}
	first := 0
	if r.limitReq <= 0 {
		first = 3
	}
	from := 0
	for i := 0; i < n; i++ {
		v[i] = all[from:ends[i]]
		from = ends[i]
		h[names[first+i]] = v[i : i+1 : i+1]
	}
}

func (t *ticket) Done(rec *usage.Record) {
	a := t.a
	rec.CostUSD = a.served(t.policy, rec.ServedModel).Cost(rec.PromptTokens, rec.CachedTokens, rec.CompletionTokens)
	a.release(t.lease, int64(rec.PromptTokens+rec.CompletionTokens), nanos(rec.CostUSD), "request_id", rec.ID)
	*t = ticket{}
	ticketPool.Put(t)
}

// release gives a lease back, correcting its tokens and settling its cost;
// whoKey and who name it in the warning logged when that fails (strings,
// not variadic values: nothing is allocated unless it fails).
func (a *Admission) release(lease limit.Lease, tokens, costNanos int64, whoKey, who string) {
	ctx := context.Background()
	if !a.local { // a network limiter must not hold the request's goroutine long
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	if err := a.lim.Release(ctx, lease, tokens, costNanos); err != nil {
		a.log.Warn("limiter release failed; concurrency slots expire with their lease", whoKey, who, "err", err)
	}
}

// ticketPool recycles tickets: Done is called exactly once, after which
// the server holds no reference.
var ticketPool = sync.Pool{New: func() any { return new(ticket) }}

// nanos converts USD to the limiter's unit. Rounding (not ceiling) keeps a
// counter's sum equal to the ledger's sum of the same costs. A cost beyond
// the int64 range (2^31 choices of 30,000 tokens at $1,000 per million is
// $64 billion, 6.4e19 nano-USD) saturates: Go's own conversion would turn
// it into a negative reservation that every budget admits.
func nanos(usd float64) int64 { return max(0, sat.FromFloat(usd*limit.NanosPerUSD)) }

// Admit implements policy.Admission.
func (a *Admission) Admit(ctx context.Context, req policy.AdmitRequest) (policy.Ticket, error) {
	m := a.models[req.Model]
	var policy *ModelPolicy
	free := &a.unpriced
	if m != nil {
		policy, free = &m.policy, &m.free
	}
	k := req.Principal.Key
	keyLimited := k != nil && (k.RPM > 0 || k.TPM > 0 || k.MaxConc > 0 || k.BudgetUSD > 0)
	modelLimited := m != nil && (m.policy.RPM > 0 || m.policy.TPM > 0 || m.policy.MaxConc > 0)
	if req.Principal.Master || (!keyLimited && !modelLimited) {
		return free, nil
	}
	prompt, out := a.estimate(req)
	var lr limit.Request
	lr.Tokens = sat.Add(prompt, out)
	reserve := policy.reservation(prompt, out)
	if len(req.Fallbacks) > 0 {
		// A fallback may serve it, at its own prices: reserve the dearest.
		w := a.worstPrices(policy, req.Fallbacks)
		reserve = w.reservation(prompt, out)
	}
	lr.CostNanos = nanos(reserve)
	if keyLimited {
		s := &lr.Scopes[lr.N]
		lr.N++
		s.ID, s.RPM, s.TPM, s.MaxConc = a.keyScope(k.ID), int64(k.RPM), int64(k.TPM), int64(k.MaxConc)
		if k.BudgetUSD > 0 {
			s.BudgetNanos = nanos(k.BudgetUSD)
			s.BudgetWindow, s.BudgetTTL = a.windows.get(k.BudgetPeriod, a.now())
		}
	}
	if modelLimited {
		s := &lr.Scopes[lr.N]
		lr.N++
		s.ID, s.RPM, s.TPM, s.MaxConc = m.scope, m.policy.RPM, m.policy.TPM, m.policy.MaxConc
	}
	lease, d, err := a.lim.Acquire(ctx, lr)
	if err != nil && ctx.Err() != nil {
		return nil, apierror.ClientClosed(ctx.Err()) // nobody waits for an answer: no reason to fail open
	}
	if err != nil {
		// Fail open, as Envoy's rate limit filter does by default: a
		// limiter that cannot decide must not take the gateway down. The
		// Redis limiter decides locally while Redis is away, and returns
		// ErrUnavailable only when configured to fail open (it logs that
		// itself); anything else is logged at most once a second.
		if now := a.now().Unix(); !errors.Is(err, limit.ErrUnavailable) && a.failLogs.Swap(now) != now {
			a.log.Warn("limiter unavailable; admitting without limits", "err", err)
		}
		return free, nil
	}
	if !d.Allowed {
		return nil, a.refusal(req, &d, lr.Tokens, reserve)
	}
	t := ticketPool.Get().(*ticket)
	t.a, t.policy, t.lease, t.rates = a, policy, lease, ratesOf(&d)
	return t, nil
}

var _ policy.FallbackAdmission = (*Admission)(nil)

// AdmitFallback implements policy.FallbackAdmission: the fallback model's
// own rpm, tpm and max_concurrency, on the request's estimate for that
// model. The key was charged by Admit (its budget reserved at the dearest
// prices among the model and its fallbacks) and is not charged again; the
// master key passes, as in Admit.
func (a *Admission) AdmitFallback(ctx context.Context, req policy.AdmitRequest) (func(tokens int64), error) {
	m := a.models[req.Model]
	if req.Principal.Master || m == nil || (m.policy.RPM <= 0 && m.policy.TPM <= 0 && m.policy.MaxConc <= 0) {
		return nil, nil
	}
	prompt, out := a.estimate(req)
	lr := limit.Request{N: 1, Tokens: sat.Add(prompt, out)}
	s := &lr.Scopes[0]
	s.ID, s.RPM, s.TPM, s.MaxConc = m.scope, m.policy.RPM, m.policy.TPM, m.policy.MaxConc
	lease, d, err := a.lim.Acquire(ctx, lr)
	if err != nil && ctx.Err() != nil {
		return nil, apierror.ClientClosed(ctx.Err())
	}
	if err != nil {
		if now := a.now().Unix(); !errors.Is(err, limit.ErrUnavailable) && a.failLogs.Swap(now) != now {
			a.log.Warn("limiter unavailable; admitting without limits", "err", err)
		}
		return nil, nil
	}
	if !d.Allowed {
		return nil, a.refusal(req, &d, lr.Tokens, 0)
	}
	return func(tokens int64) { a.release(lease, max(tokens, 0), 0, "fallback_model", req.Model) }, nil
}

// estimate returns the prompt and output tokens to reserve: the gateway's
// own reading of the request (the same the backend gets), with the default
// output for requests whose output is unbounded as far as anyone knows.
func (a *Admission) estimate(req policy.AdmitRequest) (prompt, out int64) {
	out = req.OutputTokens
	if out == policy.UnknownOutput {
		out = a.defOut
	}
	return max(req.PromptTokens, 0), max(out, 0)
}

// refusal builds the 429 with OpenAI's rate-limit headers and a message
// naming the limit; reserve is the cost the request's reservation asked
// for (at the dearest prices among its model and fallbacks).
func (a *Admission) refusal(req policy.AdmitRequest, d *limit.Decision, tokens int64, reserve float64) *apierror.Error {
	who := "model " + strconv.Quote(req.Model)
	fix := "ask the gateway operator to raise the model's limit"
	if k := req.Principal.Key; k != nil && d.Scope == a.keyScope(k.ID) {
		who = "key " + k.ID
		if k.Name != "" {
			who = fmt.Sprintf("key %q (%s)", k.Name, k.ID)
		}
		fix = "raise it with 'llmgate keys update " + k.ID + "'"
	}
	var msg, code string
	retry := d.RetryAfter
	switch d.Limit {
	case limit.LimitRequests:
		code = "rate_limit_requests"
		msg = fmt.Sprintf("rate limit reached for %s: %d requests per minute; retry after %s, or %s", who, d.LimitRequests, ceilSec(retry), fix)
	case limit.LimitTokens:
		code = "rate_limit_tokens"
		msg = fmt.Sprintf("rate limit reached for %s: %d tokens per minute, this request reserves about %d (prompt bytes/4 + max_tokens); retry after %s, send a smaller request, or %s",
			who, d.LimitTokens, tokens, ceilSec(retry), fix)
	case limit.LimitConcurrency:
		code = "rate_limit_concurrency"
		msg = fmt.Sprintf("too many concurrent requests for %s; retry when one finishes, or %s", who, fix)
	case limit.LimitBudget:
		code = "budget_exceeded"
		period := "total"
		if k := req.Principal.Key; k != nil && k.BudgetPeriod != "" && k.BudgetPeriod != "none" {
			period = k.BudgetPeriod
			end := keys.PeriodEnd(k.BudgetPeriod, a.now())
			retry = end.Sub(a.now())
			period += ", resets " + end.Format("2006-01-02 15:04 UTC")
		}
		msg = fmt.Sprintf("budget exhausted for %s: %s of %s spent or reserved (%s budget); this request reserves up to %s (set max_tokens to reserve less), or %s",
			who, usage.FormatUSD(float64(d.SpentNanos)/limit.NanosPerUSD), usage.FormatUSD(float64(d.BudgetNanos)/limit.NanosPerUSD), period, usage.FormatUSD(reserve), fix)
	}
	e := apierror.New(http.StatusTooManyRequests, apierror.KindRateLimit, code, msg)
	h := http.Header{}
	if retry > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(retry.Seconds())), 10))
	}
	r := ratesOf(d)
	r.set(h)
	e.Header = h
	if k := req.Principal.Key; k != nil && d.Scope == a.keyScope(k.ID) {
		a.remember(k.ID, e, retry) // the next request of this key is refused before its body is read
	}
	return e
}

func ceilSec(d time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10) + "s"
}

// appendReset appends a reset time as OpenAI formats it: a Go duration
// to the millisecond ("17ms", "1s", "1.5s", "6m0s", "1h0m0s").
func appendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	if d < time.Second {
		return append(strconv.AppendInt(b, max(1, d.Milliseconds()), 10), "ms"...)
	}
	ms := int64(d.Round(time.Millisecond) / time.Millisecond)
	h, m, sec, frac := ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000
	if h > 0 {
		b = append(strconv.AppendInt(b, h, 10), 'h')
	}
	if h > 0 || m > 0 {
		b = append(strconv.AppendInt(b, m, 10), 'm')
	}
	b = strconv.AppendInt(b, sec, 10)
	if frac > 0 {
		b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
		for b[len(b)-1] == '0' {
			b = b[:len(b)-1]
		}
	}
	return append(b, 's')
}

// windowCache names the current budget window of each period without
// allocating on every request.
type windowCache struct {
	mu      sync.Mutex
	day     int // yyyymmdd the cached names belong to
	daily   string
	monthly string
	dTTL    time.Time
	mTTL    time.Time
}

func (w *windowCache) get(period string, now time.Time) (string, time.Duration) {
	if period != "daily" && period != "monthly" {
		return "all", 0
	}
	u := now.UTC()
	y, mo, d := u.Date()
	key := y*10000 + int(mo)*100 + d
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.day != key {
		w.day = key
		w.daily = fmt.Sprintf("d%04d-%02d-%02d", y, mo, d)
		w.monthly = fmt.Sprintf("m%04d-%02d", y, mo)
		// Counters outlive their period by a day so late settlements land.
		w.dTTL = keys.PeriodEnd("daily", u).Add(24 * time.Hour)
		w.mTTL = keys.PeriodEnd("monthly", u).Add(24 * time.Hour)
	}
	if period == "daily" {
		return w.daily, w.dTTL.Sub(u)
	}
	return w.monthly, w.mTTL.Sub(u)
}

// Window returns the budget window name and counter lifetime for a period
// at now (exported for seeding and tests).
func (a *Admission) Window(period string, now time.Time) (string, time.Duration) {
	return a.windows.get(period, now)
}
