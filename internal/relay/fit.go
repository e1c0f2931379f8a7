package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/codec"
	"llmgate/internal/dialect"
	"llmgate/internal/engineinfo"
	"llmgate/internal/router"
	"llmgate/internal/usage"
)

// countTimeout bounds a prompt count made on a request's way to the
// backend (an engine's tokenizer answers in milliseconds).
const countTimeout = time.Second

// OutputLimitHeader tells a client that its output limit was lowered to fit
// the model's context, and from what to what.
const OutputLimitHeader = "Llmgate-Output-Limit"

// lowerBytesPerToken makes an estimated prompt's lower bound: no tokenizer
// of the field packs more than this many bytes of text into one token on
// average (English prose is ~4, code ~3, CJK text 1.5-3; only long runs of
// one character come near it).
const lowerBytesPerToken = 16

// promptCount is a request's prompt size in tokens.
type promptCount struct {
	tokens int
	exact  bool // the engine's tokenizer counted it
	// lower is, for an estimate, a conservative lower bound: the prompt
	// is surely at least this long (0 when nothing is sure).
	lower int
	// why says why the count is an estimate (the tokenizer's failure).
	why string
}

func (p promptCount) source() string {
	if p.exact {
		return "counted by the engine's tokenizer"
	}
	return "estimated"
}

// pick asks the router, for the count stage, which deployment it will try
// first (router.Table.Pick records it in hint, so that Forward does); ok
// is false when the request needs no count (no output limit to fit, no
// Messages stream's input_tokens) or the router has no deployment to ask.
// Other requests are not picked for: Forward orders them itself.
func (rl *Relay) pick(c *Call, hint *router.Hint) (router.Deployment, bool) {
	req := c.Req
	if rl.opt.Engines == nil || !(req.Dialect.Generates() && req.OutputLimit > 0 || req.Dialect == codec.Messages && req.Stream) {
		return router.Deployment{}, false
	}
	dep, ok := c.Table.Pick(c.route, hint)
	c.countLater = !ok && len(c.fallbacks) > 0
	return dep, ok
}

// count is the count stage at dep, the deployment the router will try
// first (ok false: none, and nothing is counted). It makes the request fit
// the model's context: when the prompt plus the requested output limit
// (any alias) exceeds the context length, the limit is lowered to what the
// context leaves (said in a response header and the log), or — with
// fit_output_limit off for the model — the request is a 400 naming the
// numbers. Agents ask for 32000 output tokens whatever the model; an
// engine with a 32k context refuses that, and some clients then misread
// the refusal as their own context overflowing.
//
// The prompt is counted by dep's engine's own tokenizer (a round trip to
// the backend, at most countTimeout) only when a cheap upper bound says it
// may not fit. A request is refused for length only on the engine's own
// count, or when even a conservative lower bound of an estimated prompt
// exceeds the context: on a guess, the limit is lowered (and the header
// says the prompt was estimated) and the engine has the last word.
//
// The context length is what the gateway knows already (configured, or
// learned from the engine: see engineinfo); a request never waits for a
// backend to be asked about it.
func (rl *Relay) count(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment, ok bool) error {
	if !ok {
		return nil // the attempt will say what is wrong
	}
	c.countedOn, c.countedUp = dep.Backend, dep.UpstreamModel
	return rl.fitFor(ctx, w, c, dep)
}

// routeOf is the route dep belongs to: c's own, or the fallback model's
// when Forward fell back to one. Its context_window and fit_output_limit
// are what dep is sized by.
func (c *Call) routeOf(dep router.Deployment) *router.Route {
	if r := dep.Route(); r != nil {
		return r
	}
	return c.route
}

// requestFor is the request as dep's model shapes it: a deployment reached
// through a fallback gets the fallback model's chat options (its
// reasoning parameters, system messages), not the requested model's — a
// local model's chat_template_kwargs would be refused by a cloud API the
// route falls back to.
func (c *Call) requestFor(dep router.Deployment) *codec.Request {
	if r := c.routeOf(dep); r != c.route {
		return c.Req.WithChatOptions(r.Chat)
	}
	return c.Req
}

// recount is the count stage again for an attempt at dep when the count
// ran at another deployment (the router's pick failed and a retry or
// fallback went elsewhere), or did not run because the model had no
// deployment to try and a fallback's serves: the output limit is fitted to
// dep's context,
// and a Messages stream's input_tokens counted by dep's tokenizer. The
// count is kept per backend and model (promptTokens), so going back to a
// deployment counted before asks its tokenizer nothing.
func (rl *Relay) recount(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment) error {
	if c.countedOn == nil && (!c.countLater || c.routeOf(dep) == c.route) {
		// Not counted at all: nothing needed it, or the model's own
		// deployment (a half-open breaker's probe) is not asked for a
		// count; a fallback's is, when the model had none to try.
		return nil
	}
	if c.countedOn == dep.Backend && c.countedUp == dep.UpstreamModel {
		return nil
	}
	c.countedOn, c.countedUp = dep.Backend, dep.UpstreamModel
	if err := rl.fitFor(ctx, w, c, dep); err != nil {
		return err
	}
	rl.countInput(ctx, c, dep)
	return nil
}

// fitFor fits the output limit at the deployment dep (see count). It
// notes in c.unsized that dep's context was not known, so the request
// could not be fitted.
func (rl *Relay) fitFor(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment) error {
	req := c.Req
	if !req.Dialect.Generates() || req.OutputLimit <= 0 || rl.opt.Engines == nil {
		return nil // without a limit the engine takes what the context leaves
	}
	route := c.routeOf(dep)
	window := rl.opt.Engines.Known(route.ContextWindow, dep.Backend, dep.UpstreamModel)
	c.unsized = window.Tokens == 0
	if window.Tokens == 0 {
		rl.opt.Engines.Learn(route.ContextWindow, dep.Backend, dep.UpstreamModel)
		return nil
	}
	// A cheap upper bound first (two bytes a token is more than any
	// tokenizer gives for JSON text), so that most requests never count.
	if int64(len(req.Body))/2+int64(req.OutputLimit) <= int64(window.Tokens) {
		return nil
	}
	p := rl.promptTokens(ctx, c, dep)
	if p.tokens+req.OutputLimit <= window.Tokens {
		return nil
	}
	sure := p.tokens // what the prompt surely takes
	if !p.exact {
		sure = p.lower
	}
	if sure >= window.Tokens {
		return contextExceeded(req.Model, sure, window, p)
	}
	left := window.Tokens - p.tokens
	if !p.exact && left < 1 {
		// The estimate fills the context but the prompt may well be
		// shorter: leave the engine what the lower bound leaves, and let
		// it decide.
		left = window.Tokens - p.lower
	}
	if left >= req.OutputLimit {
		return nil
	}
	if !route.FitOutput {
		if !p.exact && p.lower+req.OutputLimit <= window.Tokens {
			return nil // it may fit: the engine decides
		}
		return apierror.InvalidRequest("context_length_exceeded",
			"model %q has a context of %d tokens (%s); the prompt (%d tokens, %s) plus the output limit %d exceeds it: lower the output limit to %d or less, or shorten the prompt (fit_output_limit is off for this model)",
			req.Model, window.Tokens, window.Source, p.tokens, p.source(), req.OutputLimit, max(window.Tokens-p.tokens, 1))
	}
	source := "tokenizer"
	if !p.exact {
		source = "estimate"
	}
	w.Header().Set(OutputLimitHeader, fmt.Sprintf("%d->%d; context=%d; prompt=%d; prompt_source=%s",
		req.OutputLimit, left, window.Tokens, p.tokens, source))
	rl.log.Info("output limit lowered to fit the model's context", "request_id", c.ID, "model", req.Model,
		"requested", req.OutputLimit, "fitted", left, "context", window.Tokens, "context_source", window.Source,
		"prompt_tokens", p.tokens, "prompt_exact", p.exact, "estimated_because", p.why)
	c.Req = req.WithOutputLimit(left)
	return nil
}

// contextExceeded is the refusal of a prompt that alone fills the context,
// worded as Anthropic words it (clients such as Claude Code compact the
// conversation on "prompt is too long") and carrying the numbers.
func contextExceeded(model string, prompt int, window engineinfo.Length, p promptCount) *apierror.Error {
	e := apierror.InvalidRequest("context_length_exceeded",
		"prompt is too long: %d tokens > %d maximum (model %q has a context of %d tokens, %s; the prompt was %s): shorten the prompt or start a new conversation",
		prompt, window.Tokens, model, window.Tokens, window.Source, p.source())
	if !p.exact {
		e.Message = fmt.Sprintf("prompt is too long: at least %d tokens > %d maximum (model %q has a context of %d tokens, %s; the prompt was estimated, at its smallest): shorten the prompt or start a new conversation",
			prompt, window.Tokens, model, window.Tokens, window.Source)
	}
	e.Context = &apierror.ContextOverflow{PromptTokens: prompt, ContextTokens: window.Tokens}
	return e
}

// promptTokens counts the request's prompt with the deployment's engine
// when it can, else estimates it.
func (rl *Relay) promptTokens(ctx context.Context, c *Call, dep router.Deployment) promptCount {
	if c.promptFor == dep.Backend && c.promptUp == dep.UpstreamModel {
		return c.prompt
	}
	p := rl.countPrompt(ctx, c, dep)
	c.prompt, c.promptFor, c.promptUp = p, dep.Backend, dep.UpstreamModel
	return p
}

func (rl *Relay) countPrompt(ctx context.Context, c *Call, dep router.Deployment) promptCount {
	chat, text, err := c.Req.CountPrompt()
	if err != nil {
		est := int(c.Req.PromptEstimate())
		return promptCount{tokens: est, why: "the prompt cannot be counted by a tokenizer"}
	}
	if rl.opt.Engines != nil {
		cctx, cancel := context.WithTimeout(ctx, countTimeout)
		at := time.Now()
		n, err := rl.opt.Engines.Count(cctx, dep.Backend, dep.UpstreamModel, countInput(chat, text), maxCountBody(c.Req))
		c.t.backendSince(at) // the engine's tokenizer
		cancel()
		if err == nil {
			return promptCount{tokens: n, exact: true}
		}
		p := estimatePrompt(chat, text)
		p.why = err.Error()
		if errors.Is(err, engineinfo.ErrNoTokenizer) {
			p.why = "no tokenizer: " + p.why
		}
		return p
	}
	return estimatePrompt(chat, text)
}

// countInput is the engine's view of a prompt.
func countInput(chat *openai.ChatCompletionRequest, text string) engineinfo.Prompt {
	if chat == nil {
		return engineinfo.Prompt{Text: text}
	}
	return engineinfo.Prompt{Messages: chat.Messages, Tools: chat.Tools}
}

// maxCountBody bounds what is sent to an engine's tokenizer for one
// request (codec.Request.MaxTokenizeBody): tool definitions a
// tool_reference brought in, the chat template's framing, never an
// amplifier.
func maxCountBody(r *codec.Request) int { return r.MaxTokenizeBody() }

// estimatePrompt estimates a prompt without a tokenizer: its text at the
// usual rule of thumb plus a few tokens of chat template per message and
// the tool definitions, and a lower bound from the text alone.
func estimatePrompt(chat *openai.ChatCompletionRequest, text string) promptCount {
	if chat == nil {
		return promptCount{tokens: usage.EstimateTokens(text), lower: len(text) / lowerBytesPerToken}
	}
	n, textBytes := 3, 0
	for i := range chat.Messages {
		m := &chat.Messages[i]
		s := m.Content.String()
		r := m.ReasoningText()
		n += 5 + usage.EstimateTokens(s) + usage.EstimateTokens(r)
		textBytes += len(s) + len(r)
		for _, tc := range m.ToolCalls {
			n += 4 + usage.EstimateTokens(tc.Function.Name) + usage.EstimateTokens(tc.Function.Arguments)
			textBytes += len(tc.Function.Arguments)
		}
	}
	for i := range chat.Tools {
		raw, _ := json.Marshal(&chat.Tools[i])
		n += 8 + usage.EstimateTokens(string(raw))
		textBytes += len(raw)
	}
	return promptCount{tokens: n, lower: textBytes / lowerBytesPerToken}
}

// countInput counts an admitted Messages stream's prompt with dep's
// engine's tokenizer when it has one (the one count_tokens uses), so that
// the translated stream's message_start carries the exact input_tokens
// that Claude Code tracks its context with, not an estimate. It runs after
// the admission, so that a refused request costs the backend nothing; a
// prompt the count stage counted already is not counted again.
func (rl *Relay) countInput(ctx context.Context, c *Call, dep router.Deployment) {
	if c.Req.Dialect != codec.Messages || !c.Req.Stream || dep.Backend.Dialect == dialect.Anthropic {
		return // the backend's own message_start is relayed
	}
	if p := rl.promptTokens(ctx, c, dep); p.exact {
		c.enc.InputTokens = p.tokens
	}
}

// sizeAfterStart fits and counts, at the local engine of dep, a request
// that waited for that engine to start, or that the count stage counted at
// another deployment (a retry or fallback landed on this engine). While it
// was stopped the engine could tell neither its context length nor the
// prompt's size, so the request was resolved without them; the engine
// manager has the gateway ask a started engine about itself before it lets
// the waiting requests through, so both are known now. A request resolved
// with this engine's numbers is left as it was.
func (rl *Relay) sizeAfterStart(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment) error {
	elsewhere := c.countedOn != nil && (c.countedOn != dep.Backend || c.countedUp != dep.UpstreamModel)
	counted := c.promptFor == dep.Backend && c.promptUp == dep.UpstreamModel
	if counted && c.prompt.exact && !elsewhere {
		return nil
	}
	if counted && !c.prompt.exact {
		c.promptFor = nil // an estimate made while the engine was down: count again
	}
	if c.unsized || elsewhere {
		if elsewhere {
			c.countedOn, c.countedUp = dep.Backend, dep.UpstreamModel
		}
		// What the engine said when it became ready; a lookup still in
		// flight from before is waited for (briefly), not taken for none.
		lctx, cancel := context.WithTimeout(ctx, countTimeout)
		rl.opt.Engines.Lookup(lctx, c.routeOf(dep).ContextWindow, dep.Backend, dep.UpstreamModel)
		cancel()
		if err := rl.fitFor(ctx, w, c, dep); err != nil {
			return err
		}
	}
	rl.countInput(ctx, c, dep)
	return nil
}
