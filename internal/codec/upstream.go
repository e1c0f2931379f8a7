package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
	"llmgate/internal/jsonscan"
	"llmgate/internal/translate"
	"llmgate/internal/usage"
)

// Event is one piece of a backend's answer, decoded: the payload in the
// decoder's Form and what the relay's usage tap needs, read once here.
type Event struct {
	// Name is the SSE event name (Anthropic form); empty for OpenAI chunks.
	Name string
	// Data is the payload; nil for an event that only marks the end.
	Data []byte
	// Content: the event carries generated output (its arrival is the time
	// to first token).
	Content bool
	// UsageOnly: a usage chunk the gateway asked for on the client's behalf.
	UsageOnly bool
	// End: the backend's normal end ([DONE], message_stop, a whole body).
	End bool
	// UsageEstimated: part of Usage is the gateway's estimate (choices
	// the backend's count left out).
	UsageEstimated bool
	// Usage, when set, is the backend's usage as of this event.
	Usage *openai.Usage
	// OutChars counts characters of generated text in the event, for an
	// estimate when the backend reports no usage.
	OutChars int
}

// Decoder turns one backend answer into events.
type Decoder interface {
	// Form is the form of the events produced.
	Form() Form
	// Event decodes one SSE event of a streamed answer, appending the
	// events to dst. An in-band error (the backend reported a failure
	// inside its 200) is returned as an *apierror.Error.
	Event(dst []Event, name string, data []byte) ([]Event, error)
	// Body decodes a whole (non-SSE) answer; one that is not a real result
	// (an error in a 200, a body without the result) is an *apierror.Error.
	// For a streaming client the answer is returned as the events a stream
	// would have carried.
	Body(raw []byte) ([]Event, error)
}

// NewDecoder returns the decoder of a target's answer to r. sse says
// whether the answer is an event stream.
func NewDecoder(r *Request, t Target, sse bool) Decoder {
	if t.Dialect != dialect.Anthropic {
		return &openaiDecoder{r: r, backend: t.Backend}
	}
	native := FormFor(r.Dialect, t.Dialect) == FormAnthropic && (sse || !r.Stream)
	return &anthropicDecoder{r: r, backend: t.Backend, native: native}
}

// openaiDecoder reads OpenAI chunks and bodies; its events are the
// backend's bytes.
type openaiDecoder struct {
	r       *Request
	backend string
	started bool // a chunk with content was seen
	// tasks adds up the usage llama.cpp reports for each sequence of a
	// stream with several (n > 1, or a completions prompt list); tasksN
	// counts the reports.
	tasks  taskUsage
	tasksN int
}

// taskUsage is the running sum of per-sequence usage reports, with the
// largest prompt and cached counts of one report.
type taskUsage struct {
	prompt, completion, cached, reasoning int
	maxPrompt, maxCached                  int
	reasoningKnown, cachedKnown           bool
}

func (d *openaiDecoder) Form() Form { return FormOpenAI }

var doneData = []byte("[DONE]")

func (d *openaiDecoder) Event(dst []Event, _ string, data []byte) ([]Event, error) {
	if bytes.Equal(data, doneData) {
		return append(dst, Event{End: true}), nil
	}
	ev, perTask, err := tapChunk(data, d.backend, d.started)
	if err != nil {
		return dst, err
	}
	d.started = d.started || ev.Content
	if perTask && ev.Usage != nil && d.r.sequences() > 1 {
		d.sumTasks(&ev)
	}
	return append(dst, ev), nil
}

// sequences is how many sequences the request asks an engine to
// generate: n for each prompt.
func (r *Request) sequences() int { return max(r.Choices, 1) * max(r.Prompts, 1) }

// sumTasks makes ev's usage the sum of the sequences reported so far, for
// llama.cpp's stream of several (n choices for each of the prompts): it
// ends each sequence with that sequence's own usage (and its timings), so
// the last report alone counts one sequence. Output adds up; each prompt
// is counted once, as OpenAI bills n > 1: every report of a prompt's n
// sequences repeats that prompt's count, so the sum of the prompt counts
// is divided by n (the cached share likewise), and never less than one
// report's (a stream cut after its first report still counts its prompt
// whole). Reports beyond the sequences asked for are not added.
func (d *openaiDecoder) sumTasks(ev *Event) {
	if d.tasksN++; d.tasksN <= d.r.sequences() {
		u, t := ev.Usage, &d.tasks
		t.prompt += u.PromptTokens
		t.maxPrompt = max(t.maxPrompt, u.PromptTokens)
		t.completion += u.CompletionTokens
		if p := u.PromptTokensDetails; p != nil {
			t.cached, t.cachedKnown = t.cached+p.CachedTokens, true
			t.maxCached = max(t.maxCached, p.CachedTokens)
		}
		if c := u.CompletionTokensDetails; c != nil {
			t.reasoning, t.reasoningKnown = t.reasoning+c.ReasoningTokens, true
		}
	}
	t, n := d.tasks, max(d.r.Choices, 1)
	sum := openai.Usage{PromptTokens: max(t.prompt/n, t.maxPrompt), CompletionTokens: t.completion}
	sum.TotalTokens = sum.PromptTokens + sum.CompletionTokens
	if t.cachedKnown {
		sum.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: min(max(t.cached/n, t.maxCached), sum.PromptTokens)}
	}
	if t.reasoningKnown {
		sum.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: t.reasoning}
	}
	ev.Usage = &sum
}

var (
	keyUsage     = []byte(`"usage"`)
	keyError     = []byte(`"error"`)
	emptyChoices = []byte(`[]`)
)

// tapChunk reads one OpenAI chunk: generated output, usage, an in-band
// error. Once content was seen (started), a chunk that mentions neither
// usage nor error is not parsed: the hot path of a stream. perTask
// reports a usage with llama.cpp's timings beside it: with several
// choices, that usage is one choice's.
func tapChunk(data []byte, backend string, started bool) (ev Event, perTask bool, err error) {
	ev = Event{Data: data, OutChars: generatedChars(data)}
	hasUsage, hasError := bytes.Contains(data, keyUsage), bytes.Contains(data, keyError)
	if started && !hasUsage && !hasError {
		ev.Content = true
		return ev, false, nil
	}
	var sp [4]jsonscan.Span // choices, usage, error, timings
	err = jsonscan.Fields(data, func(key []byte, val jsonscan.Span) bool {
		switch string(key) {
		case "choices":
			sp[0] = val
		case "usage":
			sp[1] = val
		case "error":
			sp[2] = val
		case "timings":
			sp[3] = val
		}
		return true
	})
	if err != nil {
		return ev, false, nil // not an object: relayed as is; the client's parser will say
	}
	choicesEmpty := !sp[0].Valid() || bytes.Equal(bytes.TrimSpace(data[sp[0].Start:sp[0].End]), emptyChoices)
	ev.Content = !choicesEmpty
	if hasError && !jsonscan.IsNull(data, sp[2]) && !sp[0].Valid() {
		return ev, false, apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "upstream_stream_error",
			"backend %q reported an error mid-stream: %s", backend, ErrorMessage(data))
	}
	if hasUsage && !jsonscan.IsNull(data, sp[1]) {
		var u openai.Usage
		if json.Unmarshal(data[sp[1].Start:sp[1].End], &u) == nil {
			ev.Usage = &u
		}
		ev.UsageOnly = choicesEmpty && sp[0].Valid()
	}
	return ev, sp[3].Valid() && !jsonscan.IsNull(data, sp[3]), nil
}

func (d *openaiDecoder) Body(raw []byte) ([]Event, error) {
	u, estimated, err := checkResult(raw, dialects[d.r.Dialect].required, d.backend)
	if err != nil {
		return nil, err
	}
	if estimated && d.r.Prompts > 1 {
		// The same llama.cpp answer counted the first prompt only.
		u.PromptTokens += d.r.otherPromptTokens(u.PromptTokens)
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	if !d.r.Stream {
		ev := Event{Data: raw, Content: true, End: true, Usage: u, UsageEstimated: estimated}
		if u == nil {
			ev.OutChars = generatedChars(raw)
		}
		return []Event{ev}, nil
	}
	// The client asked for a stream and the backend ignored "stream": true
	// (some llama.cpp builds, proxies, batch-only backends): the completion
	// becomes what a streaming backend would have sent.
	return completionEvents(raw, d.r.Dialect == Completions, u, estimated, d.backend)
}

// completionEvents turns a chat (or text) completion body into the chunks
// of the equivalent stream: one with every choice's whole message (tool
// calls numbered as stream deltas are), a usage-only chunk when the body
// has usage, and the end.
func completionEvents(raw []byte, text bool, u *openai.Usage, estimated bool, backend string) ([]Event, error) {
	chunk, usageChunk, err := completionAsChunks(raw, !text)
	if err != nil {
		return nil, apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_upstream_response",
			"backend %q answered a stream request with a completion the gateway cannot stream: %v", backend, err)
	}
	evs := []Event{{Data: chunk, Content: true, OutChars: generatedChars(chunk)}}
	if usageChunk != nil {
		evs = append(evs, Event{Data: usageChunk, UsageOnly: true, Usage: u, UsageEstimated: estimated})
	}
	return append(evs, Event{End: true}), nil
}

var answerParsers fastjson.ParserPool

// checkResult verifies that a 2xx body carries a result (its required
// top-level key) and takes its usage. A 200 with an error, or without the
// result, is a backend failure the client could not read. estimated
// says that the backend counted the first of several choices only
// (llama.cpp, below): the output count includes the gateway's estimate of
// the others (and the prompt count is the first prompt's).
func checkResult(body []byte, required, backend string) (_ *openai.Usage, estimated bool, _ error) {
	bad := func(why string) error {
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_upstream_response",
			"backend %q answered 200 but %s; the body starts: %s", backend, why, QuoteStart(body, 200))
	}
	// One parse validates the body and finds the result, usage and error
	// (this runs on every answer, before the client gets it).
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, false, bad("the body is not valid JSON")
	}
	obj, err := v.Object()
	if err != nil {
		return nil, false, bad("the body is not a JSON object")
	}
	result, usageV, errv := obj.Get(required), obj.Get("usage"), obj.Get("error")
	if errv != nil && errv.Type() != fastjson.TypeNull && result == nil {
		return nil, false, apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "upstream_error_in_body",
			"backend %q answered 200 with an error: %s", backend, ErrorMessage(body))
	}
	if result == nil || result.Type() == fastjson.TypeNull {
		return nil, false, bad(fmt.Sprintf("its body has no %q", required))
	}
	u, ok := usageOf(usageV)
	if !ok {
		return nil, false, nil
	}
	if choices, _ := result.Array(); len(choices) > 1 {
		// llama.cpp answers several choices (n > 1) with the usage and
		// timings of the first alone: the others' output is estimated
		// from their text, at the first choice's characters per token
		// (its count is exact), rather than left out of the bill.
		if t := obj.Get("timings"); t != nil && t.Type() == fastjson.TypeObject {
			first, extra := textChars(choices[0]), 0
			for _, c := range choices[1:] {
				n := textChars(c)
				if k, ok := tokensLike(n, first, u.CompletionTokens); ok {
					extra += k
				} else {
					extra += usage.EstimateTokensFromChars(n)
				}
			}
			u.CompletionTokens += extra
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
			return &u, true, nil
		}
	}
	return &u, false, nil
}

// tokensLike estimates the tokens of a text of chars characters at the
// rate of a reference text of refChars characters that an engine counted
// refTokens tokens: at least one for any text, none for none. ok is false
// when the reference gives no rate (no text, or no count).
func tokensLike(chars, refChars, refTokens int) (n int, ok bool) {
	if refChars <= 0 || refTokens <= 0 {
		return 0, false
	}
	if chars <= 0 {
		return 0, true
	}
	return max(1, (chars*refTokens+refChars/2)/refChars), true
}

// usageOf reads an OpenAI usage object; ok is false when v is not one
// (absent, null, or not an object with integer counts).
func usageOf(v *fastjson.Value) (u openai.Usage, ok bool) {
	if v == nil || v.Type() != fastjson.TypeObject {
		return u, false
	}
	absent := 0 // of prompt_tokens and completion_tokens
	count := func(v *fastjson.Value, key string) (int, bool) {
		x := v.Get(key)
		if x == nil || x.Type() == fastjson.TypeNull {
			if x == nil {
				absent++
			}
			return 0, true
		}
		n, err := x.Int()
		return n, err == nil
	}
	var oks [3]bool
	u.PromptTokens, oks[0] = count(v, "prompt_tokens")
	u.CompletionTokens, oks[1] = count(v, "completion_tokens")
	onlyTotal := absent == 2
	u.TotalTokens, oks[2] = count(v, "total_tokens")
	if !oks[0] || !oks[1] || !oks[2] {
		return openai.Usage{}, false
	}
	if onlyTotal {
		// Pooling endpoints (vLLM's rerank) report only total_tokens: all input.
		u.PromptTokens = u.TotalTokens
	}
	if d := v.Get("prompt_tokens_details"); d != nil && d.Type() == fastjson.TypeObject {
		n, _ := count(d, "cached_tokens")
		u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: n}
	}
	if d := v.Get("completion_tokens_details"); d != nil && d.Type() == fastjson.TypeObject {
		n, _ := count(d, "reasoning_tokens")
		u.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: n}
	}
	return u, true
}

// anthropicDecoder reads an Anthropic backend's events and bodies: as they
// are for an Anthropic client (native), else translated to OpenAI chat.
type anthropicDecoder struct {
	r       *Request
	backend string
	native  bool
	usage   openai.Usage // cumulative, from message_start and message_delta
	toChat  *translate.AnthropicToChatStream
}

func (d *anthropicDecoder) Form() Form {
	if d.native {
		return FormAnthropic
	}
	return FormOpenAI
}

func (d *anthropicDecoder) Event(dst []Event, name string, data []byte) ([]Event, error) {
	var u *openai.Usage
	switch name {
	case "message_start", "message_delta":
		// A stream cut later still has the backend's counts so far.
		if d.tapUsage(data) {
			c := d.usage
			u = &c
		}
	case "error":
		return dst, d.streamError(data)
	}
	if d.native {
		ev := Event{Name: name, Data: data, Usage: u, End: name == "message_stop"}
		if name == "content_block_delta" {
			ev.Content, ev.OutChars = true, generatedChars(data)
		}
		return append(dst, ev), nil
	}
	if d.toChat == nil {
		d.toChat = translate.NewAnthropicToChatStream(d.r.Model, true)
	}
	chunks, ferr := d.toChat.Feed(name, data)
	if ferr != nil {
		return dst, apierror.From(ferr)
	}
	end := name == "message_stop"
	if end {
		chunks = append(chunks, d.toChat.Finish(nil)...)
	}
	for _, c := range chunks {
		if bytes.Equal(c.Data, doneData) {
			continue
		}
		ev, _, err := tapChunk(c.Data, d.backend, false)
		if err != nil {
			return dst, err
		}
		if ev.Usage == nil && u != nil {
			ev.Usage = u
			u = nil
		}
		dst = append(dst, ev)
	}
	if u != nil || end {
		dst = append(dst, Event{Usage: u, End: end})
	}
	return dst, nil
}

// tapUsage merges the usage of a message_start or message_delta event.
// Anthropic's input excludes cache reads and writes; message_delta carries
// the cumulative output.
func (d *anthropicDecoder) tapUsage(data []byte) bool {
	var ev struct {
		Message *struct {
			Usage *anthropic.Usage `json:"usage"`
		} `json:"message"`
		Usage *anthropic.Usage `json:"usage"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return false
	}
	got := false
	for _, u := range []*anthropic.Usage{messageUsage(ev.Message), ev.Usage} {
		if u != nil {
			mergeAnthropicUsage(&d.usage, *u)
			got = true
		}
	}
	return got
}

func messageUsage(m *struct {
	Usage *anthropic.Usage `json:"usage"`
}) *anthropic.Usage {
	if m == nil {
		return nil
	}
	return m.Usage
}

// mergeAnthropicUsage adds Anthropic usage figures to an OpenAI usage.
func mergeAnthropicUsage(dst *openai.Usage, u anthropic.Usage) {
	if u.InputTokens > 0 || u.CacheReadInputTokens > 0 || u.CacheCreationInputTokens > 0 {
		dst.PromptTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
		if u.CacheReadInputTokens > 0 {
			dst.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: u.CacheReadInputTokens}
		}
	}
	if u.OutputTokens > 0 {
		dst.CompletionTokens = u.OutputTokens
	}
	dst.TotalTokens = dst.PromptTokens + dst.CompletionTokens
}

// streamError is the failure an Anthropic "error" event reports.
func (d *anthropicDecoder) streamError(data []byte) *apierror.Error {
	var env anthropic.ErrorEnvelope
	kind := apierror.KindUpstream
	msg := ErrorMessage(data)
	if json.Unmarshal(data, &env) == nil && env.Error.Type != "" {
		kind = anthropic.KindForType(env.Error.Type)
		if kind != apierror.KindRateLimit && kind != apierror.KindOverloaded && kind != apierror.KindTimeout {
			kind = apierror.KindUpstream
		}
	}
	return apierror.Newf(http.StatusBadGateway, kind, "upstream_stream_error", "backend %q reported an error mid-stream: %s", d.backend, msg)
}

func (d *anthropicDecoder) Body(raw []byte) ([]Event, error) {
	if d.r.Dialect == CountTokens {
		var c struct {
			Type        string `json:"type"`
			InputTokens *int   `json:"input_tokens"`
		}
		switch {
		case json.Unmarshal(raw, &c) == nil && c.Type == "error":
			return nil, d.errorInBody(raw)
		case c.InputTokens == nil:
			return nil, d.notAMessage(raw, "without input_tokens")
		}
		return []Event{{Data: raw, Content: true, End: true}}, nil
	}
	var msg anthropic.Message
	if err := json.Unmarshal(raw, &msg); err != nil || msg.Type == "error" || len(msg.Content) == 0 && msg.StopReason == nil {
		if msg.Type == "error" {
			return nil, d.errorInBody(raw)
		}
		return nil, d.notAMessage(raw, "without a message")
	}
	var u *openai.Usage
	var has struct {
		Usage *anthropic.Usage `json:"usage"`
	}
	if json.Unmarshal(raw, &has) == nil && has.Usage != nil {
		var c openai.Usage
		mergeAnthropicUsage(&c, *has.Usage)
		u = &c
	}
	if d.native {
		return []Event{{Data: raw, Content: true, End: true, Usage: u}}, nil
	}
	completion := translate.AnthropicToChatCompletion(&msg, d.r.Model)
	chat, err := json.Marshal(completion)
	if err != nil {
		return nil, apierror.From(err)
	}
	if completion.Usage != nil {
		u = completion.Usage
	}
	if !d.r.Stream {
		return []Event{{Data: chat, Content: true, End: true, Usage: u}}, nil
	}
	return completionEvents(chat, false, u, false, d.backend)
}

func (d *anthropicDecoder) errorInBody(raw []byte) error {
	return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "upstream_error_in_body",
		"backend %q answered 200 with an error: %s", d.backend, ErrorMessage(raw))
}

func (d *anthropicDecoder) notAMessage(raw []byte, what string) error {
	return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_upstream_response",
		"backend %q answered 200 %s; the body starts: %s", d.backend, what, QuoteStart(raw, 200))
}

// ErrorMessage pulls the human message out of the error bodies engines
// send: OpenAI {"error":{"message"}}, Anthropic {"type":"error","error":
// {"message"}}, vLLM auth {"error":"..."}, FastAPI {"detail":...},
// {"message":...}; otherwise the start of the body.
func ErrorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Detail  json.RawMessage `json:"detail"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		if len(v.Error) > 0 {
			var inner struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(v.Error, &inner) == nil && inner.Message != "" {
				return truncate(inner.Message, 500)
			}
			var s string
			if json.Unmarshal(v.Error, &s) == nil && s != "" {
				return truncate(s, 500)
			}
		}
		if len(v.Detail) > 0 {
			var s string
			if json.Unmarshal(v.Detail, &s) == nil {
				return truncate(s, 500)
			}
			return truncate(string(v.Detail), 500)
		}
		if v.Message != "" {
			return truncate(v.Message, 500)
		}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return "empty body"
	}
	return QuoteStart(body, 200)
}

// QuoteStart quotes the first n bytes of b (trimmed), for messages.
func QuoteStart(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "(empty)"
	}
	s := string(b)
	if len(s) > n {
		s = s[:n] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// generatedChars counts the characters of generated text in an answer or
// an event: the string values of the members that carry it (content,
// reasoning_content, tool-call arguments, text, thinking, partial_json), at
// any depth, read as JSON whatever its spacing ("content": "x", as Python
// writes it, counts as "content":"x" does). It is only used when a backend
// reports no usage; escapes count as the character they stand for. A body
// that is not JSON counts nothing.
func generatedChars(data []byte) int {
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(data)
	if err != nil {
		return 0
	}
	return textChars(v)
}

func textChars(v *fastjson.Value) int {
	n := 0
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		o.Visit(func(k []byte, x *fastjson.Value) {
			if x.Type() == fastjson.TypeString && generatedKey(k) {
				n += utf8.RuneCount(x.GetStringBytes())
			} else {
				n += textChars(x)
			}
		})
	case fastjson.TypeArray:
		a, _ := v.Array()
		for _, x := range a {
			n += textChars(x)
		}
	}
	return n
}

// generatedKey reports whether a member's string value is generated text.
func generatedKey(k []byte) bool {
	switch string(k) {
	case "content", "reasoning_content", "arguments", "text", "thinking", "partial_json":
		return true
	}
	return false
}
