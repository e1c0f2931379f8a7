package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/jsonscan"
	"llmgate/internal/keys"
	"llmgate/internal/router"
	"llmgate/internal/sse"
	"llmgate/internal/tracing"
	"llmgate/internal/translate"
)

// Translation uses OpenAI chat as the hub: every client dialect is turned
// into a chat request, every backend answer into chat completions or
// chunks, and the client's own dialect is produced from those. The one
// exception is an Anthropic client on an Anthropic backend, which is passed
// through untouched.

// clientStream turns hub chat chunks into the client's stream events.
type clientStream interface {
	Feed(data []byte) ([]translate.Event, error)
	Finish(upstreamErr error) []translate.Event
}

// hub holds a translated request and how to answer the client.
type hub struct {
	req *openai.ChatCompletionRequest
	// complete renders a non-streaming hub completion for the client.
	complete func(*openai.ChatCompletion) ([]byte, error)
	// completeRaw, when set, renders a chat backend's raw body directly,
	// keeping fields the typed completion drops (vLLM's stop_reason,
	// reasoning).
	completeRaw func(raw []byte) ([]byte, error)
	// stream returns the client-side translator of a streaming answer.
	stream func() clientStream
}

// chatPassthrough is the clientStream of a chat client: chunks unchanged.
type chatPassthrough struct{}

func (chatPassthrough) Feed(data []byte) ([]translate.Event, error) {
	return []translate.Event{{Data: data}}, nil
}

func (chatPassthrough) Finish(err error) []translate.Event {
	if err != nil {
		return []translate.Event{{Data: openai.MarshalError(apierror.From(err))}}
	}
	return []translate.Event{{Data: translate.Done}}
}

// anthropicAPI wraps a Messages handler: method check and authentication
// with errors in the Anthropic envelope.
func (s *Server) anthropicAPI(h func(http.ResponseWriter, *http.Request, keys.Principal)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			anthropic.WriteError(w, apierror.Newf(http.StatusMethodNotAllowed, apierror.KindInvalidRequest, "method_not_allowed",
				"%s %s is not supported: use POST", r.Method, r.URL.Path))
			return
		}
		p, err := s.authenticate(r)
		if err != nil {
			anthropic.WriteError(w, err)
			return
		}
		h(w, r, p)
	})
}

// readJSON reads and validates a request body for the translated endpoints.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, c *call) ([]byte, error) {
	buf := getBuf() // not returned to the pool: the body lives as long as the call
	if err := s.readBody(w, r, buf); err != nil {
		return nil, err
	}
	body := buf.Bytes()
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, apierror.InvalidRequest("empty_body", "request body is empty: send a JSON object with model and the request")
	}
	if !json.Valid(body) {
		off, desc := jsonscan.SyntaxOffset(body)
		return nil, apierror.InvalidRequest("invalid_json", "request body is not valid JSON: %s (at byte offset %d)", desc, off)
	}
	c.body = body
	return body, nil
}

// admitModel resolves the route, checks the key's allow-list and admission.
func (s *Server) admitModel(ctx context.Context, c *call, model string) error {
	route, err := s.Table().Route(model)
	if err != nil {
		return err
	}
	c.model, c.route = model, route
	if !c.principal.Master && !c.principal.Key.Allows(model) {
		return apierror.Newf(http.StatusForbidden, apierror.KindPermission, "model_not_allowed",
			"API key %q may not use model %q; it may use: %s", c.principal.Key.Name, model, strings.Join(c.principal.Key.Models, ", "))
	}
	if s.admit != nil {
		c.ticket, err = s.admit.Admit(ctx, AdmitRequest{Principal: c.principal, Model: model, Endpoint: c.ep.name, Body: c.body})
	}
	return err
}

var (
	endpointMessages  = endpoint{"messages", "/chat/completions", "choices"}
	endpointResponses = endpoint{"responses", "/chat/completions", "choices"}
)

// handleMessages serves the Anthropic Messages API for every model.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	c := &call{ep: endpointMessages, start: time.Now(), principal: p, reqID: s.requestID(r), writeErr: anthropic.WriteError,
		anthropicBeta: r.Header.Get("Anthropic-Beta")}
	w.Header()["X-Request-Id"] = []string{c.reqID}
	var req anthropic.MessagesRequest
	err := s.decodeInto(w, r, c, &req)
	if err == nil {
		err = s.admitModel(r.Context(), c, req.Model)
	}
	var h *hub
	if err == nil {
		c.stream = req.Stream
		h, err = s.messagesHub(c, &req)
	}
	if err != nil {
		s.refuse(w, c, err)
		return
	}
	s.forwardDialect(w, r, c, h)
}

// messagesHub prepares the chat translation of a Messages request. It is
// built lazily per attempt target, but translated once.
func (s *Server) messagesHub(c *call, req *anthropic.MessagesRequest) (*hub, error) {
	if req.MaxTokens <= 0 {
		return nil, apierror.InvalidRequest("invalid_max_tokens", "max_tokens is required by the Messages API and must be positive")
	}
	chat, err := translate.AnthropicToChat(req)
	if err != nil {
		return nil, err
	}
	estimate := translate.EstimateAnthropicInputTokens(req)
	model := req.Model
	return &hub{
		req: chat,
		complete: func(resp *openai.ChatCompletion) ([]byte, error) {
			return json.Marshal(translate.ChatToAnthropic(resp, model))
		},
		completeRaw: func(raw []byte) ([]byte, error) {
			msg, err := translate.ChatBodyToAnthropic(raw, model)
			if err != nil {
				return nil, err
			}
			return json.Marshal(msg)
		},
		stream: func() clientStream { return translate.NewChatToAnthropicStream(model, estimate) },
	}, nil
}

// handleResponses serves the OpenAI Responses API (stateless) for every
// model by translating to chat.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	c := &call{ep: endpointResponses, start: time.Now(), principal: p, reqID: s.requestID(r), writeErr: openai.WriteError}
	w.Header()["X-Request-Id"] = []string{c.reqID}
	var req openai.ResponsesRequest
	err := s.decodeInto(w, r, c, &req)
	if err == nil {
		err = s.admitModel(r.Context(), c, req.Model)
	}
	var chat *openai.ChatCompletionRequest
	if err == nil {
		c.stream = req.Stream
		chat, err = translate.ResponsesToChat(&req)
	}
	if err != nil {
		s.refuse(w, c, err)
		return
	}
	h := &hub{
		req: chat,
		complete: func(resp *openai.ChatCompletion) ([]byte, error) {
			return json.Marshal(translate.ChatToResponses(resp, &req))
		},
		stream: func() clientStream { return translate.NewChatToResponsesStream(&req) },
	}
	s.forwardDialect(w, r, c, h)
}

// handleCountTokens answers /v1/messages/count_tokens: passed through to an
// Anthropic backend, estimated locally otherwise.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	c := &call{ep: endpoint{name: "count_tokens"}, start: time.Now(), principal: p, reqID: s.requestID(r), writeErr: anthropic.WriteError}
	var req anthropic.MessagesRequest
	if err := s.decodeInto(w, r, c, &req); err != nil {
		anthropic.WriteError(w, err)
		return
	}
	route, err := s.Table().Route(req.Model)
	if err != nil {
		anthropic.WriteError(w, err)
		return
	}
	dep := route.Deployments[0]
	if dep.Backend.Dialect == config.DialectAnthropic {
		body := setModel(c.body, dep.UpstreamModel)
		hr, err := dep.Backend.NewRequest(r.Context(), "/v1/messages/count_tokens", body, c.reqID)
		if err == nil {
			var resp *http.Response
			if resp, err = dep.Backend.Do(hr); err == nil {
				defer resp.Body.Close()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(resp.StatusCode)
				_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
				return
			}
		}
		anthropic.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"input_tokens": translate.EstimateAnthropicInputTokens(&req)})
}

// decodeInto reads the body and decodes it into v, with client-safe errors.
func (s *Server) decodeInto(w http.ResponseWriter, r *http.Request, c *call, v any) error {
	body, err := s.readJSON(w, r, c)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return apierror.InvalidRequest("invalid_request", "field %q has the wrong type: expected %s (at byte offset %d)", te.Field, te.Type, te.Offset)
		}
		return apierror.InvalidRequest("invalid_request", "invalid request: %v", err)
	}
	return nil
}

// refuse answers a request that never reached a backend.
func (s *Server) refuse(w http.ResponseWriter, c *call, err error) {
	c.writeErr(w, err)
	if c.model != "" {
		c.fail(err)
		s.record(c)
	}
}

// forwardDialect runs the attempts of a translated request and records it.
func (s *Server) forwardDialect(w http.ResponseWriter, r *http.Request, c *call, h *hub) {
	c.hub = h
	c.clientWantsUsage = true // translators need the usage chunk
	err := s.Table().Forward(r.Context(), c.route, func(ctx context.Context, dep router.Deployment) (committed bool, err error) {
		ctx, endSpan := s.traceAttempt(ctx, c, dep)
		t0 := time.Now()
		c.errType = "" // a failed earlier attempt must not mark a success
		defer func() {
			s.logAttempt(c, dep, t0, committed, err)
			endSpan(err)
		}()
		if b := dep.Backend; b.Acquire != nil && !leased(ctx) {
			// A local engine: start it or wait until ready, as for chat.
			// No SSE keep-alive here: an error after early headers would
			// need each dialect's own error event.
			release, aerr := b.Acquire(ctx, c.model)
			if aerr != nil {
				return false, c.fail(aerr)
			}
			ctx = context.WithValue(ctx, leaseKey{}, true)
			defer func() { err = release(err) }()
		}
		if c.ep.name == "messages" && dep.Backend.Dialect == config.DialectAnthropic {
			return s.attemptPassthroughAnthropic(ctx, w, c, dep)
		}
		return s.attemptHub(ctx, w, c, dep)
	})
	if err != nil {
		s.writeFail(w, c, err)
	}
	s.record(c)
}

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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if t := b.Timeout(); t > 0 {
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
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
	hr, err := b.NewRequest(ctx, path, body, c.reqID)
	if err != nil {
		return false, c.fail(err)
	}
	tracing.Inject(ctx, hr.Header)
	if c.stream {
		hr.Header["Accept"] = []string{"text/event-stream"}
	}
	resp, err := b.Do(hr)
	if err != nil {
		return false, c.fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return false, c.fail(s.upstreamError(c, resp))
	}
	if c.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		s.relayHubStream(w, ctx, c, resp, anthropicBackend)
		return true, nil
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
func (s *Server) relayHubStream(w http.ResponseWriter, ctx context.Context, c *call, resp *http.Response, anthropicBackend bool) {
	sse.SetHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	c.status = http.StatusOK
	sw := sse.NewWriter(w)
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
	finished := false
	hubChunk := func(data []byte) bool {
		if string(data) == "[DONE]" {
			finished = true
			write(out.Finish(nil))
			return false
		}
		if errData, isErr := streamErrorChunk(data); isErr {
			c.status, c.errType = http.StatusBadGateway, "upstream_stream_error"
			finished = true
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
			finished = true
			write(out.Finish(err))
			c.status, c.errType = apierror.From(err).Status, apierror.From(err).Code
			return false
		}
		return true
	}
	rd := sse.NewReader(resp.Body, 0)
	for {
		ev, err := rd.Next()
		if err != nil {
			if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
				c.status, c.errType = 499, "client_closed"
				return
			}
			if finished {
				return
			}
			var e *apierror.Error
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				e = apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "stream_cut",
					"backend %q ended the stream before it was complete; the answer is truncated", c.dep.Backend.Name)
			} else {
				e = c.dep.Backend.Classify(ctx, err)
			}
			// The client's translator gets e directly: routing it through
			// up.Finish would turn it into an in-band error chunk that
			// hubChunk reports as "the backend reported an error", wrapping
			// the message twice for a stream the backend merely cut.
			c.status, c.errType = e.Status, e.Code
			write(out.Finish(e))
			return
		}
		if !anthropicBackend {
			if !hubChunk(ev.Data) {
				return
			}
			continue
		}
		hevs, ferr := up.Feed(ev.Name, ev.Data)
		for _, hev := range hevs {
			if !hubChunk(hev.Data) {
				return
			}
		}
		if ferr != nil {
			for _, hev := range up.Finish(ferr) {
				if !hubChunk(hev.Data) {
					return
				}
			}
			return
		}
		if ev.Name == "message_stop" {
			for _, hev := range up.Finish(nil) {
				if !hubChunk(hev.Data) {
					return
				}
			}
			return
		}
	}
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

// attemptPassthroughAnthropic relays a Messages request to an Anthropic
// backend untouched (model name rewritten), tapping usage.
func (s *Server) attemptPassthroughAnthropic(ctx context.Context, w http.ResponseWriter, c *call, dep router.Deployment) (bool, error) {
	c.dep = dep
	b := dep.Backend
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if t := b.Timeout(); t > 0 {
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	hr, err := b.NewRequest(ctx, "/v1/messages", anthropicPassthroughBody(c.body, dep.UpstreamModel), c.reqID)
	if err != nil {
		return false, c.fail(err)
	}
	tracing.Inject(ctx, hr.Header)
	if beta := c.anthropicBeta; beta != "" {
		hr.Header.Set("Anthropic-Beta", beta)
	}
	resp, err := b.Do(hr)
	if err != nil {
		return false, c.fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return false, c.fail(s.upstreamError(c, resp))
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
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
	sse.SetHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	c.status = http.StatusOK
	sw := sse.NewWriter(w)
	rd := sse.NewReader(resp.Body, 0)
	for {
		ev, err := rd.Next()
		if err != nil {
			if ctx.Err() != nil {
				c.status, c.errType = 499, "client_closed"
				return true, nil
			}
			if c.status == http.StatusOK && c.errType == "" && c.sawStop {
				return true, nil
			}
			e := apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "stream_cut",
				"backend %q ended the stream before message_stop; the answer is truncated", b.Name)
			c.status, c.errType = e.Status, e.Code
			_ = sw.WriteEvent("error", anthropic.MarshalError(e))
			return true, nil
		}
		c.tapAnthropicEvent(ev.Name, ev.Data)
		if err := sw.WriteEvent(ev.Name, ev.Data); err != nil {
			c.status, c.errType = 499, "client_closed"
			return true, nil
		}
	}
}

// tapAnthropicEvent takes usage and timing from a passed-through event.
func (c *call) tapAnthropicEvent(name string, data []byte) {
	switch name {
	case "message_start", "message_delta":
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
	case "content_block_delta":
		if c.ttft == 0 {
			c.ttft = time.Since(c.start)
		}
		c.outChars += approxGeneratedChars(data)
	case "message_stop":
		c.sawStop = true
	case "error":
		c.status, c.errType = http.StatusBadGateway, "upstream_stream_error"
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

// handleResponseLookup answers GET/DELETE /v1/responses/{id}: the gateway is
// stateless, so stored responses do not exist.
func (s *Server) handleResponseLookup(w http.ResponseWriter, r *http.Request) {
	openai.WriteError(w, apierror.New(http.StatusNotFound, apierror.KindNotFound, "response_not_stored",
		"llmgate does not store responses (it serves the Responses API statelessly, as with store: false): send the full conversation as input instead of previous_response_id or a response id"))
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
