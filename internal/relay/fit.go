package relay

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/codec"
	"llmgate/internal/config"
	"llmgate/internal/router"
)

// countTimeout bounds a prompt count made on a request's way to the
// backend (a vLLM tokenizer answers in milliseconds).
const countTimeout = time.Second

// OutputLimitHeader tells a client that its output limit was lowered to fit
// the model's context, and from what to what.
const OutputLimitHeader = "Llmgate-Output-Limit"

// promptCount is a request's prompt size in tokens.
type promptCount struct {
	tokens int
	exact  bool // the backend's tokenizer counted it
}

func (p promptCount) source() string {
	if p.exact {
		return "counted by the backend's tokenizer"
	}
	return "estimated"
}

// fitOutput makes the request fit the model's context: when the prompt
// plus the requested output limit (any alias) exceeds the context length,
// the limit is lowered to what the context leaves (said in a response
// header and the log), or — with fit_output_limit off for the model — the
// request is a 400 naming the numbers. Agents ask for 32000 output tokens
// whatever the model; an engine with a 32k context refuses that, and some
// clients then misread the refusal as their own context overflowing.
//
// The context length is what the gateway knows already (configured, or
// learned from the backend in the background: see ctxlen); a request never
// waits for a backend to be asked.
func (rl *Relay) fitOutput(ctx context.Context, w http.ResponseWriter, c *Call) error {
	req := c.Req
	if !req.Dialect.Generates() || req.OutputLimit <= 0 || rl.opt.Contexts == nil {
		return nil // without a limit the engine takes what the context leaves
	}
	dep, ok := c.Table.Healthy(c.route)
	if !ok {
		return nil // the attempt will say what is wrong
	}
	window := rl.opt.Contexts.Known(c.route.ContextWindow, dep.Backend, dep.UpstreamModel)
	if window.Tokens == 0 {
		rl.opt.Contexts.Learn(c.route.ContextWindow, dep.Backend, dep.UpstreamModel)
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
	left := window.Tokens - p.tokens
	if left < 1 || !c.route.FitOutput {
		e := apierror.InvalidRequest("context_length_exceeded",
			"model %q has a context of %d tokens (%s); the prompt (%d tokens, %s) plus the output limit %d exceeds it: ",
			req.Model, window.Tokens, window.Source, p.tokens, p.source(), req.OutputLimit)
		if left < 1 {
			e.Message += "the prompt alone fills the context, so shorten it"
		} else {
			e.Message += fmt.Sprintf("lower the output limit to %d or less, or shorten the prompt (fit_output_limit is off for this model)", left)
		}
		return e
	}
	w.Header().Set(OutputLimitHeader, fmt.Sprintf("%d->%d; context=%d; prompt=%d; prompt_source=%s",
		req.OutputLimit, left, window.Tokens, p.tokens, map[bool]string{true: "tokenizer", false: "estimate"}[p.exact]))
	rl.log.Info("output limit lowered to fit the model's context", "request_id", c.ID, "model", req.Model,
		"requested", req.OutputLimit, "fitted", left, "context", window.Tokens, "context_source", window.Source,
		"prompt_tokens", p.tokens, "prompt_exact", p.exact)
	c.Req = req.WithOutputLimit(left)
	return nil
}

// promptTokens counts the request's prompt with the deployment's tokenizer
// when it has one, else estimates it on the safe side (three bytes a
// token, plus a little for the chat template).
func (rl *Relay) promptTokens(ctx context.Context, c *Call, dep router.Deployment) promptCount {
	if c.promptFor == dep.Backend && c.promptUp == dep.UpstreamModel {
		return c.prompt
	}
	p := rl.countPrompt(ctx, c, dep)
	c.prompt, c.promptFor, c.promptUp = p, dep.Backend, dep.UpstreamModel
	return p
}

func (rl *Relay) countPrompt(ctx context.Context, c *Call, dep router.Deployment) promptCount {
	if dep.Backend.Dialect != config.DialectAnthropic {
		if body, ok := c.Req.TokenizeBody(dep.UpstreamModel); ok {
			if n, exact := rl.tokenize(ctx, c, dep, body, countTimeout); exact {
				return promptCount{tokens: n, exact: true}
			}
		}
	}
	return promptCount{tokens: len(c.Req.Body)/3 + 16}
}

// countInput counts an admitted Messages stream's prompt with the backend's
// tokenizer when it has one (the one count_tokens uses), so that the
// translated stream's message_start carries the exact input_tokens that
// Claude Code tracks its context with, not an estimate.
func (rl *Relay) countInput(ctx context.Context, c *Call) {
	if c.Req.Dialect != codec.Messages || !c.Req.Stream {
		return
	}
	dep, ok := c.Table.Healthy(c.route)
	if !ok || dep.Backend.Dialect == config.DialectAnthropic {
		return // the backend's own message_start is relayed
	}
	if p := rl.promptTokens(ctx, c, dep); p.exact {
		c.enc.InputTokens = p.tokens
	}
}
