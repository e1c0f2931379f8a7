package relay

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"llmgate/internal/codec"
	"llmgate/internal/router"
)

// tokenizeTimeout bounds a count_tokens request's count by the engine.
const tokenizeTimeout = 3 * time.Second

// TokenCountHeader tells a count_tokens client where its count came from:
// "tokenizer" (the engine's own, exact) or "estimate" (llmgate's rule of
// thumb, see translate.EstimateAnthropicInputTokens). When it is an
// estimate, TokenCountReasonHeader says why.
const (
	TokenCountHeader       = "Llmgate-Token-Count"
	TokenCountReasonHeader = "Llmgate-Token-Count-Reason"
)

// countTokens answers a count_tokens request for an OpenAI-dialect
// deployment: the count of the engine's own tokenizer and chat template
// when it has them (see engineinfo.Learner.Count), else the estimate. The
// answer is a local source for the relay loop. A count never fails over or
// opens a breaker, and a local engine that is not running is not started
// for it (its closed port gives the estimate).
func (rl *Relay) countTokens(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment) source {
	n, from, why := 0, "estimate", "the gateway does not learn from engines here"
	if chat, text, err := c.Req.CountPrompt(); err != nil {
		why = err.Error()
	} else if rl.opt.Engines != nil {
		cctx, cancel := context.WithTimeout(ctx, tokenizeTimeout)
		at := time.Now()
		got, err := rl.opt.Engines.Count(cctx, dep.Backend, dep.UpstreamModel, countInput(chat, text), maxCountBody(c.Req))
		c.t.backendSince(at)
		cancel()
		if err == nil {
			n, from, why = got, "tokenizer", ""
		} else {
			why = err.Error()
		}
	}
	if from == "estimate" {
		n = c.Req.EstimateInputTokens()
		w.Header().Set(TokenCountReasonHeader, headerSafe(why))
	}
	w.Header().Set(TokenCountHeader, from)
	body := []byte(`{"input_tokens":` + strconv.Itoa(n) + "}")
	return &localSource{evs: []codec.Event{{Data: body, Content: true, End: true}}}
}

// headerSafe keeps a reason fit for a header value: printable ASCII, at
// most 200 bytes.
func headerSafe(s string) string {
	b := make([]byte, 0, min(len(s), 200))
	for i := 0; i < len(s) && len(b) < 200; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b = append(b, c)
		}
	}
	return string(b)
}
