// Package codec decodes each client dialect once into a request value,
// builds what a backend of either dialect gets from that value, decodes
// the backend's answer into one internal event stream, and encodes those
// events (and errors) in the client's dialect.
//
// The gateway decides on the decoded value (model, every token-limit
// alias, stream, n, tools): what goes upstream is either built from it
// (translated dialects) or the client's own bytes, which Decode has proved
// carry exactly one, canonically spelled member for each of those fields,
// so no reader — Go's case-insensitive encoding/json, Python's last-wins
// json — can see another value than the gateway did. Unknown fields pass
// through untouched.
package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
	"llmgate/internal/jsonscan"
	"llmgate/internal/sat"
	"llmgate/internal/translate"
	"llmgate/internal/usage"
)

// Dialect is a client API the gateway serves.
type Dialect uint8

// The client dialects.
const (
	Chat Dialect = iota
	Completions
	Embeddings
	Rerank
	Responses
	Messages
	CountTokens
)

type dialectInfo struct {
	name      string // ledger endpoint name
	path      string // path on an OpenAI-dialect backend, after its base URL
	required  string // top-level key of a real result from such a backend
	streams   bool   // the dialect can stream
	anthropic bool   // errors and answers in Anthropic's envelope
}

var dialects = [...]dialectInfo{
	Chat:        {"chat", "/chat/completions", "choices", true, false},
	Completions: {"completions", "/completions", "choices", true, false},
	Embeddings:  {"embeddings", "/embeddings", "data", false, false},
	Rerank:      {"rerank", "/rerank", "results", false, false},
	Responses:   {"responses", "/chat/completions", "choices", true, false},
	Messages:    {"messages", "/chat/completions", "choices", true, true},
	CountTokens: {"count_tokens", "", "input_tokens", false, true},
}

// Name is the dialect's endpoint name in the ledger and metrics.
func (d Dialect) Name() string { return dialects[d].name }

// Anthropic reports whether the dialect answers in Anthropic's envelope.
func (d Dialect) Anthropic() bool { return dialects[d].anthropic }

// Generates reports whether the dialect's answers contain generated tokens.
func (d Dialect) Generates() bool {
	return d == Chat || d == Completions || d == Responses || d == Messages
}

// Request is a client request decoded once. It is not changed after
// Decode; derived forms (the chat translation) are computed on first use.
type Request struct {
	Dialect Dialect
	// Body is the client's body as read; it is never modified.
	Body  []byte
	Model string
	// Stream is the client's "stream": true.
	Stream bool
	// WantsUsage: a streaming chat or completions client asked for the
	// usage chunk itself (stream_options.include_usage). The gateway
	// always asks the backend for it and drops it when the client did not.
	WantsUsage bool
	// OutputLimit is the largest token-limit alias present (max_tokens,
	// max_completion_tokens, max_output_tokens, max_new_tokens, n_predict):
	// what a backend honouring any of them may produce per choice. Zero
	// when none is set.
	OutputLimit int
	// Choices is the number of sequences generated per prompt (n,
	// best_of, llama.cpp's n_cmpl: the largest), at least 1 and at most
	// MaxChoices. Always 1 for Messages and Responses, whose APIs have no
	// such field and whose backends are never sent one.
	Choices int
	// Prompts is the number of prompts a completions request gives (a
	// list of strings or of token-id lists): the engine generates Choices
	// sequences for each. At least 1.
	Prompts int
	// AnthropicBeta is the client's anthropic-beta header, passed to
	// Anthropic backends.
	AnthropicBeta string

	fields fields // where the decision fields are in Body
	// promptIDs is the number of token ids the prompt (completions) or
	// input (embeddings) gives as numbers, and idBytes the bytes they take
	// in Body: such a prompt is counted by its ids, not its bytes.
	promptIDs int64
	idBytes   int

	// Typed forms, for the dialects that are always translated or read.
	Messages     *anthropic.MessagesRequest
	ResponsesReq *openai.ResponsesRequest
	// responsesIn, when set, is ResponsesReq with a stored conversation
	// before this turn's input: what the backend gets.
	responsesIn *openai.ResponsesRequest
	// fitted: OutputLimit was lowered to fit the model's context; every
	// limit field above it is rewritten to it.
	fitted bool
	// chatOpts shape the translation to chat (the model's reasoning
	// mapping, where system messages go).
	chatOpts dialect.ChatOptions

	hubOnce sync.Once
	hub     *openai.ChatCompletionRequest
	hubErr  error
}

// field identifies a decision field: one the gateway routes, admits,
// prices or translates on.
type field uint8

const (
	fModel field = iota
	fStream
	fStreamOptions
	fMaxTokens
	fMaxCompletionTokens
	fMaxOutputTokens
	fMaxNewTokens
	fNPredict
	fN
	fBestOf
	fNCmpl
	fTools
	fToolChoice
	fThinking
	fPreviousResponseID
	fStore
	fPrompt // completions only
	fInput  // embeddings only
	numFields
)

var fieldNames = [numFields]string{
	fModel: "model", fStream: "stream", fStreamOptions: "stream_options",
	fMaxTokens: "max_tokens", fMaxCompletionTokens: "max_completion_tokens", fMaxOutputTokens: "max_output_tokens",
	fMaxNewTokens: "max_new_tokens", fNPredict: "n_predict", fN: "n", fBestOf: "best_of", fNCmpl: "n_cmpl",
	fTools: "tools", fToolChoice: "tool_choice", fThinking: "thinking",
	fPreviousResponseID: "previous_response_id", fStore: "store",
	fPrompt: "prompt", fInput: "input",
}

// otherDialects reports whether f is a decision field of another dialect
// alone ("prompt" of completions, "input" of embeddings): here an ordinary
// member (Responses decodes its own "input").
func otherDialects(f field, d Dialect) bool {
	return f == fPrompt && d != Completions || f == fInput && d != Embeddings
}

// choiceFields are the members engines read as the number of choices:
// n, best_of (sequences generated, the best returned) and llama.cpp's
// n_cmpl (its own name for n).
var choiceFields = [...]field{fN, fBestOf, fNCmpl}

// limitFields are the token-limit aliases engines honour for output length.
var limitFields = [...]field{fMaxTokens, fMaxCompletionTokens, fMaxOutputTokens, fMaxNewTokens, fNPredict}

type fields [numFields]jsonscan.Span

func (f *fields) has(x field) bool { return f[x].Valid() }

// Decode reads a client body of dialect d once: it must be one JSON object
// whose decision fields each appear at most once, spelled as the API spells
// them, with the JSON type the API gives them.
func Decode(d Dialect, body []byte) (*Request, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, apierror.InvalidRequest("empty_body", `request body is empty: send a JSON object such as {"model": "...", %s}`, example(d))
	}
	if !jsonscan.Valid(body) {
		off, desc := jsonscan.SyntaxOffset(body)
		return nil, apierror.InvalidRequest("invalid_json", "request body is not valid JSON: %s (at byte offset %d)", desc, off)
	}
	r := &Request{Dialect: d, Body: body, Choices: 1, Prompts: 1}
	if err := r.scan(); err != nil {
		return nil, err
	}
	if err := r.readFields(); err != nil {
		return nil, err
	}
	switch d {
	case Messages, CountTokens:
		var m anthropic.MessagesRequest
		if err := decodeTyped(body, &m); err != nil {
			return nil, err
		}
		if d == Messages && m.MaxTokens <= 0 {
			return nil, param(apierror.InvalidRequest("invalid_max_tokens", "max_tokens is required by the Messages API and must be positive"), "max_tokens")
		}
		r.Messages = &m
	case Responses:
		var q openai.ResponsesRequest
		if err := decodeTyped(body, &q); err != nil {
			return nil, err
		}
		r.ResponsesReq = &q
	}
	return r, nil
}

func example(d Dialect) string {
	switch d {
	case Embeddings:
		return `"input": "..."`
	case Rerank:
		return `"query": "...", "documents": [...]`
	case Completions:
		return `"prompt": "..."`
	case Responses:
		return `"input": "..."`
	}
	return `"messages": [...]`
}

// scan finds the decision fields among the top-level members in one pass.
// A field given twice, or in another spelling that some JSON decoder would
// take for it (another case, a Unicode fold such as the Kelvin sign for k,
// a \u escape), is refused: a backend could read another member than the
// gateway did.
func (r *Request) scan() error {
	var bad error
	err := jsonscan.Members(r.Body, func(key []byte, escaped bool, val jsonscan.Span) bool {
		f, exact := lookupField(key)
		exact = exact && !escaped
		if f == numFields {
			return true
		}
		if otherDialects(f, r.Dialect) {
			return true
		}
		name := fieldNames[f]
		switch {
		case r.fields.has(f):
			bad = param(apierror.InvalidRequest("duplicate_field",
				"the request body has the field %q more than once: send it once (JSON decoders disagree on which copy wins)", name), name)
		case !exact:
			bad = param(apierror.InvalidRequest("noncanonical_field",
				"the request body spells the field %q as %q: write it exactly %q, in lower case and without escapes", name, string(key), name), name)
		default:
			r.fields[f] = val
			return true
		}
		return false
	})
	if errors.Is(err, jsonscan.ErrNotObject) {
		return apierror.InvalidRequest("invalid_body", "request body must be a JSON object, such as {\"model\": \"...\", %s}", example(r.Dialect))
	}
	if err != nil {
		return apierror.InvalidRequest("invalid_body", "%v", err)
	}
	return bad
}

// lookupField returns the decision field a key names (numFields for none)
// and whether it is spelled exactly. Keys arrive unescaped; a key that only
// matches after case or Unicode folding is a non-exact match.
func lookupField(key []byte) (field, bool) {
	for f, name := range fieldNames {
		if string(key) == name {
			return field(f), true
		}
	}
	// Plain lower-case ASCII keys cannot fold onto a field name.
	folds := false
	for _, c := range key {
		if c >= 0x80 || (c >= 'A' && c <= 'Z') {
			folds = true
			break
		}
	}
	if !folds {
		return numFields, false
	}
	k := string(key)
	for f, name := range fieldNames {
		if strings.EqualFold(k, name) {
			return field(f), false
		}
	}
	return numFields, false
}

// readFields checks the JSON types of the decision fields and takes their
// values.
func (r *Request) readFields() error {
	b, f := r.Body, &r.fields
	if s := f[fModel]; s.Valid() && !jsonscan.IsNull(b, s) {
		m, ok := jsonscan.String(b, s)
		if !ok || !utf8.ValidString(m) { // Go decoders read invalid UTF-8 as U+FFFD, Python refuses it
			return param(apierror.InvalidRequest("invalid_model", `"model" must be a string naming one of the gateway's models (GET /v1/models lists them)`), "model")
		}
		r.Model = m
	}
	if s := f[fStream]; s.Valid() {
		switch string(b[s.Start:s.End]) {
		case "true":
			r.Stream = true
		case "false", "null":
		default:
			return param(apierror.InvalidRequest("invalid_stream", `"stream" must be true or false`), "stream")
		}
	}
	if !dialects[r.Dialect].streams {
		r.Stream = false // embeddings, rerank and counts have no stream form: the backend answers once
	}
	if s := f[fStreamOptions]; s.Valid() && !jsonscan.IsNull(b, s) {
		var opts map[string]json.RawMessage
		if json.Unmarshal(b[s.Start:s.End], &opts) != nil {
			return param(apierror.InvalidRequest("invalid_stream_options", `"stream_options" must be an object such as {"include_usage": true}`), "stream_options")
		}
		r.WantsUsage = string(bytes.TrimSpace(opts["include_usage"])) == "true"
	}
	for _, lf := range limitFields {
		n, ok, err := r.intField(lf, -1)
		if err != nil {
			return err
		}
		if ok && n > r.OutputLimit {
			r.OutputLimit = n
		}
	}
	if r.Dialect == Chat || r.Dialect == Completions { // Messages and Responses have no choices: see Choices
		for _, cf := range choiceFields {
			n, ok, err := r.choicesField(cf)
			if err != nil {
				return err
			}
			if ok && n > r.Choices {
				r.Choices = n
			}
		}
	}
	switch r.Dialect {
	case Completions:
		r.countPrompts(r.fields[fPrompt], true)
	case Embeddings:
		r.countPrompts(r.fields[fInput], false)
	}
	return nil
}

// maxInt bounds integer fields: larger values are refused rather than
// wrapped (no engine generates 2^31 tokens).
const maxInt = 1 << 31

// MaxChoices bounds n and best_of: the sequences one request may generate
// per prompt. OpenAI's own limit on n is 128; every choice reserves the
// whole output limit against the key's budget, so more is refused with a
// 400 that says to send several requests.
const MaxChoices = 128

// intField reads an integer decision field: absent or null is ok=false;
// anything but a whole number between min and maxInt is a 400 naming it.
// 1000.0 and 1e3 are whole numbers, as Python's validators take them.
func (r *Request) intField(f field, min int) (n int, ok bool, err error) {
	return r.boundedInt(f, min, maxInt, "")
}

// choicesField reads n or best_of: a whole number from 1 to MaxChoices.
func (r *Request) choicesField(f field) (n int, ok bool, err error) {
	return r.boundedInt(f, 1, MaxChoices,
		"; the gateway generates at most "+strconv.Itoa(MaxChoices)+" choices per request: for more, send several requests")
}

func (r *Request) boundedInt(f field, min, most int, hint string) (n int, ok bool, err error) {
	s := r.fields[f]
	if jsonscan.IsNull(r.Body, s) {
		return 0, false, nil
	}
	name := fieldNames[f]
	v, perr := strconv.ParseFloat(string(r.Body[s.Start:s.End]), 64)
	if perr != nil || v != math.Trunc(v) || v < float64(min) || v > float64(most) {
		return 0, false, param(apierror.InvalidRequest("invalid_"+name, "%q must be a whole number between %d and %d, not %s%s",
			name, min, most, truncate(string(r.Body[s.Start:s.End]), 40), hint), name)
	}
	return int(v), true, nil
}

// otherPromptTokens estimates the tokens of a completions request's
// prompts after the first, given the first one's exact count: a prompt of
// token ids counts one token an id; a text prompt counts at the first
// text prompt's characters per token (4 a token, one a CJK character,
// when the first is not text).
func (r *Request) otherPromptTokens(firstTokens int) int {
	s := r.fields[fPrompt]
	if r.Prompts < 2 || !s.Valid() || r.Body[s.Start] != '[' {
		return 0
	}
	list := r.Body[s.Start:s.End]
	firstChars, n := 0, 0
	_ = jsonscan.Elements(list, func(i int, v jsonscan.Span) bool {
		e := list[v.Start:v.End]
		if e[0] == '[' {
			if i > 0 {
				ids, _ := jsonscan.Len(e)
				n += ids
			}
			return true
		}
		var text string
		if json.Unmarshal(e, &text) != nil {
			return true
		}
		chars := utf8.RuneCountInString(text)
		if i == 0 {
			firstChars = chars
		} else if k, ok := tokensLike(chars, firstChars, firstTokens); ok {
			n += k
		} else {
			n += usage.EstimateTokens(text)
		}
		return true
	})
	return n
}

// countPrompts reads a completions prompt or an embeddings input: a list
// of strings or of token-id lists is that many prompts (the engine
// generates for each), and token ids given as numbers are counted one
// token each (two bytes of "1," are one token, not half of one). Shapes
// the API does not take are left to the backend to refuse; they count as
// one prompt.
func (r *Request) countPrompts(s jsonscan.Span, generates bool) {
	b := r.Body
	if !s.Valid() || b[s.Start] != '[' {
		return
	}
	list := b[s.Start:s.End]
	prompts, ids := 0, int64(0)
	_ = jsonscan.Elements(list, func(_ int, v jsonscan.Span) bool {
		switch c := list[v.Start]; {
		case c == '[': // one prompt of token ids
			prompts++
			n, _ := jsonscan.Len(list[v.Start:v.End])
			ids += int64(n)
			r.idBytes += v.End - v.Start
		case c == '-' || c >= '0' && c <= '9': // the list itself is one prompt of token ids
			ids++
		default:
			prompts++
		}
		return true
	})
	if prompts == 0 && ids > 0 { // [1, 2, 3]: one prompt
		prompts, r.idBytes = 1, s.End-s.Start
	}
	r.promptIDs = ids
	if generates {
		r.Prompts = max(prompts, 1)
	}
}

// decodeTyped decodes a whole body into a wire type, with client-safe
// errors.
func decodeTyped(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return param(apierror.InvalidRequest("invalid_request", "field %q has the wrong type: expected %s (at byte offset %d)", te.Field, te.Type, te.Offset), te.Field)
		}
		return apierror.InvalidRequest("invalid_request", "invalid request: %v", err)
	}
	return nil
}

// Hub returns the request translated to OpenAI chat, the form every
// translation goes through. It is computed once.
func (r *Request) Hub() (*openai.ChatCompletionRequest, error) {
	r.hubOnce.Do(func() {
		switch r.Dialect {
		case Chat:
			var c openai.ChatCompletionRequest
			if err := decodeTyped(r.Body, &c); err != nil {
				r.hubErr = err
				return
			}
			r.hub = &c
		case Messages:
			if r.hubErr = r.checkExpansion(r.Messages); r.hubErr != nil {
				return
			}
			r.hub, r.hubErr = translate.AnthropicToChatWith(r.Messages, r.chatOpts)
		case Responses:
			in := r.ResponsesReq
			if r.responsesIn != nil {
				in = r.responsesIn
			}
			r.hub, r.hubErr = translate.ResponsesToChatWith(in, r.chatOpts)
		default:
			r.hubErr = apierror.InvalidRequest("unsupported_endpoint", "%s requests cannot be translated", r.Dialect.Name())
		}
	})
	return r.hub, r.hubErr
}

// WithResponsesInput returns a copy of a Responses request whose backend
// input is items (a stored conversation followed by this turn), without
// previous_response_id: what the backend needs to continue it. The client's
// own request (ResponsesReq) is kept for the answer, which echoes it.
func (r *Request) WithResponsesInput(items []openai.InputItem) *Request {
	q := *r.ResponsesReq
	q.Input = openai.ResponsesInput{Items: items}
	q.PreviousResponseID = ""
	c := r.clone()
	c.responsesIn = &q
	return c
}

// WithOutputLimit returns a copy of r whose output limit is lowered to n,
// to fit the model's context: the backend gets n in every limit field that
// asked for more.
func (r *Request) WithOutputLimit(n int) *Request {
	c := r.clone()
	c.OutputLimit, c.fitted = n, true
	return c
}

// WithChatOptions returns a copy of r translated to chat with the model's
// options (r itself when it has them already, or nothing is translated).
func (r *Request) WithChatOptions(o dialect.ChatOptions) *Request {
	if o == r.chatOpts || r.Dialect != Messages && r.Dialect != Responses && r.Dialect != CountTokens {
		return r
	}
	c := r.clone()
	c.chatOpts = o
	return c
}

// clone copies the decoded request; derived forms are computed again.
func (r *Request) clone() *Request {
	return &Request{Dialect: r.Dialect, Body: r.Body, Model: r.Model, Stream: r.Stream, WantsUsage: r.WantsUsage,
		OutputLimit: r.OutputLimit, Choices: r.Choices, Prompts: r.Prompts, AnthropicBeta: r.AnthropicBeta, fields: r.fields,
		promptIDs: r.promptIDs, idBytes: r.idBytes,
		Messages: r.Messages, ResponsesReq: r.ResponsesReq, responsesIn: r.responsesIn, fitted: r.fitted, chatOpts: r.chatOpts}
}

// PromptEstimate estimates the request's input tokens from its size (about
// four bytes a token; token ids given as numbers, one token each), for
// admission before the backend counts.
func (r *Request) PromptEstimate() int64 {
	return int64(len(r.Body)-r.idBytes+3)/4 + r.promptIDs
}

// DefaultOutputTokens is the output bound of a request that sets no limit
// on a model whose context length is unknown: what it reserves against
// budgets, and the max_tokens an Anthropic backend (which requires one)
// gets (translate.DefaultAnthropicMaxTokens).
const DefaultOutputTokens = translate.DefaultAnthropicMaxTokens

// MaxOutput is the most output tokens a backend may produce for this
// request, over the backend dialects it may be sent to: per choice, the
// limit the built request carries (the largest token-limit alias for an
// OpenAI backend, which may honour any of them; the translated max_tokens
// for an Anthropic one), or — when the request sets none — what
// contextWindow leaves after the prompt estimate (engines such as vLLM then
// generate up to the context), else DefaultOutputTokens; times Choices and
// times Prompts (an engine generates Choices sequences for each prompt of
// a list), in saturating arithmetic. Dialects that generate nothing
// return 0.
func (r *Request) MaxOutput(backendDialects []dialect.Dialect, contextWindow int) int64 {
	if !r.Dialect.Generates() {
		return 0
	}
	var most int64
	for _, d := range backendDialects {
		most = max(most, r.outputBound(d, contextWindow))
	}
	if len(backendDialects) == 0 {
		most = r.outputBound(dialect.OpenAI, contextWindow)
	}
	return sat.Mul(sat.Mul(most, int64(r.Choices)), int64(r.Prompts))
}

func (r *Request) outputBound(backend dialect.Dialect, contextWindow int) int64 {
	if backend == dialect.Anthropic && (r.Dialect == Chat || r.Dialect == Responses) {
		if hub, err := r.Hub(); err == nil {
			if ar, err := translate.ChatToAnthropicRequest(hub); err == nil {
				if r.fitted { // Outbound lowers max_tokens, budget included, to the fitted limit
					return int64(min(ar.MaxTokens, r.OutputLimit))
				}
				return int64(ar.MaxTokens) // includes a thinking budget
			}
		}
	}
	if r.OutputLimit > 0 {
		return int64(r.OutputLimit)
	}
	if contextWindow > 0 {
		return max(int64(contextWindow)-r.PromptEstimate(), 1)
	}
	return DefaultOutputTokens
}

func param(e *apierror.Error, p string) *apierror.Error {
	e.Param = p
	return e
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
