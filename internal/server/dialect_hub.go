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
	"llmgate/internal/config"
	"llmgate/internal/jsonscan"
	"llmgate/internal/router"
	"llmgate/internal/sse"
	"llmgate/internal/translate"
)

// chatHub returns the hub of a chat client (used when a chat request goes
// to an Anthropic backend), decoding the body on first use.
func (c *call) chatHub() (*hub, error) {
	if c.hub != nil {
		return c.hub, nil
	}
	var req openai.ChatCompletionRequest
	if err := json.Unmarshal(c.body, &req); err != nil {
		return nil, apierror.InvalidRequest("invalid_request", "invalid chat request: %v", err)
	}
	c.hub = &hub{
		req:      &req,
		complete: func(resp *openai.ChatCompletion) ([]byte, error) { return json.Marshal(resp) },
		stream:   func() clientStream { return chatPassthrough{} },
	}
	return c.hub, nil
}

// attemptHub sends the hub chat request to one deployment (translated to
// the Messages API for Anthropic backends) and answers in the client's
// dialect.
func (s *Server) attemptHub(ctx context.Context, w http.ResponseWriter, c *call, dep router.Deployment) (bool, error) {
	c.dep = dep
	h := c.hub
	b := dep.Backend
	// timeout bounds the whole attempt, stream included; the idle gap
	// (armed once headers arrive) cancels with errIdleGap as the cause.
	ctx, cancel, release := attemptContext(ctx, b)
	defer release()
	anthropicBackend := b.Dialect == config.DialectAnthropic
	var body []byte
	var err error
	path := "/chat/completions"
	if anthropicBackend {
		ar, terr := translate.ChatToAnthropicRequest(h.req)
		if terr != nil {
			return false, c.fail(terr)
		}
		ar.Model, ar.Stream = dep.UpstreamModel, c.stream
		body, err = json.Marshal(ar)
		path = "/v1/messages"
	} else {
		req := *h.req
		req.Model, req.Stream = dep.UpstreamModel, c.stream
		if c.stream {
			req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		}
		body, err = json.Marshal(&req)
	}
	if err != nil {
		return false, c.fail(err)
	}
	resp, t0, err := s.send(ctx, c, dep, path, body, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if c.stream && isEventStream(resp) {
		idle := startIdleGap(b.IdleTimeout(), firstEventBudget(b, t0), cancel)
		defer idle.stop()
		return s.relayHubStream(w, ctx, c, resp, anthropicBackend, idle)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	c.ttft = time.Since(c.start)
	if err != nil {
		return false, c.fail(b.Classify(ctx, err))
	}
	var completion *openai.ChatCompletion
	if anthropicBackend {
		var msg anthropic.Message
		if err := json.Unmarshal(raw, &msg); err != nil || msg.Type == "error" || len(msg.Content) == 0 && msg.StopReason == nil {
			return false, c.fail(apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_upstream_response",
				"backend %q answered 200 without a message; the body starts: %s", b.Name, quoteStart(raw, 200)))
		}
		completion = translate.AnthropicToChatCompletion(&msg, c.model)
	} else {
		if err := s.checkResult(c, raw); err != nil {
			return false, c.fail(err)
		}
		completion = new(openai.ChatCompletion)
		if err := json.Unmarshal(raw, completion); err != nil {
			return false, c.fail(apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_upstream_response",
				"backend %q answered with a completion the gateway cannot read: %v", b.Name, err))
		}
	}
	if completion.Usage != nil {
		c.usage, c.haveUsage = *completion.Usage, true
	}
	if c.stream {
		chat := raw // already a chat completion, unless an Anthropic backend sent it
		if anthropicBackend {
			if chat, err = json.Marshal(completion); err != nil {
				return false, c.fail(err)
			}
		}
		return s.hubCompletionAsStream(w, c, chat)
	}
	var out []byte
	if h.completeRaw != nil && !anthropicBackend {
		out, err = h.completeRaw(raw)
	} else {
		out, err = h.complete(completion)
	}
	if err != nil {
		return false, c.fail(err)
	}
	c.status = http.StatusOK
	w.Header()["Content-Type"] = []string{"application/json"}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	return true, nil
}

// relayHubStream reads the backend's stream, turns it into hub chat chunks
// (translating Anthropic events when needed), taps them for usage and
// timing, and writes the client's dialect.
//
// As for a chat stream (relayStream), the first event is read before
// anything is written: a backend that stalls past first_byte_timeout or
// dies before its first event fails the attempt uncommitted, so the router
// may try another deployment and the client gets an ordinary error answer
// in its protocol. Afterwards a failure (a cut, an idle gap longer than
// idle_timeout, the backend's timeout) ends the client's stream with the
// error event of its protocol, and is returned, committed, for the breaker.
func (s *Server) relayHubStream(w http.ResponseWriter, ctx context.Context, c *call, resp *http.Response, anthropicBackend bool, idle *idleGap) (bool, error) {
	rd, ev, sw, err := c.beginStream(w, resp, idle)
	if err != nil {
		return false, c.fail(s.hubStreamError(ctx, c, err, idle))
	}
	out := c.hub.stream()
	var up *translate.AnthropicToChatStream
	if anthropicBackend {
		up = translate.NewAnthropicToChatStream(c.model, true)
	}
	write := func(evs []translate.Event) bool {
		for _, ev := range evs {
			if err := sw.WriteEvent(ev.Name, ev.Data); err != nil {
				c.status, c.errType = 499, "client_closed"
				return false
			}
		}
		return true
	}
	// hubChunk handles one chat chunk (or the hub's [DONE]); it returns
	// false when the stream is over.
	hubChunk := func(data []byte) bool {
		if string(data) == "[DONE]" {
			write(out.Finish(nil))
			return false
		}
		if errData, isErr := streamErrorChunk(data); isErr {
			c.status, c.errType = http.StatusBadGateway, "upstream_stream_error"
			write(out.Finish(apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "upstream_stream_error",
				"backend %q reported an error mid-stream: %s", c.dep.Backend.Name, errorMessage(errData))))
			return false
		}
		if !c.tapChunk(data) {
			return true
		}
		evs, err := out.Feed(data)
		if !write(evs) {
			return false
		}
		if err != nil {
			write(out.Finish(err))
			c.status, c.errType = apierror.From(err).Status, apierror.From(err).Code
			return false
		}
		return true
	}
	// upstreamEvent handles one backend event; false when the stream is over.
	upstreamEvent := func(ev *sse.Event) bool {
		if !anthropicBackend {
			return hubChunk(ev.Data)
		}
		if ev.Name == "message_start" || ev.Name == "message_delta" {
			// The hub's usage chunk comes only at message_stop; a stream
			// cut before keeps the counts the backend gave so far.
			c.tapAnthropicUsage(ev.Data)
		}
		hevs, ferr := up.Feed(ev.Name, ev.Data)
		for _, hev := range hevs {
			if !hubChunk(hev.Data) {
				return false
			}
		}
		if ferr != nil || ev.Name == "message_stop" {
			for _, hev := range up.Finish(ferr) {
				if !hubChunk(hev.Data) {
					return false
				}
			}
			return false
		}
		return true
	}
	for upstreamEvent(ev) {
		if ev, err = rd.Next(); err != nil {
			e := c.streamBroke(s.hubStreamError(ctx, c, err, idle))
			if e == nil {
				return true, nil
			}
			// The client's translator gets e directly: routing it through
			// up.Finish would turn it into an in-band error chunk that
			// hubChunk reports as "the backend reported an error", wrapping
			// the message twice for a stream the backend merely cut.
			write(out.Finish(e))
			return true, e
		}
		idle.rearm()
	}
	return true, nil
}

// hubStreamError is streamError for a translated stream, whose end marker
// depends on the backend's dialect.
func (s *Server) hubStreamError(ctx context.Context, c *call, err error, idle *idleGap) *apierror.Error {
	e := s.streamError(ctx, c, err, idle)
	if e.Code == "stream_cut" {
		e.Message = fmt.Sprintf("backend %q ended the stream before it was complete; the answer is truncated", c.dep.Backend.Name)
	}
	return e
}

// streamErrorChunk reports whether a hub chunk is an in-band error object.
func streamErrorChunk(data []byte) ([]byte, bool) {
	if !strings.Contains(string(data), `"error"`) {
		return nil, false
	}
	sp, err := jsonscan.Find(data, "error", "choices")
	if err != nil || jsonscan.IsNull(data, sp[0]) || sp[1].Valid() {
		return nil, false
	}
	return data, true
}

// hubCompletionAsStream answers a streaming client whose backend ignored
// "stream" and sent one completion: the completion becomes the chat chunks
// a streaming backend would have sent (see relayJSONAsStream), and those go
// through the client's stream translator like any backend stream.
func (s *Server) hubCompletionAsStream(w http.ResponseWriter, c *call, completion []byte) (bool, error) {
	chunk, usageChunk, err := completionAsChunks(completion, true)
	if err != nil {
		return false, c.fail(apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_upstream_response",
			"backend %q answered a stream request with a completion the gateway cannot stream: %v", c.dep.Backend.Name, err))
	}
	sse.SetHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	c.status = http.StatusOK
	c.committed = true
	sw := sse.NewWriter(w)
	out := c.hub.stream()
	write := func(evs []translate.Event) bool {
		for _, ev := range evs {
			if err := sw.WriteEvent(ev.Name, ev.Data); err != nil {
				c.status, c.errType = 499, "client_closed"
				return false
			}
		}
		return true
	}
	for _, data := range [][]byte{chunk, usageChunk} {
		if data == nil || !c.tapChunk(data) {
			continue
		}
		evs, err := out.Feed(data)
		if !write(evs) {
			return true, nil
		}
		if err != nil {
			e := apierror.From(err)
			c.status, c.errType = e.Status, e.Code
			write(out.Finish(err))
			return true, nil
		}
	}
	write(out.Finish(nil))
	return true, nil
}
