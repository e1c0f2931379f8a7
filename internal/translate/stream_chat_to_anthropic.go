package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
)

// chatChunk is an upstream chat stream chunk with the extensions local
// engines send: "reasoning" (newer vLLM) next to "reasoning_content", the
// matched stop string in choices[].stop_reason (vLLM) or matched_stop
// (SGLang), and an in-band "error".
type chatChunk struct {
	ID      string          `json:"id"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []chatChoice    `json:"choices"`
	Usage   *openai.Usage   `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Delta        chatDelta       `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"`  // vLLM: matched stop string or token id
	MatchedStop  json.RawMessage `json:"matched_stop"` // SGLang: the same
}

type chatDelta struct {
	Role             string            `json:"role"`
	Content          *string           `json:"content"`
	ReasoningContent *string           `json:"reasoning_content"`
	Reasoning        *string           `json:"reasoning"`
	ToolCalls        []openai.ToolCall `json:"tool_calls"`
}

// upstreamChunkError turns an in-band {"error": ...} of a chat stream into
// an error. vLLM sends {"error":{"message","type","code"}}; some servers
// send a bare string.
func upstreamChunkError(raw json.RawMessage) *apierror.Error {
	var body struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &body) != nil {
		var s string
		_ = json.Unmarshal(raw, &s)
		body.Message = s
	}
	kind := apierror.KindUpstream
	switch {
	case strings.Contains(body.Type, "rate_limit"), string(body.Code) == "429":
		kind = apierror.KindRateLimit
	case strings.Contains(body.Type, "invalid_request"), strings.Contains(body.Type, "BadRequest"), string(body.Code) == "400":
		kind = apierror.KindInvalidRequest
	}
	return upstreamStreamError(kind, body.Message)
}

// ChatToAnthropicStream translates an OpenAI chat completion stream into the
// Anthropic Messages event sequence: exactly one message_start (always with
// usage), a ping, content blocks (thinking, text, tool_use) each opened,
// extended and closed in turn with consecutive indices, then message_delta
// (stop_reason, stop_sequence, usage) and message_stop.
type ChatToAnthropicStream struct {
	model         string
	inputEstimate int
	msgID         string

	started  bool
	finished bool

	open      int    // index of the open block, -1 when none
	openKind  string // "text", "thinking", "tool_use"
	openTool  int    // upstream tool index of the open tool_use block
	nextIndex int    // index of the next block to start

	tools       map[int]*streamTool // upstream tool index -> state
	waiting     []int               // tool calls buffered while another is open, in order of arrival
	finish      string
	matchedStop string
	outChars    int // characters of output, for an estimate when usage is absent
	hasTools    bool

	usage    *openai.Usage
	usageSet bool
	indexer  toolIndexer
}

// toolIndexer numbers the tool calls of a chat stream. Most servers send an
// index with every fragment; some (older Ollama) omit it and send each call
// whole, so a fragment without index but with a new id is a new call and one
// without either continues the last call.
type toolIndexer struct {
	ids  map[string]int
	last int
	n    int
}

func (x *toolIndexer) index(tc openai.ToolCall) int {
	if x.ids == nil {
		x.ids = map[string]int{}
	}
	switch {
	case tc.Index != nil:
		x.last = *tc.Index
	case tc.ID != "":
		i, ok := x.ids[tc.ID]
		if !ok {
			i = x.n
		}
		x.last = i
	}
	if tc.ID != "" {
		if _, ok := x.ids[tc.ID]; !ok {
			x.ids[tc.ID] = x.last
		}
	}
	x.n = max(x.n, x.last+1)
	return x.last
}

type streamTool struct {
	id, name string
	pending  strings.Builder // arguments received before its block opened
	args     argsBuf         // arguments streamed in its open block
	started  bool
	closed   bool
}

// NewChatToAnthropicStream returns a translator for a client that asked for
// model. inputTokensEstimate is the input_tokens value message_start carries
// until the upstream reports real usage (see EstimateAnthropicInputTokens).
func NewChatToAnthropicStream(model string, inputTokensEstimate int) *ChatToAnthropicStream {
	return &ChatToAnthropicStream{model: model, inputEstimate: inputTokensEstimate, open: -1,
		tools: map[int]*streamTool{}}
}

// Feed translates one upstream "data:" payload (not "[DONE]"). On an error
// the caller writes the returned events, then Finish(err).
func (t *ChatToAnthropicStream) Feed(data []byte) ([]Event, error) {
	if t.finished {
		return nil, nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil // an empty keep-alive event
	}
	c, err := decodeChunk(data)
	if err != nil {
		return nil, err
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return nil, upstreamChunkError(c.Error)
	}
	var evs []Event
	if c.Usage != nil {
		t.usage, t.usageSet = c.Usage, true
	}
	if !t.started {
		evs = t.start(evs, c.ID)
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // n > 1 is not part of the Messages API
		}
		d := ch.Delta
		reasoning := d.ReasoningContent
		if reasoning == nil {
			reasoning = d.Reasoning
		}
		if reasoning != nil && *reasoning != "" {
			evs = t.flushWaiting(evs)
			evs = t.ensureBlock(evs, "thinking", -1)
			evs = t.delta(evs, anthropic.BlockDelta{Type: anthropic.DeltaThinking, Thinking: reasoning})
			t.outChars += len(*reasoning)
		}
		if d.Content != nil && *d.Content != "" {
			evs = t.flushWaiting(evs)
			evs = t.ensureBlock(evs, "text", -1)
			evs = t.delta(evs, anthropic.BlockDelta{Type: anthropic.DeltaText, Text: d.Content})
			t.outChars += len(*d.Content)
		}
		for _, tc := range d.ToolCalls {
			var err error
			if evs, err = t.toolDelta(evs, tc); err != nil {
				return evs, err
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			t.finish = *ch.FinishReason
			if s := stopString(ch.StopReason) + stopString(ch.MatchedStop); s != "" {
				t.matchedStop = s
			}
		}
	}
	return evs, nil
}

func (t *ChatToAnthropicStream) start(evs []Event, upstreamID string) []Event {
	t.started = true
	t.msgID = anthropicMessageID(upstreamID)
	u := anthropic.Usage{InputTokens: t.inputEstimate}
	if t.usageSet {
		u = anthropicUsage(t.usage)
		u.OutputTokens = 0
	}
	start := anthropic.MessageStartEvent{Type: anthropic.EventMessageStart, Message: anthropic.Message{
		ID: t.msgID, Type: "message", Role: "assistant", Model: t.model,
		Content: []anthropic.ContentBlock{}, Usage: u,
	}}
	evs = append(evs, Event{anthropic.EventMessageStart, mustJSON(start)})
	return append(evs, Event{anthropic.EventPing, []byte(`{"type":"ping"}`)})
}

// ensureBlock makes a block of kind the open block, closing the previous one.
func (t *ChatToAnthropicStream) ensureBlock(evs []Event, kind string, toolIdx int) []Event {
	if t.open >= 0 && t.openKind == kind && (kind != "tool_use" || t.openTool == toolIdx) {
		return evs
	}
	evs = t.closeOpen(evs)
	var cb anthropic.ContentBlock
	switch kind {
	case "text":
		cb = anthropic.ContentBlock{Type: "text"}
	case "thinking":
		cb = anthropic.ContentBlock{Type: "thinking"}
	case "tool_use":
		st := t.tools[toolIdx]
		cb = anthropic.ContentBlock{Type: "tool_use", ID: st.id, Name: st.name}
		st.started = true
		t.openTool = toolIdx
		t.hasTools = true
	}
	t.open, t.openKind = t.nextIndex, kind
	t.nextIndex++
	return append(evs, Event{anthropic.EventContentBlockStart, mustJSON(anthropic.ContentBlockStartEvent{
		Type: anthropic.EventContentBlockStart, Index: t.open, ContentBlock: cb})})
}

func (t *ChatToAnthropicStream) closeOpen(evs []Event) []Event {
	if t.open < 0 {
		return evs
	}
	if t.openKind == "tool_use" {
		t.tools[t.openTool].closed = true
	}
	evs = append(evs, Event{anthropic.EventContentBlockStop, mustJSON(anthropic.ContentBlockStopEvent{
		Type: anthropic.EventContentBlockStop, Index: t.open})})
	t.open = -1
	return evs
}

func (t *ChatToAnthropicStream) delta(evs []Event, d anthropic.BlockDelta) []Event {
	return append(evs, Event{anthropic.EventContentBlockDelta, deltaJSON(t.open, d)})
}

// toolDelta handles one tool call fragment. Calls are streamed one after the
// other, as Anthropic does. Engines send parallel calls one after another
// too; one that starts a call while the open call's arguments are not yet a
// complete JSON value is interleaving them, so the new call is buffered and
// streamed as a whole once the open one completes (or the stream ends). A
// fragment for a call whose block was already closed cannot be delivered
// and ends the stream with an error rather than corrupting the call's
// arguments.
func (t *ChatToAnthropicStream) toolDelta(evs []Event, tc openai.ToolCall) ([]Event, error) {
	idx := t.indexer.index(tc)
	st := t.tools[idx]
	if st == nil {
		st = &streamTool{}
		t.tools[idx] = st
	}
	args := tc.Function.Arguments
	if st.closed {
		if strings.TrimSpace(args) == "" {
			return evs, nil
		}
		return evs, upstreamStreamError(apierror.KindUpstream,
			fmt.Sprintf("the backend sent more arguments for tool call %d after they were complete, which cannot be streamed as Anthropic content blocks; disable parallel tool calls or streaming", idx))
	}
	if tc.ID != "" && st.id == "" {
		st.id = tc.ID
	}
	if tc.Function.Name != "" && !st.started {
		st.name += tc.Function.Name
	}
	if st.started {
		evs = t.argsDelta(evs, st, args)
		if len(t.waiting) > 0 && st.args.Complete() {
			evs = t.closeOpen(evs)
			evs = t.flushWaiting(evs)
		}
		return evs, nil
	}
	st.pending.WriteString(args)
	if st.name == "" {
		return evs, nil // wait for the name to open the block
	}
	if t.open >= 0 && t.openKind == "tool_use" {
		if open := t.tools[t.openTool]; !open.args.Complete() {
			if !slices.Contains(t.waiting, idx) {
				t.waiting = append(t.waiting, idx)
			}
			return evs, nil
		}
	}
	if len(t.waiting) > 0 && !slices.Contains(t.waiting, idx) {
		t.waiting = append(t.waiting, idx) // keep the order calls arrived in
		return t.flushWaiting(evs), nil
	}
	return t.startTool(evs, idx), nil
}

// startTool opens the block of tool call idx with the arguments buffered so
// far.
func (t *ChatToAnthropicStream) startTool(evs []Event, idx int) []Event {
	st := t.tools[idx]
	if st.id == "" {
		st.id = fmt.Sprintf("toolu_%s_%d", strings.TrimPrefix(t.msgID, "msg_"), idx)
	}
	t.waiting = slices.DeleteFunc(t.waiting, func(i int) bool { return i == idx })
	evs = t.ensureBlock(evs, "tool_use", idx)
	args := st.pending.String()
	st.pending.Reset()
	return t.argsDelta(evs, st, args)
}

func (t *ChatToAnthropicStream) argsDelta(evs []Event, st *streamTool, args string) []Event {
	if args == "" {
		return evs
	}
	st.args.WriteString(args)
	t.outChars += len(args)
	return t.delta(evs, anthropic.BlockDelta{Type: anthropic.DeltaInputJSON, PartialJSON: &args})
}

// flushWaiting streams the buffered tool calls that can be: each whole,
// closed when complete; the last one stays open when its arguments are not
// yet a complete JSON value. A call whose name has not arrived stays
// buffered.
func (t *ChatToAnthropicStream) flushWaiting(evs []Event) []Event {
	for len(t.waiting) > 0 {
		if t.open >= 0 && t.openKind == "tool_use" {
			if !t.tools[t.openTool].args.Complete() {
				return evs
			}
			evs = t.closeOpen(evs)
		}
		next := -1
		for _, i := range t.waiting {
			if t.tools[i].name != "" {
				next = i
				break
			}
		}
		if next < 0 {
			return evs
		}
		evs = t.startTool(evs, next)
	}
	return evs
}

// Finish ends the client stream. With upstreamErr nil (the upstream sent
// [DONE]) it closes the open block and sends message_delta and
// message_stop. With an error (an in-band upstream error, a cut
// connection, a timeout) it closes an open text or thinking block (not a
// tool_use block, whose input may be truncated) and sends an "error" event
// in the Anthropic envelope and no message_stop, so clients report the
// failure instead of a silently truncated message.
func (t *ChatToAnthropicStream) Finish(upstreamErr error) []Event {
	if t.finished {
		return nil
	}
	t.finished = true
	var evs []Event
	if !t.started {
		evs = t.start(evs, "")
	}
	if upstreamErr == nil {
		// Buffered calls are complete now: each is streamed whole.
		for len(t.waiting) > 0 {
			evs = t.closeOpen(evs)
			if evs = t.flushWaiting(evs); len(t.waiting) > 0 && t.open < 0 {
				break // only calls without a name are left
			}
		}
		// A tool call whose name never arrived still has to reach the client.
		for _, st := range t.tools {
			if !st.started && st.pending.Len() > 0 {
				upstreamErr = upstreamStreamError(apierror.KindUpstream, "the backend streamed tool call arguments without a function name")
			}
		}
	}
	if upstreamErr != nil {
		// A tool_use block cut mid-stream is left open: its input may be
		// truncated JSON, and clients run a tool once its block stops.
		if t.openKind != "tool_use" {
			evs = t.closeOpen(evs)
		}
		e := streamError(upstreamErr)
		return append(evs, Event{anthropic.EventError, anthropic.MarshalError(e)})
	}
	evs = t.closeOpen(evs)
	reason, seq := stopReason(t.finish, t.matchedStop, t.hasTools)
	du := anthropic.DeltaUsage{OutputTokens: estimateTextTokens(t.outChars)}
	if t.usageSet {
		u := anthropicUsage(t.usage)
		du = anthropic.DeltaUsage{OutputTokens: u.OutputTokens, InputTokens: ptr(u.InputTokens),
			CacheReadInputTokens: ptr(u.CacheReadInputTokens)}
	}
	evs = append(evs, Event{anthropic.EventMessageDelta, mustJSON(anthropic.MessageDeltaEvent{
		Type: anthropic.EventMessageDelta, Delta: anthropic.MessageDelta{StopReason: &reason, StopSequence: seq}, Usage: du})})
	return append(evs, Event{anthropic.EventMessageStop, []byte(`{"type":"message_stop"}`)})
}

// Usage returns the upstream's token counts; ok is false when the upstream
// sent none (the caller then records an estimate).
func (t *ChatToAnthropicStream) Usage() (prompt, completion, cacheRead int, ok bool) {
	if !t.usageSet {
		return 0, 0, 0, false
	}
	cached := 0
	if t.usage.PromptTokensDetails != nil {
		cached = t.usage.PromptTokensDetails.CachedTokens
	}
	return t.usage.PromptTokens, t.usage.CompletionTokens, cached, true
}
