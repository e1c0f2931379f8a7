// Package policy holds what the gateway decides about a request before it
// is forwarded — which route a key may take (the model allow-list) — and
// the seams through which other packages admit requests (limits, budgets)
// and take their usage records. It imports no HTTP edge and no relay, so
// the packages that implement those seams (admit, metrics, usage) stay
// independent of how requests are served.
package policy

import (
	"context"
	"net/http"
	"strings"

	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/router"
	"llmgate/internal/usage"
)

// Ledger takes one record per served request. Add must make the record
// durable (or queue it where it survives the process) before it returns:
// the relay calls it before the last bytes of the answer leave.
type Ledger interface {
	Add(usage.Record) error
}

// Observer sees each record after the answer has been flushed to the
// client (metrics, the access log): work there is off the client's clock.
type Observer interface {
	Observe(usage.Record)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(usage.Record)

// Observe implements Observer.
func (f ObserverFunc) Observe(r usage.Record) { f(r) }

// Admission decides whether a request may proceed (rate limits,
// concurrency, budgets) and settles it afterwards.
type Admission interface {
	// Admit is called once the route and key are known. A refusal is an
	// *apierror.Error (429 with rate-limit headers, 402/429 for budgets).
	Admit(ctx context.Context, req AdmitRequest) (Ticket, error)
}

// Prechecker is an Admission that can refuse a key from what it already
// knows, before the request's body is read: a key just refused for its
// request rate, concurrency or budget is refused again at once, so it
// cannot make the gateway read large bodies it will refuse anyway.
// Precheck must be cheap (no network round trip) and must not take
// anything from the limits.
type Prechecker interface {
	Precheck(p keys.Principal) error
}

// UnknownOutput is AdmitRequest.OutputTokens when the request sets no
// output limit and the model's context length is unknown: the admission
// then reserves its default.
const UnknownOutput = -1

// AdmitRequest describes a request about to be forwarded, as the gateway
// decoded it. The token figures come from the same reading of the body as
// what the backend gets, so a reservation cannot be evaded by a field the
// gateway reads one way and the backend another.
type AdmitRequest struct {
	Principal keys.Principal
	Model     string
	Endpoint  string
	// PromptTokens estimates the request's input tokens.
	PromptTokens int64
	// OutputTokens is the most output the backend may produce: the largest
	// token-limit alias it may honour times the number of choices, or what
	// the model's context leaves when the request sets no limit; 0 for
	// requests that generate nothing (embeddings, counts); UnknownOutput
	// when neither is known. For a model with fallbacks it is the most
	// over the deployments of the model and of its fallbacks.
	OutputTokens int64
	// Fallbacks are the public models the route falls back to when every
	// deployment of Model failed (router.Route.Fallbacks; nil for most
	// routes). The request may be served, and then is priced, by any of
	// them, so the budget's reservation prices it at the highest prices
	// among Model and these.
	Fallbacks []string
}

// Ticket is an admitted request. Done is called exactly once with the final
// ledger record, before it is written; it may set the record's cost. The
// record is priced at the prices of the model that served it:
// rec.ServedModel when one of AdmitRequest.Fallbacks served, else the
// requested model (rec.Model).
type Ticket interface {
	Done(rec *usage.Record)
}

// FallbackAdmission is an Admission that also applies a fallback model's
// own limits (its rpm, tpm and max_concurrency, across all keys) to a
// request that reaches it as a fallback, as Admit applies the requested
// model's.
type FallbackAdmission interface {
	// AdmitFallback is asked before the request's first attempt at a
	// deployment of the fallback model req.Model (req is what Admit got,
	// with Model the fallback's and OutputTokens its own bound). A refusal
	// is an *apierror.Error (429), and the fallback model is skipped.
	// Otherwise release, when not nil, gives the capacity back once the
	// request ends, or moves on to the next fallback: tokens is what the
	// fallback served (0 when another model served the request).
	AdmitFallback(ctx context.Context, req AdmitRequest) (release func(tokens int64), err error)
}

// RateLimitTicket is a Ticket of a request under rate limits (a key's, a
// model's). RateLimitHeaders is called once, right after admission and
// before anything is written, so every answer to the request - a success,
// a stream, an error after admission - carries OpenAI's x-ratelimit-*
// headers with the figures as of admission, as the 429 of a refusal does.
// It adds nothing when no rate limit applies.
type RateLimitTicket interface {
	Ticket
	RateLimitHeaders(h http.Header)
}

// Resolve returns the route of model on table t for principal p, applying
// the key's model allow-list: a model outside it is a 403 naming the models
// the key may use, and for a key with a list an unknown model's 404
// suggests and lists only those.
func Resolve(t *router.Table, p keys.Principal, model string) (*router.Route, error) {
	r, err := t.Route(model)
	if err != nil {
		if !p.Master && p.Key != nil && len(p.Key.Models) > 0 {
			return nil, t.NotFoundFor(model, p.Key.Allows)
		}
		return nil, err
	}
	if !p.Master && !p.Key.Allows(model) {
		return nil, NotAllowed(p, model)
	}
	return r, nil
}

// NotAllowed is the refusal of a model outside the key's allow-list.
func NotAllowed(p keys.Principal, model string) *apierror.Error {
	return apierror.Newf(http.StatusForbidden, apierror.KindPermission, "model_not_allowed",
		"API key %q may not use model %q; it may use: %s", p.Key.Name, model, strings.Join(p.Key.Models, ", "))
}
