package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/router"
	"llmgate/internal/translate"
)

// attemptPassthroughAnthropic relays a Messages request to an Anthropic
// backend untouched (model name rewritten), tapping usage.
//
// A stream is guarded like a chat stream: its first event is awaited
// before anything is written (within what is left of first_byte_timeout),
// so a backend that stalls or dies before it fails the attempt uncommitted;
// afterwards a gap longer than idle_timeout, a cut or the backend's timeout
// ends the client's stream with an Anthropic "error" event.
func (s *Server) attemptPassthroughAnthropic(ctx context.Context, w http.ResponseWriter, c *call, dep router.Deployment) (bool, error) {
	c.dep = dep
	b := dep.Backend
	ctx, cancel, release := attemptContext(ctx, b)
	defer release()
	resp, t0, err := s.send(ctx, c, dep, "/v1/messages", anthropicPassthroughBody(c.body, dep.UpstreamModel), func(h http.Header) {
		if beta := c.anthropicBeta; beta != "" {
			h.Set("Anthropic-Beta", beta)
		}
	})
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if !isEventStream(resp) {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
		c.ttft = time.Since(c.start)
		if err != nil {
			return false, c.fail(b.Classify(ctx, err))
		}
		var msg struct {
			Usage *anthropic.Usage `json:"usage"`
		}
		if json.Unmarshal(raw, &msg) == nil && msg.Usage != nil {
			c.setAnthropicUsage(*msg.Usage)
		}
		c.status = http.StatusOK
		w.Header()["Content-Type"] = []string{"application/json"}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(raw)
		return true, nil
	}
	idle := startIdleGap(b.IdleTimeout(), firstEventBudget(b, t0), cancel)
	defer idle.stop()
	rd, ev, sw, err := c.beginStream(w, resp, idle)
	if err != nil {
		return false, c.fail(s.passthroughStreamError(ctx, c, err, idle))
	}
	for {
		c.tapAnthropicEvent(ev.Name, ev.Data)
		if err := sw.WriteEvent(ev.Name, ev.Data); err != nil {
			c.status, c.errType = 499, "client_closed"
			return true, nil
		}
		if ev.Name == "message_stop" || ev.Name == "error" {
			// Both end an Anthropic stream; the status of an upstream
			// error event is already on the call.
			return true, nil
		}
		if ev, err = rd.Next(); err != nil {
			e := c.streamBroke(s.passthroughStreamError(ctx, c, err, idle))
			if e == nil {
				return true, nil
			}
			_ = sw.WriteEvent("error", anthropic.MarshalError(e))
			return true, e
		}
		idle.rearm()
	}
}

// passthroughStreamError is streamError for an Anthropic stream.
func (s *Server) passthroughStreamError(ctx context.Context, c *call, err error, idle *idleGap) *apierror.Error {
	e := s.streamError(ctx, c, err, idle)
	if e.Code == "stream_cut" {
		e.Message = fmt.Sprintf("backend %q ended the stream before message_stop; the answer is truncated", c.dep.Backend.Name)
	}
	return e
}

// tapAnthropicEvent takes usage and timing from a passed-through event.
func (c *call) tapAnthropicEvent(name string, data []byte) {
	switch name {
	case "message_start", "message_delta":
		c.tapAnthropicUsage(data)
	case "content_block_delta":
		if c.ttft == 0 {
			c.ttft = time.Since(c.start)
		}
		c.outChars += approxGeneratedChars(data)
	case "error":
		c.status, c.errType = http.StatusBadGateway, "upstream_stream_error"
	}
}

// tapAnthropicUsage takes the usage of a message_start or message_delta
// event: a stream that breaks off later still has the backend's counts.
func (c *call) tapAnthropicUsage(data []byte) {
	var ev struct {
		Message *struct {
			Usage *anthropic.Usage `json:"usage"`
		} `json:"message"`
		Usage *anthropic.Usage `json:"usage"`
	}
	if json.Unmarshal(data, &ev) == nil {
		if ev.Message != nil && ev.Message.Usage != nil {
			c.setAnthropicUsage(*ev.Message.Usage)
		}
		if ev.Usage != nil {
			c.setAnthropicUsage(*ev.Usage)
		}
	}
}

// setAnthropicUsage merges Anthropic usage (input excludes cache reads and
// writes; message_delta carries cumulative output) into the call.
func (c *call) setAnthropicUsage(u anthropic.Usage) {
	if u.InputTokens > 0 || u.CacheReadInputTokens > 0 || u.CacheCreationInputTokens > 0 {
		c.usage.PromptTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
		if u.CacheReadInputTokens > 0 {
			c.usage.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: u.CacheReadInputTokens}
		}
	}
	if u.OutputTokens > 0 {
		c.usage.CompletionTokens = u.OutputTokens
	}
	c.usage.TotalTokens = c.usage.PromptTokens + c.usage.CompletionTokens
	c.haveUsage = true
}

// anthropicPassthroughBody rewrites the model of a Messages body for an
// Anthropic backend. History produced by a chat backend carries thinking
// blocks with empty signatures, which Anthropic rejects; those are dropped.
func anthropicPassthroughBody(body []byte, model string) []byte {
	if !strings.Contains(string(body), `"signature":""`) {
		return setModel(body, model)
	}
	var req anthropic.MessagesRequest
	if json.Unmarshal(body, &req) != nil || !translate.DropUnsignedThinking(&req) {
		return setModel(body, model)
	}
	req.Model = model
	out, err := json.Marshal(&req)
	if err != nil {
		return setModel(body, model)
	}
	return out
}
