package codec

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
	"llmgate/internal/jsonscan"
	"llmgate/internal/translate"
)

// Form is the shape of the events an upstream decoder produces and an
// encoder takes: OpenAI chat (or completions) chunks and bodies, or
// Anthropic Messages events and bodies.
type Form uint8

// The event forms.
const (
	FormOpenAI Form = iota
	FormAnthropic
)

// Target is the deployment a request is built for.
type Target struct {
	Backend       string // name, for error messages
	Dialect       dialect.Dialect
	UpstreamModel string
	// DropParams are top-level members removed from the body (the
	// backend's drop_params; never a decision field).
	DropParams []string
}

// Outbound is the request one deployment gets.
type Outbound struct {
	// Path follows the backend's base URL.
	Path string
	// Count: nothing is sent; the relay counts the prompt with the
	// engine's own tokenizer (count_tokens on an OpenAI-dialect backend).
	Count bool
	Body  []byte
	// Beta is the anthropic-beta header to send, if any.
	Beta string
}

// FormFor is the form a backend of dialect backend answers a client of
// dialect d in, once decoded: Anthropic clients of Anthropic backends see
// the backend's own events; every other pair goes through OpenAI chat.
func FormFor(d Dialect, backend dialect.Dialect) Form {
	if backend == dialect.Anthropic && (d == Messages || d == CountTokens) {
		return FormAnthropic
	}
	return FormOpenAI
}

// Outbound builds what the target gets. Passthrough pairs (an OpenAI
// client on an OpenAI backend, an Anthropic client on an Anthropic one)
// send the client's bytes with the model renamed and, for streams, the
// usage chunk asked for; the other pairs send the hub translation built
// from the decoded request.
func (r *Request) Outbound(t Target) (Outbound, error) {
	out, err := r.outbound(t)
	if err == nil && len(t.DropParams) > 0 && !out.Count {
		out.Body = jsonscan.Without(out.Body, t.DropParams)
	}
	return out, err
}

func (r *Request) outbound(t Target) (Outbound, error) {
	anthropicBackend := t.Dialect == dialect.Anthropic
	switch {
	case r.Dialect == CountTokens && anthropicBackend:
		return Outbound{Path: "/v1/messages/count_tokens", Body: r.patch(t.UpstreamModel), Beta: r.AnthropicBeta}, nil
	case r.Dialect == CountTokens:
		// Checked here so that a request the translation refuses gets its
		// own message; the count itself is the relay's.
		if _, _, err := r.CountPrompt(); err != nil {
			return Outbound{}, err
		}
		return Outbound{Count: true}, nil
	case r.Dialect == Messages && anthropicBackend:
		return Outbound{Path: "/v1/messages", Body: r.anthropicPassthrough(t.UpstreamModel), Beta: r.AnthropicBeta}, nil
	case anthropicBackend && r.Dialect != Chat && r.Dialect != Responses:
		return Outbound{}, apierror.Newf(http.StatusBadRequest, apierror.KindInvalidRequest, "unsupported_endpoint",
			"model %q is served by an Anthropic backend, which has no %s endpoint; use /v1/chat/completions, /v1/responses or /v1/messages",
			r.Model, dialects[r.Dialect].path)
	case anthropicBackend:
		hub, err := r.Hub()
		if err != nil {
			return Outbound{}, err
		}
		ar, err := translate.ChatToAnthropicRequest(hub)
		if err != nil {
			return Outbound{}, err
		}
		ar.Model, ar.Stream = t.UpstreamModel, r.Stream
		if r.fitted && ar.MaxTokens > r.OutputLimit {
			ar.MaxTokens = r.OutputLimit
			fitThinking(ar)
		}
		body, err := json.Marshal(ar)
		return Outbound{Path: "/v1/messages", Body: body}, err
	case r.Dialect == Messages || r.Dialect == Responses:
		hub, err := r.Hub()
		if err != nil {
			return Outbound{}, err
		}
		req := *hub
		req.Model, req.Stream, req.StreamOptions = t.UpstreamModel, r.Stream, nil
		if r.Stream {
			req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		}
		if r.fitted {
			req.MaxTokens, req.MaxCompletionTokens = capped(req.MaxTokens, r.OutputLimit), capped(req.MaxCompletionTokens, r.OutputLimit)
		}
		body, err := json.Marshal(&req)
		return Outbound{Path: dialects[r.Dialect].path, Body: body}, err
	default: // an OpenAI client on an OpenAI backend
		return Outbound{Path: dialects[r.Dialect].path, Body: r.patch(t.UpstreamModel)}, nil
	}
}

// capped returns p lowered to n (nil stays nil).
func capped(p *int, n int) *int {
	if p == nil || *p <= n {
		return p
	}
	return &n
}

// edit replaces span with val (an empty span at s.Start inserts).
type edit struct {
	span jsonscan.Span
	val  []byte
}

// patch returns the client's body with the model renamed and, for a
// stream, stream_options asking for the usage chunk. Only the decision
// fields Decode proved unique are touched; everything else is the
// client's bytes.
func (r *Request) patch(model string) []byte {
	var edits [2 + len(limitFields)]edit
	n := 0
	if r.fitted {
		limit := []byte(strconv.Itoa(r.OutputLimit))
		for _, f := range limitFields {
			if v, ok, _ := r.intField(f, -1); ok && v > r.OutputLimit {
				edits[n] = edit{r.fields[f], limit}
				n++
			}
		}
	}
	if s := r.fields[fModel]; s.Valid() && model != r.Model {
		q, _ := json.Marshal(model)
		edits[n] = edit{s, q}
		n++
	}
	if r.Stream && (r.Dialect == Chat || r.Dialect == Completions) && !r.WantsUsage {
		s := r.fields[fStreamOptions]
		if jsonscan.IsNull(r.Body, s) {
			if !s.Valid() { // absent: insert as the first member
				i := bytes.IndexByte(r.Body, '{') + 1
				edits[n] = edit{jsonscan.Span{Start: i, End: i}, []byte(`"stream_options":{"include_usage":true},`)}
				if j := skipWS(r.Body, i); j < len(r.Body) && r.Body[j] == '}' { // an empty object
					edits[n].val = edits[n].val[:len(edits[n].val)-1]
				}
			} else {
				edits[n] = edit{s, []byte(`{"include_usage":true}`)}
			}
		} else {
			var opts map[string]json.RawMessage
			_ = json.Unmarshal(r.Body[s.Start:s.End], &opts) // Decode checked it is an object
			opts["include_usage"] = json.RawMessage("true")
			b, _ := json.Marshal(opts)
			edits[n] = edit{s, b}
		}
		n++
	}
	return apply(r.Body, edits[:n])
}

// apply makes non-overlapping edits to doc in one copy; doc is unchanged.
func apply(doc []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return doc
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].span.Start < edits[j].span.Start })
	size := len(doc)
	for _, e := range edits {
		size += len(e.val) - (e.span.End - e.span.Start)
	}
	out := make([]byte, 0, size)
	at := 0
	for _, e := range edits {
		out = append(out, doc[at:e.span.Start]...)
		out = append(out, e.val...)
		at = e.span.End
	}
	return append(out, doc[at:]...)
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// anthropicPassthrough is the body of a Messages request to an Anthropic
// backend: the client's, with the model renamed. History produced by a chat
// backend carries thinking blocks with empty signatures, which Anthropic
// rejects; those are dropped (the body is then re-encoded). A client's n,
// best_of or n_cmpl is dropped too (see Request.Choices).
func (r *Request) anthropicPassthrough(model string) []byte {
	var drop []string
	for _, f := range choiceFields {
		if r.fields.has(f) {
			drop = append(drop, fieldNames[f])
		}
	}
	if len(drop) > 0 {
		// The Messages API has no choices, and the gateway reserves for
		// one: a backend that took n from the body would generate more.
		return jsonscan.Without(r.anthropicPassthroughBody(model), drop)
	}
	return r.anthropicPassthroughBody(model)
}

func (r *Request) anthropicPassthroughBody(model string) []byte {
	if !hasUnsignedThinking(r.Messages) {
		return r.patch(model)
	}
	var req anthropic.MessagesRequest // a fresh copy: the drop edits blocks in place
	if json.Unmarshal(r.Body, &req) != nil || !translate.DropUnsignedThinking(&req) {
		return r.patch(model)
	}
	req.Model = model
	if r.fitted && req.MaxTokens > r.OutputLimit {
		req.MaxTokens = r.OutputLimit
	}
	out, err := json.Marshal(&req)
	if err != nil {
		return r.patch(model)
	}
	return out
}

// minThinkingBudget is the smallest budget_tokens Anthropic takes.
const minThinkingBudget = 1024

// fitThinking keeps an enabled thinking budget below a lowered max_tokens,
// as Anthropic requires: half of it for thinking, at least the minimum
// budget, or no thinking when max_tokens leaves no room for that.
func fitThinking(ar *anthropic.MessagesRequest) {
	t := ar.Thinking
	if t == nil || t.Type != "enabled" || t.BudgetTokens < ar.MaxTokens {
		return
	}
	if ar.MaxTokens <= minThinkingBudget {
		ar.Thinking = nil
		return
	}
	th := *t
	th.BudgetTokens = max(ar.MaxTokens/2, minThinkingBudget)
	ar.Thinking = &th
}

// hasUnsignedThinking reports whether an assistant turn of req holds a
// thinking block without a signature (DropUnsignedThinking's work).
func hasUnsignedThinking(req *anthropic.MessagesRequest) bool {
	if req == nil {
		return false
	}
	for i := range req.Messages {
		if req.Messages[i].Role != anthropic.RoleAssistant {
			continue
		}
		for _, b := range req.Messages[i].Content.Blocks {
			if b.Type == "thinking" && b.Signature == "" {
				return true
			}
		}
	}
	return false
}

// errNotCountable is CountPrompt's answer for a prompt an engine's
// tokenizer endpoint cannot count (a list prompt, embeddings).
var errNotCountable = apierror.InvalidRequest("invalid_request", "the request's prompt cannot be counted by the backend's tokenizer")

// CountPrompt is what the engine reads of this request, for counting it
// with the engine's own tokenizer and chat template: the chat messages and
// tools for chat-like dialects (the translation the backend gets), or the
// prompt for completions (chat is nil). A prompt that cannot be counted
// that way (a list prompt, embeddings) is an error.
func (r *Request) CountPrompt() (chat *openai.ChatCompletionRequest, prompt string, err error) {
	switch r.Dialect {
	case Completions:
		prompt, isString := jsonscan.String(r.Body, r.fieldSpan("prompt"))
		if !isString {
			return nil, "", errNotCountable
		}
		return nil, prompt, nil
	case CountTokens:
		// count_tokens takes a Messages body without max_tokens, which the
		// translation requires; the tokenizer does not look at it.
		if err := r.checkExpansion(r.Messages); err != nil {
			return nil, "", err
		}
		m := *r.Messages
		m.MaxTokens, m.Stream = 1, false
		chat, err = translate.AnthropicToChatWith(&m, r.chatOpts)
	case Chat, Messages, Responses:
		chat, err = r.Hub()
	default:
		return nil, "", errNotCountable
	}
	if err != nil {
		return nil, "", err // what is wrong with the request, in its own words
	}
	return chat, "", nil
}

// fieldSpan finds a top-level member that is not a decision field.
func (r *Request) fieldSpan(name string) jsonscan.Span {
	sp, _ := jsonscan.Find(r.Body, name)
	if len(sp) == 0 {
		return jsonscan.Span{}
	}
	return sp[0]
}

// EstimateInputTokens is llmgate's own count of a count_tokens request,
// for backends without a tokenizer.
func (r *Request) EstimateInputTokens() int {
	return translate.EstimateAnthropicInputTokens(r.Messages)
}
