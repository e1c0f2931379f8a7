package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
)

// Responses stream event names.
const (
	evRespCreated       = "response.created"
	evRespInProgress    = "response.in_progress"
	evRespCompleted     = "response.completed"
	evRespIncomplete    = "response.incomplete"
	evRespFailed        = "response.failed"
	evItemAdded         = "response.output_item.added"
	evItemDone          = "response.output_item.done"
	evPartAdded         = "response.content_part.added"
	evPartDone          = "response.content_part.done"
	evTextDelta         = "response.output_text.delta"
	evTextDone          = "response.output_text.done"
	evReasoningDelta    = "response.reasoning_text.delta"
	evReasoningDone     = "response.reasoning_text.done"
	evArgsDelta         = "response.function_call_arguments.delta"
	evArgsDone          = "response.function_call_arguments.done"
	evResponsesError    = "error"
	itemMessage         = "message"
	itemFunctionCall    = "function_call"
	itemReasoning       = "reasoning"
	contentOutputText   = "output_text"
	contentReasoning    = "reasoning_text"
	responsesStatusDone = openai.ResponseCompleted
)

// ChatToResponsesStream translates an OpenAI chat completion stream into
// Responses API events, each with an increasing sequence_number:
// response.created and response.in_progress first; then per output item
// response.output_item.added, its content events (content_part.added,
// output_text.delta..., output_text.done, content_part.done for messages;
// function_call_arguments.delta..., .done for calls; reasoning_text deltas
// for reasoning) and response.output_item.done; finally response.completed
// (or response.incomplete) with the full output and usage. Items are
// streamed one after another; a failure ends with an "error" event followed
// by response.failed.
type ChatToResponsesStream struct {
	req *openai.ResponsesRequest
	now func() time.Time
	id  string // id of a stored response; "" derives it from the upstream's

	resp    *openai.Response
	base    string // id suffix shared by the item ids
	seq     int
	started bool
	done    bool

	cur      *openai.OutputItem // open item, nil when none
	curIndex int
	curText  argsBuf // the open item's text, or its arguments
	curTool  int     // upstream tool index of the open function_call

	tools    map[int]bool // upstream tool indices already streamed
	waiting  []*waitingCall
	finish   string
	usage    *openai.Usage
	outChars int
	indexer  toolIndexer
}

// waitingCall is a function call buffered while another one is streaming.
type waitingCall struct {
	idx          int
	callID, name string
	args         strings.Builder
}

// NewChatToResponsesStream returns a translator for the client's request
// (echoed into the response objects; it may be nil).
func NewChatToResponsesStream(req *openai.ResponsesRequest) *ChatToResponsesStream {
	return &ChatToResponsesStream{req: req, now: time.Now, tools: map[int]bool{}}
}

// SetStored says the response will be stored under id: the events carry
// that id (unique in the gateway, not derived from the backend's) and
// "store": true.
func (t *ChatToResponsesStream) SetStored(id string) { t.id = id }

// Response returns the response object as the last lifecycle event carried
// it, or nil before the stream began.
func (t *ChatToResponsesStream) Response() *openai.Response { return t.resp }

func (t *ChatToResponsesStream) emit(evs []Event, name string, v any) []Event {
	return t.emitData(evs, name, mustJSON(v))
}

// emitData is emit of an event already encoded (its sequence_number is
// t.next() before the call).
func (t *ChatToResponsesStream) emitData(evs []Event, name string, data []byte) []Event {
	t.seq++
	return append(evs, Event{Name: name, Data: data})
}

// next returns the sequence number of the event being built.
func (t *ChatToResponsesStream) next() int { return t.seq }

func (t *ChatToResponsesStream) lifecycle(evs []Event, name string) []Event {
	return t.emit(evs, name, openai.ResponsesLifecycleEvent{Type: name, SequenceNumber: t.next(), Response: *t.resp})
}

func (t *ChatToResponsesStream) begin(evs []Event, upstreamID string, created int64, model string) []Event {
	t.started = true
	if created == 0 {
		created = t.now().Unix()
	}
	if t.req != nil && t.req.Model != "" {
		model = t.req.Model
	}
	id := t.id
	if id == "" {
		id = responseID(upstreamID)
	}
	t.resp = baseResponse(id, created, model, t.req)
	if t.id != "" {
		t.resp.Store = true
	}
	t.base = strings.TrimPrefix(t.resp.ID, "resp_")
	evs = t.lifecycle(evs, evRespCreated)
	return t.lifecycle(evs, evRespInProgress)
}

// Feed translates one upstream "data:" payload (not "[DONE]"). On an error
// the caller writes the returned events, then Finish(err).
func (t *ChatToResponsesStream) Feed(data []byte) ([]Event, error) {
	if t.done {
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
	if !t.started {
		evs = t.begin(evs, c.ID, c.Created, c.Model)
	}
	if c.Usage != nil {
		t.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		reasoning := d.ReasoningContent
		if reasoning == nil {
			reasoning = d.Reasoning
		}
		if reasoning != nil && *reasoning != "" {
			evs = t.flushWaiting(evs, true)
			evs = t.ensureItem(evs, itemReasoning, -1, "", "")
			evs = t.textDelta(evs, evReasoningDelta, *reasoning)
		}
		if d.Content != nil && *d.Content != "" {
			evs = t.flushWaiting(evs, true)
			evs = t.ensureItem(evs, itemMessage, -1, "", "")
			evs = t.textDelta(evs, evTextDelta, *d.Content)
		}
		for _, tc := range d.ToolCalls {
			var err error
			if evs, err = t.toolDelta(evs, tc); err != nil {
				return evs, err
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			t.finish = *ch.FinishReason
		}
	}
	return evs, nil
}

// toolDelta handles one tool call fragment. Calls are streamed one item
// after the other; a call that starts while the open call's arguments are
// not yet a complete JSON value (an engine interleaving parallel calls) is
// buffered and streamed whole once the open one completes or the stream
// ends. Arguments for a call already done are an error.
func (t *ChatToResponsesStream) toolDelta(evs []Event, tc openai.ToolCall) ([]Event, error) {
	idx := t.indexer.index(tc)
	a := tc.Function.Arguments
	if t.cur != nil && t.cur.Type == itemFunctionCall && t.curTool == idx {
		if tc.Function.Name != "" && t.cur.Name == "" {
			t.cur.Name = tc.Function.Name
		}
		evs = t.argsDelta(evs, a)
		if len(t.waiting) > 0 && t.curText.Complete() {
			evs = t.flushWaiting(evs, true)
		}
		return evs, nil
	}
	if t.tools[idx] {
		if strings.TrimSpace(a) == "" {
			return evs, nil
		}
		return evs, upstreamStreamError(apierror.KindUpstream,
			fmt.Sprintf("the backend sent more arguments for tool call %d after they were complete; disable parallel tool calls or streaming", idx))
	}
	for _, w := range t.waiting {
		if w.idx == idx {
			if tc.Function.Name != "" && w.name == "" {
				w.name = tc.Function.Name
			}
			w.args.WriteString(a)
			return evs, nil
		}
	}
	callID := tc.ID
	if callID == "" {
		callID = fmt.Sprintf("call_%s_%d", t.base, idx)
	}
	if len(t.waiting) > 0 || t.cur != nil && t.cur.Type == itemFunctionCall && !t.curText.Complete() {
		w := &waitingCall{idx: idx, callID: callID, name: tc.Function.Name}
		w.args.WriteString(a)
		t.waiting = append(t.waiting, w)
		return t.flushWaiting(evs, false), nil
	}
	evs = t.ensureItem(evs, itemFunctionCall, idx, callID, tc.Function.Name)
	return t.argsDelta(evs, a), nil
}

func (t *ChatToResponsesStream) argsDelta(evs []Event, a string) []Event {
	if a == "" {
		return evs
	}
	t.curText.WriteString(a)
	t.outChars += len(a)
	return t.emitData(evs, evArgsDelta, argsDeltaJSON(openai.ResponsesArgumentsEvent{Type: evArgsDelta, SequenceNumber: t.next(),
		ItemID: t.cur.ID, OutputIndex: t.curIndex, Delta: ptr(a)}))
}

// flushWaiting streams buffered calls, each as a whole item, once the open
// function call is complete (always when force, as before another kind of
// item or at the end). The last one streamed stays open.
func (t *ChatToResponsesStream) flushWaiting(evs []Event, force bool) []Event {
	for len(t.waiting) > 0 {
		if t.cur != nil && t.cur.Type == itemFunctionCall && !force && !t.curText.Complete() {
			return evs
		}
		w := t.waiting[0]
		t.waiting = t.waiting[1:]
		evs = t.ensureItem(evs, itemFunctionCall, w.idx, w.callID, w.name)
		evs = t.argsDelta(evs, w.args.String())
	}
	return evs
}

func (t *ChatToResponsesStream) textDelta(evs []Event, name, text string) []Event {
	t.curText.WriteString(text)
	t.outChars += len(text)
	return t.emitData(evs, name, textDeltaJSON(openai.ResponsesTextEvent{Type: name, SequenceNumber: t.next(), ItemID: t.cur.ID,
		OutputIndex: t.curIndex, ContentIndex: 0, Delta: &text, Logprobs: []json.RawMessage{}}))
}

// ensureItem makes an item of typ the open item, closing the previous one.
func (t *ChatToResponsesStream) ensureItem(evs []Event, typ string, toolIdx int, callID, name string) []Event {
	if t.cur != nil && t.cur.Type == typ && typ != itemFunctionCall {
		return evs
	}
	evs = t.closeItem(evs, responsesStatusDone)
	t.curIndex = len(t.resp.Output)
	it := &openai.OutputItem{Type: typ, Status: openai.ResponseInProgress}
	switch typ {
	case itemMessage:
		it.ID, it.Role = fmt.Sprintf("msg_%s_%d", t.base, t.curIndex), "assistant"
	case itemReasoning:
		it.ID = fmt.Sprintf("rs_%s_%d", t.base, t.curIndex)
	case itemFunctionCall:
		it.ID, it.CallID, it.Name = "fc_"+callID, callID, name
		t.curTool = toolIdx
		t.tools[toolIdx] = true
	}
	t.cur = it
	t.curText.Reset()
	evs = t.emit(evs, evItemAdded, openai.ResponsesOutputItemEvent{Type: evItemAdded, SequenceNumber: t.next(),
		OutputIndex: t.curIndex, Item: *it})
	switch typ {
	case itemMessage:
		evs = t.emit(evs, evPartAdded, openai.ResponsesContentPartEvent{Type: evPartAdded, SequenceNumber: t.next(),
			ItemID: it.ID, OutputIndex: t.curIndex, ContentIndex: 0, Part: openai.OutputContent{Type: contentOutputText}})
	case itemReasoning:
		evs = t.emit(evs, evPartAdded, openai.ResponsesContentPartEvent{Type: evPartAdded, SequenceNumber: t.next(),
			ItemID: it.ID, OutputIndex: t.curIndex, ContentIndex: 0, Part: openai.OutputContent{Type: contentReasoning}})
	}
	return evs
}

// closeItem finishes the open item with status and records it in the
// response output. A function call cut by a failure gets no done events:
// clients run calls when they see output_item.done, and its arguments may
// be truncated; it appears in response.failed's output as "incomplete".
func (t *ChatToResponsesStream) closeItem(evs []Event, status string) []Event {
	it := t.cur
	if it == nil {
		return evs
	}
	text := t.curText.String()
	if it.Type == itemFunctionCall && status != responsesStatusDone {
		it.Arguments, it.Status = text, status
		t.resp.Output = append(t.resp.Output, *it)
		t.cur = nil
		return evs
	}
	switch it.Type {
	case itemMessage:
		part := openai.OutputContent{Type: contentOutputText, Text: text}
		evs = t.emit(evs, evTextDone, openai.ResponsesTextEvent{Type: evTextDone, SequenceNumber: t.next(), ItemID: it.ID,
			OutputIndex: t.curIndex, Text: ptr(text), Logprobs: []json.RawMessage{}})
		evs = t.emit(evs, evPartDone, openai.ResponsesContentPartEvent{Type: evPartDone, SequenceNumber: t.next(),
			ItemID: it.ID, OutputIndex: t.curIndex, Part: part})
		it.Content = []openai.OutputContent{part}
	case itemReasoning:
		part := openai.OutputContent{Type: contentReasoning, Text: text}
		evs = t.emit(evs, evReasoningDone, openai.ResponsesTextEvent{Type: evReasoningDone, SequenceNumber: t.next(), ItemID: it.ID,
			OutputIndex: t.curIndex, Text: ptr(text), Logprobs: []json.RawMessage{}})
		evs = t.emit(evs, evPartDone, openai.ResponsesContentPartEvent{Type: evPartDone, SequenceNumber: t.next(),
			ItemID: it.ID, OutputIndex: t.curIndex, Part: part})
		it.Content = []openai.OutputContent{part}
		if wantsEncryptedReasoning(t.req) {
			it.EncryptedContent = encodeReasoning(text)
		}
	case itemFunctionCall:
		evs = t.emit(evs, evArgsDone, openai.ResponsesArgumentsEvent{Type: evArgsDone, SequenceNumber: t.next(),
			ItemID: it.ID, OutputIndex: t.curIndex, Arguments: ptr(text)})
		it.Arguments = text
	}
	it.Status = status
	evs = t.emit(evs, evItemDone, openai.ResponsesOutputItemEvent{Type: evItemDone, SequenceNumber: t.next(),
		OutputIndex: t.curIndex, Item: *it})
	t.resp.Output = append(t.resp.Output, *it)
	t.cur = nil
	return evs
}

// Finish ends the client stream. With upstreamErr nil it closes the open
// item and sends response.completed (or response.incomplete when the
// output hit max_output_tokens) with the output and usage; usage is
// estimated from the output when the upstream sent none. With an error it
// closes an open message or reasoning item as "incomplete" (an open
// function call is left without done events, see closeItem), then sends an
// "error" event and response.failed.
func (t *ChatToResponsesStream) Finish(upstreamErr error) []Event {
	if t.done {
		return nil
	}
	t.done = true
	var evs []Event
	if !t.started {
		evs = t.begin(evs, "", 0, "")
	}
	if upstreamErr != nil {
		evs = t.closeItem(evs, openai.ResponseIncomplete)
		e := streamError(upstreamErr)
		code := openai.ResponsesErrorCode(e.Kind)
		if lower := strings.ToLower(e.Message); strings.Contains(lower, "context length") || strings.Contains(lower, "context window") {
			code = "context_length_exceeded" // Codex tells the user to start a new conversation
		}
		evs = t.emit(evs, evResponsesError, openai.ResponsesErrorEvent{Type: evResponsesError, SequenceNumber: t.next(),
			Code: ptr(code), Message: e.Message})
		t.resp.Status = openai.ResponseFailed
		t.resp.Error = &openai.ResponseError{Code: code, Message: e.Message}
		t.resp.Usage = t.finalUsage()
		return t.lifecycle(evs, evRespFailed)
	}
	evs = t.flushWaiting(evs, true)
	evs = t.closeItem(evs, itemStatus(t.finish))
	setTerminalStatus(t.resp, t.finish)
	t.resp.Usage = t.finalUsage()
	if t.resp.Status == openai.ResponseIncomplete {
		return t.lifecycle(evs, evRespIncomplete)
	}
	return t.lifecycle(evs, evRespCompleted)
}

func (t *ChatToResponsesStream) finalUsage() *openai.ResponsesUsage {
	if t.usage != nil {
		return responsesUsage(t.usage)
	}
	out := estimateTextTokens(t.outChars)
	return &openai.ResponsesUsage{OutputTokens: out, TotalTokens: out}
}

// Usage returns the upstream's token counts; ok is false when it sent none.
func (t *ChatToResponsesStream) Usage() (prompt, completion, cacheRead int, ok bool) {
	if t.usage == nil {
		return 0, 0, 0, false
	}
	cached := 0
	if t.usage.PromptTokensDetails != nil {
		cached = t.usage.PromptTokensDetails.CachedTokens
	}
	return t.usage.PromptTokens, t.usage.CompletionTokens, cached, true
}
