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
	if !jsonscan.Valid(body) {
		off, desc := jsonscan.SyntaxOffset(body)
		return nil, apierror.InvalidRequest("invalid_json", "request body is not valid JSON: %s (at byte offset %d)", desc, off)
	}
	c.body = body
	return body, nil
}

// admitModel resolves the route, checks the key's allow-list and admission.
func (s *Server) admitModel(ctx context.Context, c *call, model string) error {
	route, err := s.route(c.principal, model)
	if err != nil {
		return err
	}
	c.model, c.route = model, route
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
		rateLimitHeaders(w, c.ticket)
		anthropic.RateLimitHeaders(w.Header(), time.Now())
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

// handleResponses serves the OpenAI Responses API for every model by
// translating to chat. With a response store, previous_response_id
// continues a stored conversation and the response is stored (unless
// store: false).
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	c := &call{ep: endpointResponses, start: time.Now(), principal: p, reqID: s.requestID(r), writeErr: openai.WriteError}
	w.Header()["X-Request-Id"] = []string{c.reqID}
	var req openai.ResponsesRequest
	err := s.decodeInto(w, r, c, &req)
	if err == nil {
		err = s.admitModel(r.Context(), c, req.Model)
		rateLimitHeaders(w, c.ticket)
	}
	var chat *openai.ChatCompletionRequest
	turn := turnItems(req.Input)
	if err == nil {
		c.stream = req.Stream
		tr := req // what the backend gets: the stored conversation, then this turn
		if req.PreviousResponseID != "" && s.responses != nil {
			var items []openai.InputItem
			if items, err = s.previousItems(r.Context(), p, req.PreviousResponseID); err == nil {
				tr.Input = openai.ResponsesInput{Items: append(items, turn...)}
				tr.PreviousResponseID = ""
			}
		}
		if err == nil {
			chat, err = translate.ResponsesToChat(&tr)
		}
	}
	if err != nil {
		s.refuse(w, c, err)
		return
	}
	storeID := ""
	if s.responses != nil && (req.Store == nil || *req.Store) {
		storeID = newResponseID()
	}
	save := func(resp *openai.Response) { s.saveResponse(r.Context(), c, p, resp, turn) }
	h := &hub{
		req: chat,
		complete: func(resp *openai.ChatCompletion) ([]byte, error) {
			out := translate.ChatToResponses(resp, &req)
			if storeID != "" {
				out.ID, out.Store = storeID, true
				save(out)
			}
			return json.Marshal(out)
		},
		stream: func() clientStream {
			t := translate.NewChatToResponsesStream(&req)
			if storeID == "" {
				return t
			}
			t.SetStored(storeID)
			return &storingStream{ChatToResponsesStream: t, save: save}
		},
	}
	s.forwardDialect(w, r, c, h)
}

// handleCountTokens answers /v1/messages/count_tokens: passed through to an
// Anthropic backend; for others counted by the backend's tokenizer (vLLM's
// POST /tokenize) when it has one, estimated locally otherwise.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request, p keys.Principal) {
	c := &call{ep: endpoint{name: "count_tokens"}, start: time.Now(), principal: p, reqID: s.requestID(r), writeErr: anthropic.WriteError}
	var req anthropic.MessagesRequest
	if err := s.decodeInto(w, r, c, &req); err != nil {
		anthropic.WriteError(w, err)
		return
	}
	route, err := s.route(p, req.Model)
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
	n, exact := s.tokenizeCount(r.Context(), dep, &req, c.reqID)
	source := "tokenizer"
	if !exact {
		n, source = translate.EstimateAnthropicInputTokens(&req), "estimate"
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(tokenCountHeader, source)
	_ = json.NewEncoder(w).Encode(map[string]int{"input_tokens": n})
}

// tokenCountHeader tells a count_tokens client where its count came from:
// "tokenizer" (the backend's own, exact) or "estimate" (llmgate's rule of
// thumb, see translate.EstimateAnthropicInputTokens).
const tokenCountHeader = "Llmgate-Token-Count"

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
		run := func(ctx context.Context, w http.ResponseWriter) (bool, error) {
			if c.ep.name == "messages" && dep.Backend.Dialect == config.DialectAnthropic {
				return s.attemptPassthroughAnthropic(ctx, w, c, dep)
			}
			return s.attemptHub(ctx, w, c, dep)
		}
		if dep.Backend.Acquire != nil && !leased(ctx) {
			// A local engine: start it or wait until ready, as for chat; a
			// streaming client gets SSE keep-alive comments meanwhile, and
			// a failure after them the error event of its protocol.
			return s.withEngine(ctx, w, c, dep, c.stream, run)
		}
		return run(ctx, w)
	})
	if err != nil {
		s.writeFail(w, c, err)
	}
	s.record(c)
}
