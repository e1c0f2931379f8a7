// Package relay serves one decoded request: it resolves the route on one
// routing table, admits the request, runs attempts against deployments
// (retrying and failing over only before anything reached the client), and
// relays each answer through one loop — upstream decoder, usage tap,
// time-outs, keep-alives, first-event commit, client encoder — for every
// pair of client and backend dialect. Each request yields exactly one
// ledger record, made durable before the answer's last bytes leave.
package relay

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/codec"
	"llmgate/internal/engineinfo"
	"llmgate/internal/keys"
	"llmgate/internal/policy"
	"llmgate/internal/provider"
	"llmgate/internal/respstore"
	"llmgate/internal/router"
	"llmgate/internal/sse"
	"llmgate/internal/translate"
	"llmgate/internal/usage"
)

// Options configures a Relay.
type Options struct {
	// Ledger takes each request's record before the answer's last bytes.
	Ledger policy.Ledger
	// Observer sees each record once the answer has been flushed.
	Observer policy.Observer
	// Admission, when set, admits every request (limits, budgets).
	Admission policy.Admission
	// Responses, when set, stores Responses API answers for
	// previous_response_id.
	Responses *respstore.Store
	// Engines knows what each deployment's engine said: the model's
	// context length (an output limit that does not fit is lowered, or
	// refused where the route's FitOutput is off, and a request without
	// one reserves what the context leaves) and how to count a prompt
	// with the engine's own tokenizer.
	Engines *engineinfo.Learner
	Logger  *slog.Logger
}

// Relay serves decoded requests.
type Relay struct {
	opt Options
	log *slog.Logger
}

// New returns a Relay.
func New(opt Options) *Relay {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Engines == nil {
		opt.Engines = engineinfo.New(engineinfo.Options{Logger: opt.Logger})
	}
	return &Relay{opt: opt, log: opt.Logger}
}

// Call is one client request. The edge fills in what it knows; Serve
// resolves the rest once, before the first attempt, and nothing changes
// afterwards.
type Call struct {
	// ID is the request's ledger id, made by the gateway (usage.NewID);
	// ClientID is the client's own X-Request-Id, if it sent a sane one,
	// stored beside it (a client's id never keys the ledger).
	ID       string
	ClientID string
	// Start is when the request reached its handler (the record's
	// latency counts from it); Read when its body had been read (the
	// gateway's own time counts from it: a client's upload is not the
	// gateway's; zero: Start).
	Start     time.Time
	Read      time.Time
	Principal keys.Principal
	Req       *codec.Request
	// Table is the routing table the request is resolved and forwarded on.
	Table *router.Table

	route *router.Route
	// fallbacks are the route's fallback models this request may use
	// (a key with an allow-list falls back only to models it may name),
	// and fallbackNames their names; fallbacksCut says some were left out.
	fallbacks     []*router.Route
	fallbackNames []string
	fallbacksCut  bool
	ticket        policy.Ticket
	// entered is what the fallback model the request reached last took
	// of its own limits (policy.FallbackAdmission; zero: nothing), given
	// back when the request moves on to the next fallback or by settle.
	entered fallbackHold
	enc     codec.EncodeOptions
	// estimate is the prompt's size as resolve estimated it (with a
	// stored conversation), what the admission reserves.
	estimate int64
	// prompt is the prompt's count for the deployment promptFor, kept so
	// that fitting the output limit and message_start's input_tokens ask
	// the backend's tokenizer once.
	prompt    promptCount
	promptFor *provider.Backend
	promptUp  string
	// countedOn and countedUp name the deployment the count stage ran
	// at (the router's pick), so that an attempt elsewhere counts again.
	countedOn *provider.Backend
	countedUp string
	// countLater says the request wanted the count stage but the router
	// had no deployment of the model to try: a fallback's deployment
	// counts it when the request gets there (recount).
	countLater bool
	// unsized says the output limit was not fitted: the deployment's
	// context length was not known (a local engine not started yet).
	unsized bool
	// sw is set once SSE headers and keep-alives went out while the
	// request waited in a deployment's fair queue.
	sw *sse.Writer
	// answered is the context of the attempt running: once its backend's
	// answer has ended, router.ReleaseSlot(answered) lets the next
	// request in the deployment's fair queue go.
	answered context.Context

	t timing // the split of its time, for Server-Timing and the record

	settled bool         // the record was written
	rec     usage.Record // the record, once settled
	refused string       // the error code of a refusal
	// bodyGiven is set when Req.Body's bytes went to a backend as they
	// are: its Transport may still read them, so they are not reused.
	bodyGiven atomic.Bool
}

// Recorded reports whether the request has its ledger record; when not
// (it was refused before a model was resolved), refusal is the error code
// the client got.
func (c *Call) Recorded() (recorded bool, refusal string) { return c.settled, c.refused }

// BodyGiven reports whether the request's body bytes were sent to a
// backend as they are: the caller must then not reuse them (net/http's
// Transport may read a body after the answer came back).
func (c *Call) BodyGiven() bool { return c.bodyGiven.Load() }

// Result is the outcome of one attempt, returned by value; the request's
// record is built from the result of its last attempt.
type Result struct {
	Dep       router.Deployment
	Committed bool // something reached the client: no other attempt
	// Err is the failure (nil: served). After a commit it is the failure
	// the client saw as an error event, reported to the breaker.
	Err    *apierror.Error
	Status int
	Usage  usageTap
	TTFT   time.Duration
	// tail is what is left to write of a committed answer; finish writes
	// it once the record is settled.
	tail tail
}

// tail is an answer's last bytes, held back until the request's record is
// durable: a whole (non-stream) answer's body, or a stream's closing
// events (its end, or its error event) with the stream's writer.
type tail struct {
	whole bool
	body  []byte
	// buf is the pooled buffer of a backend's whole answer, which body or
	// events may point into, given back once they are written (nil: they
	// point elsewhere).
	buf    *bytes.Buffer
	sw     *sse.Writer
	events []translate.Event
}

// usageTap is what the relay learned of an answer's token counts.
type usageTap struct {
	prompt, completion, cached int
	have                       bool
	// cachedKnown: the usage had prompt_tokens_details (an engine that
	// reports no cache says nothing, which is not zero).
	cachedKnown bool
	// estimated: the backend's count left some output out, which the
	// gateway estimated (llama.cpp's several choices).
	estimated bool
	outChars  int
}

// failed records e as the attempt's outcome.
func (r Result) failed(err error) Result {
	r.Err = apierror.From(err)
	r.Status = r.Err.Status
	return r
}

// clientGone records that the client went away.
func (r Result) clientGone() Result { return r.failed(apierror.ErrClientClosed) }

// routerErr is the attempt's error as the router sees it.
func (r Result) routerErr() error {
	if r.Err == nil {
		return nil
	}
	return r.Err
}

// tap takes timing, usage and text size from one decoded event.
func (r *Result) tap(ev *codec.Event, start time.Time) {
	if ev.Content && r.TTFT == 0 {
		r.TTFT = time.Since(start)
	}
	if u := ev.Usage; u != nil {
		r.Usage.prompt, r.Usage.completion, r.Usage.have = u.PromptTokens, u.CompletionTokens, true
		r.Usage.estimated = ev.UsageEstimated
		r.Usage.cached, r.Usage.cachedKnown = 0, false
		if d := u.PromptTokensDetails; d != nil {
			r.Usage.cached, r.Usage.cachedKnown = d.CachedTokens, true
		}
	}
	r.Usage.outChars += ev.OutChars
}

// Serve answers c on w. The request passes its stages in order, each a
// function here: resolve (the route, the allow-list, a stored
// conversation), count (the prompt at the deployment the router will try
// first, when its output limit may not fit that deployment's context),
// admit, and forward (attempts, each pumping its answer to the client but
// for the last bytes); every request then ends in finish, which settles
// its record and writes those last bytes.
func (rl *Relay) Serve(w http.ResponseWriter, r *http.Request, c *Call) {
	rl.finish(w, c, rl.stages(w, r, c))
}

// stages runs the request's stages up to the final result; a stage that
// refuses the request ends it there.
func (rl *Relay) stages(w http.ResponseWriter, r *http.Request, c *Call) Result {
	ctx := r.Context()
	if err := rl.resolve(ctx, c); err != nil {
		return c.refusal(err)
	}
	hint := c.routingHint(r)
	dep, ok := rl.pick(c, &hint)
	if err := rl.count(ctx, w, c, dep, ok); err != nil {
		return c.refusal(err)
	}
	if err := rl.admit(ctx, w, c); err != nil {
		return c.refusal(err)
	}
	if ok {
		rl.countInput(ctx, c, dep)
	}
	return rl.forward(ctx, w, c, hint)
}

// resolve is the resolve stage: the route on c's table, the key's
// allow-list, the model's chat options, a stored Responses conversation,
// and the prompt's first estimate. After it the request is known but not
// yet counted, fitted or admitted.
func (rl *Relay) resolve(ctx context.Context, c *Call) error {
	route, err := policy.Resolve(c.Table, c.Principal, c.Req.Model)
	if err != nil {
		return err
	}
	c.route = route
	c.fallbacks, c.fallbackNames = route.FallbackRoutes(), route.Fallbacks
	if p := c.Principal; len(route.Fallbacks) > 0 && !p.Master && p.Key != nil && len(p.Key.Models) > 0 {
		c.fallbacks, c.fallbackNames = nil, nil
		for _, f := range route.FallbackRoutes() {
			if p.Key.Allows(f.Model) {
				c.fallbacks, c.fallbackNames = append(c.fallbacks, f), append(c.fallbackNames, f.Model)
			}
		}
		c.fallbacksCut = len(c.fallbacks) < len(route.Fallbacks)
	}
	c.Req = c.Req.WithChatOptions(route.Chat)
	c.estimate = c.Req.PromptEstimate()
	if c.Req.Dialect == codec.Responses && rl.opt.Responses != nil {
		extra, err := rl.prepareResponses(ctx, c)
		if err != nil {
			return err
		}
		c.estimate += int64(extra+3) / 4
	}
	if c.Req.Dialect == codec.Messages {
		c.enc.InputTokens = c.Req.EstimateInputTokens()
	}
	return nil
}

// admit is the admit stage: the admission (rate limits, concurrency, the
// budget's reservation) on the figures the backend will get, after the
// count has fitted the output limit. Its rate-limit headers go on the
// answer, a refusal's included.
func (rl *Relay) admit(ctx context.Context, w http.ResponseWriter, c *Call) error {
	var err error
	if rl.opt.Admission != nil {
		ar := policy.AdmitRequest{Principal: c.Principal, Model: c.Req.Model, Endpoint: c.Req.Dialect.Name(), PromptTokens: c.estimate,
			Fallbacks: c.fallbackNames}
		if c.Req.Dialect == codec.CountTokens {
			ar.PromptTokens = 0 // a count generates and bills nothing
		}
		ar.OutputTokens = rl.outputBound(c)
		c.ticket, err = rl.opt.Admission.Admit(ctx, ar)
		if rt, ok := c.ticket.(policy.RateLimitTicket); ok {
			rt.RateLimitHeaders(w.Header())
		}
	}
	if c.Req.Dialect.Anthropic() {
		anthropic.RateLimitHeaders(w.Header(), time.Now())
	}
	return err
}

// outputBound is the most output the admission reserves for: the
// request's limit, or without one what the context leaves — at the
// deployment whose context leaves the most, since a retry or the
// balancing may send the request to any of the route's deployments, and
// a fallback to any of its fallback models' (one whose context is not
// known yet counts DefaultOutputTokens). Each route's own backend
// dialects bound its share (an Anthropic backend gets a translated
// max_tokens).
func (rl *Relay) outputBound(c *Call) int64 {
	most := rl.routeOutput(c.Req, c.route)
	for _, f := range c.fallbacks {
		most = max(most, rl.routeOutput(c.Req, f))
	}
	return most
}

// routeOutput is outputBound over one route's deployments.
func (rl *Relay) routeOutput(req *codec.Request, route *router.Route) int64 {
	if rl.opt.Engines == nil || len(route.Deployments) == 0 || req.OutputLimit > 0 || !req.Dialect.Generates() {
		return req.MaxOutput(route.Dialects(), 0)
	}
	var most int64
	seen := -1
	for _, d := range route.Deployments {
		w := rl.opt.Engines.Known(route.ContextWindow, d.Backend, d.UpstreamModel).Tokens
		if w == seen {
			continue // most routes: one window for every deployment
		}
		seen = w
		most = max(most, req.MaxOutput(route.Dialects(), w))
	}
	return most
}

// forward is the forward stage: the router runs attempts on the route's
// deployments (the one hint names first), retrying and falling back while
// nothing reached the client. It returns the final attempt's result, with
// the router's own failure when no attempt served.
func (rl *Relay) forward(ctx context.Context, w http.ResponseWriter, c *Call, hint router.Hint) Result {
	var final Result
	var served router.Deployment
	attempts := 0
	if c.route.Queued() || c.route.Fallbacks != nil {
		ctx = router.WithLane(ctx, rl.lane(w, c))
	}
	if c.fallbacksCut || len(c.fallbacks) > 0 {
		plan := router.Fallbacks{Cut: c.fallbacksCut, Routes: c.fallbacks}
		if fa, ok := rl.opt.Admission.(policy.FallbackAdmission); ok && len(c.fallbacks) > 0 {
			plan.Gate = func(ctx context.Context, r *router.Route) error { return rl.enterFallback(ctx, fa, c, r) }
		}
		ctx = router.WithFallbacks(ctx, plan)
	}
	err := c.Table.ForwardHint(ctx, c.route, hint, func(ctx context.Context, dep router.Deployment) (bool, error) {
		attempts++
		served = dep
		if !c.t.attemptEnd.IsZero() {
			c.t.waited += time.Since(c.t.attemptEnd) // the back-off, a queue
		}
		c.answered = ctx // its end gives back the attempt's fair-queue slot
		if c.sw != nil { // keep-alives went out while the request was queued
			final = rl.attempt(ctx, headersSent{w}, c, dep, attempts)
		} else {
			final = rl.attempt(ctx, w, c, dep, attempts)
		}
		if !final.Committed {
			c.t.attemptEnd = time.Now()
		}
		return final.Committed, final.routerErr()
	})
	if err == nil && final.Usage.cachedKnown && len(hint.Prefix) > 0 {
		served.ConfirmPrefix(len(hint.Prefix), final.Usage.cached, final.Usage.prompt)
	}
	if err != nil && !final.Committed {
		// Forward's error is what the client should see (a trail of
		// failed attempts, no healthy deployment, a queue time-out).
		final = final.failed(err)
	}
	if final.Err != nil && !final.Committed && c.sw != nil {
		// The status went out with the queue's keep-alives: the failure
		// is the stream's error event.
		final = rl.engineFailed(c.sw, c, final, final.Err)
	}
	return final
}

// fallbackHold is a fallback model's capacity held by a request.
type fallbackHold struct {
	route   *router.Route
	release func(tokens int64)
}

// enterFallback asks the fallback model r's own limits to take the
// request, on the same estimate as the admission but the output bound of
// r's deployments, and gives back what the fallbacks tried before hold.
func (rl *Relay) enterFallback(ctx context.Context, fa policy.FallbackAdmission, c *Call, r *router.Route) error {
	ar := policy.AdmitRequest{Principal: c.Principal, Model: r.Model, Endpoint: c.Req.Dialect.Name(), PromptTokens: c.estimate,
		OutputTokens: rl.routeOutput(c.Req, r)}
	if c.Req.Dialect == codec.CountTokens {
		ar.PromptTokens = 0
	}
	// The router moves on to a fallback only once every attempt before
	// failed: the fallback entered before did not serve, and its
	// concurrency slot goes back now rather than when the request ends.
	c.leaveFallback(0)
	release, err := fa.AdmitFallback(ctx, ar)
	if err == nil && release != nil {
		c.entered = fallbackHold{route: r, release: release}
	}
	return err
}

// leaveFallback gives back what the fallback model the request reached
// last holds, charged tokens.
func (c *Call) leaveFallback(tokens int64) {
	if c.entered.release != nil {
		c.entered.release(tokens)
	}
	c.entered = fallbackHold{}
}

// prepareResponses continues a stored conversation (the backend gets the
// earlier turns before this one) and arranges for the answer to be stored.
// It returns the size of the stored conversation added.
func (rl *Relay) prepareResponses(ctx context.Context, c *Call) (int, error) {
	q := c.Req.ResponsesReq
	turn := respstore.TurnItems(q.Input)
	size := 0
	if q.PreviousResponseID != "" {
		items, n, err := rl.opt.Responses.Previous(ctx, c.UpstreamID(), c.Principal.KeyID(), q.PreviousResponseID)
		if err != nil {
			return 0, err
		}
		c.Req, size = c.Req.WithResponsesInput(append(items, turn...)), n
	}
	if q.Store == nil || *q.Store {
		c.enc.StoredID = respstore.NewID()
		keyID, id := c.Principal.KeyID(), c.ID
		c.enc.Save = func(resp *openai.Response) { rl.opt.Responses.Save(ctx, id, keyID, resp, turn) }
	}
	return size, nil
}

// refusal is the result of a request that a stage refused before any
// backend was asked; it notes the error code for a request refused before
// its model was resolved, which has no record.
func (c *Call) refusal(err error) Result {
	res := Result{}.failed(err)
	c.refused = res.Err.Code
	return res
}

// finish ends every request, whatever its stages did, in one order: the
// record is settled (durable in the ledger), then the answer's last bytes
// are written — a whole answer's body, a stream's closing events, or the
// error envelope of a request nothing answered — and only then do the
// observers see the record. It is the one caller of settle, so a request
// has exactly one record, and it is durable before the client has the
// whole answer.
func (rl *Relay) finish(w http.ResponseWriter, c *Call, res Result) {
	rl.settle(c, res)
	t := &res.tail
	switch {
	case t.sw != nil:
		c.timeHead(nil) // the stream's head went out before
		for _, e := range t.events {
			if t.sw.WriteEvent(e.Name, e.Data) != nil {
				break // the client went away
			}
		}
		_ = t.sw.Flush() // a held stream's last events
	case t.whole:
		h := w.Header()
		c.timeHead(h)
		h["Content-Type"] = jsonCT
		h["Content-Length"] = []string{strconv.Itoa(len(t.body))}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(t.body)
		// Send it now: the HTTP server would hold a small answer in its
		// buffer until the handler returns, which would put metrics and
		// the access log on the client's clock.
		_ = http.NewResponseController(w).Flush()
	case res.Err != nil && !res.Committed && (c.refused != "" || !errors.Is(res.Err, apierror.ErrClientClosed)):
		c.timeHead(w.Header())
		codec.WriteError(c.Req.Dialect, w, res.Err)
	default:
		c.timeHead(nil) // the client went away
	}
	putBuffer(t.buf)
	rl.observe(c)
}

// settle writes the request's one ledger record from its final result
// (none for a request refused before its model was resolved). finish
// calls it, before the answer's last bytes.
func (rl *Relay) settle(c *Call, res Result) {
	if c.route == nil {
		return
	}
	c.settled = true
	rec := usage.Record{
		ID: c.ID, ClientRequestID: c.ClientID, Time: c.Start, KeyID: c.Principal.KeyID(), Model: c.Req.Model, Endpoint: c.Req.Dialect.Name(),
		Status: res.Status, TTFT: res.TTFT, Latency: time.Since(c.Start), Stream: c.Req.Stream,
	}
	if res.Err != nil {
		rec.ErrorType = res.Err.Code
	}
	if res.Dep.Backend != nil {
		rec.Backend, rec.UpstreamModel = res.Dep.Backend.Name, res.Dep.UpstreamModel
	}
	// A fallback model's deployment made the last attempt: its prices
	// apply, and the record names it.
	if r := res.Dep.Route(); r != nil && r != c.route {
		rec.ServedModel = r.Model
	}
	u := res.Usage
	countable := c.Req.Dialect != codec.CountTokens
	switch {
	case u.have && countable:
		rec.PromptTokens, rec.CompletionTokens, rec.CachedTokens = u.prompt, u.completion, u.cached
		rec.Estimated = u.estimated
		// A stream cut before its final count (an Anthropic backend sends 1
		// output token in message_start) carries more text than counted.
		if est := usage.EstimateTokensFromChars(u.outChars); res.Status != http.StatusOK && est > rec.CompletionTokens {
			rec.CompletionTokens, rec.Estimated = est, true
		}
	case countable && (res.Status == http.StatusOK || res.Status == apierror.StatusClientClosed || u.outChars > 0):
		// The backend did not say; count locally and say so.
		rec.PromptTokens = usage.EstimatePromptTokens(c.Req.Body)
		rec.CompletionTokens = usage.EstimateTokensFromChars(u.outChars)
		rec.Estimated = true
	}
	if c.ticket != nil {
		c.ticket.Done(&rec) // priced by the model that served
	}
	if c.entered.release != nil {
		// Charged what it served, or nothing when another model served.
		var tokens int64
		if c.entered.route == res.Dep.Route() {
			tokens = int64(rec.PromptTokens) + int64(rec.CompletionTokens)
		}
		c.leaveFallback(tokens)
	}
	c.rec = rec
	if rl.opt.Ledger == nil {
		return
	}
	if err := rl.opt.Ledger.Add(rec); err != nil {
		// ErrNotDurable: queued, but the spool could not be written.
		rl.log.Error("usage record not made durable", "request_id", c.ID, "err", err)
	}
}

// observe hands the settled record to the observers, after the answer.
func (rl *Relay) observe(c *Call) {
	if rl.opt.Observer != nil && c.settled {
		c.rec.Overhead = c.t.gateway
		rl.opt.Observer.Observe(c.rec)
	}
}

// UpstreamID is the id sent to backends as X-Request-Id: the client's own
// when it sent one (so its traces line up), else the ledger id.
func (c *Call) UpstreamID() string {
	if c.ClientID != "" {
		return c.ClientID
	}
	return c.ID
}
