package translate

import (
	"bytes"
	"encoding/json"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
)

// AnthropicToChatStream translates an Anthropic Messages event stream into
// OpenAI chat completion chunks: a first chunk with the assistant role,
// content / reasoning_content / tool_calls deltas (tool calls numbered in
// order of appearance), a chunk with finish_reason, a usage chunk with empty
// choices when the client asked for include_usage, and [DONE].
type AnthropicToChatStream struct {
	model        string
	includeUsage bool
	now          func() time.Time

	id      string
	created int64

	started  bool
	stopped  bool // message_stop seen
	finished bool

	toolIndex map[int]int // Anthropic block index -> chat tool call index
	nextTool  int
	stop      string

	usage    anthropic.Usage
	usageSet bool
}

// NewAnthropicToChatStream returns a translator for a chat client that asked
// for model; includeUsage is the client's stream_options.include_usage.
func NewAnthropicToChatStream(model string, includeUsage bool) *AnthropicToChatStream {
	return &AnthropicToChatStream{model: model, includeUsage: includeUsage, now: time.Now, toolIndex: map[int]int{}}
}

// Feed translates one upstream event (its "event:" name and its data). On an
// error the caller writes the returned events, then Finish(err).
func (t *AnthropicToChatStream) Feed(name string, data []byte) ([]Event, error) {
	if t.finished || t.stopped {
		return nil, nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil // an empty keep-alive event
	}
	var ev anthropic.StreamEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, upstreamStreamError(apierror.KindUpstream, "the backend sent a stream event that is not valid JSON")
	}
	if ev.Type == "" {
		ev.Type = name
	}
	var evs []Event
	switch ev.Type {
	case anthropic.EventMessageStart:
		if ev.Message != nil {
			t.id = chatID(ev.Message.ID)
			t.usage, t.usageSet = ev.Message.Usage, true
		}
		if !t.started {
			evs = t.begin(evs)
		}
	case anthropic.EventContentBlockStart:
		evs = t.begin(evs)
		if cb := ev.ContentBlock; cb != nil && (cb.Type == "tool_use" || cb.Type == "server_tool_use") {
			i := t.nextTool
			t.nextTool++
			t.toolIndex[ev.Index] = i
			evs = append(evs, t.chunk(openai.ChunkDelta{ToolCalls: []openai.ToolCall{{Index: ptr(i), ID: cb.ID, Type: "function",
				Function: openai.FunctionCall{Name: cb.Name, Arguments: ""}}}}, nil))
		}
	case anthropic.EventContentBlockDelta:
		evs = t.begin(evs)
		if d := ev.Delta; d != nil {
			switch d.Type {
			case anthropic.DeltaText:
				if d.Text != "" {
					evs = append(evs, t.chunk(openai.ChunkDelta{Content: ptr(d.Text)}, nil))
				}
			case anthropic.DeltaThinking:
				if d.Thinking != "" {
					evs = append(evs, t.chunk(openai.ChunkDelta{ReasoningContent: ptr(d.Thinking)}, nil))
				}
			case anthropic.DeltaInputJSON:
				if i, ok := t.toolIndex[ev.Index]; ok && d.PartialJSON != "" {
					evs = append(evs, t.chunk(openai.ChunkDelta{ToolCalls: []openai.ToolCall{{Index: ptr(i),
						Function: openai.FunctionCall{Arguments: d.PartialJSON}}}}, nil))
				}
			}
		}
	case anthropic.EventMessageDelta:
		if ev.Delta != nil && ev.Delta.StopReason != nil {
			t.stop = *ev.Delta.StopReason
		}
		if u := ev.Usage; u != nil {
			// message_delta counts are cumulative and override message_start.
			t.usage.OutputTokens = u.OutputTokens
			if u.InputTokens != nil {
				t.usage.InputTokens = *u.InputTokens
			}
			if u.CacheReadInputTokens != nil {
				t.usage.CacheReadInputTokens = *u.CacheReadInputTokens
			}
			if u.CacheCreationInputTokens != nil {
				t.usage.CacheCreationInputTokens = *u.CacheCreationInputTokens
			}
			t.usageSet = true
		}
	case anthropic.EventMessageStop:
		evs = t.begin(evs)
		t.stopped = true
		finish := finishReason(t.stop)
		evs = append(evs, t.chunk(openai.ChunkDelta{}, &finish))
		if t.includeUsage {
			u := chatUsage(t.usage)
			c := openai.ChatCompletionChunk{ID: t.id, Object: "chat.completion.chunk", Created: t.created, Model: t.model,
				Choices: []openai.ChunkChoice{}, Usage: &u}
			evs = append(evs, Event{Data: mustJSON(c)})
		}
	case anthropic.EventError:
		msg, kind := "", apierror.KindUpstream
		if ev.Error != nil {
			msg, kind = ev.Error.Message, anthropic.KindForType(ev.Error.Type)
		}
		return evs, upstreamStreamError(kind, msg)
	}
	return evs, nil
}

// begin emits the first chunk (role) once.
func (t *AnthropicToChatStream) begin(evs []Event) []Event {
	if t.started {
		return evs
	}
	t.started = true
	if t.id == "" {
		t.id = newID("chatcmpl-")
	}
	t.created = t.now().Unix()
	return append(evs, t.chunk(openai.ChunkDelta{Role: "assistant", Content: ptr("")}, nil))
}

func (t *AnthropicToChatStream) chunk(d openai.ChunkDelta, finish *string) Event {
	c := openai.ChatCompletionChunk{ID: t.id, Object: "chat.completion.chunk", Created: t.created, Model: t.model,
		Choices: []openai.ChunkChoice{{Index: 0, Delta: d, FinishReason: finish}}}
	return Event{Data: mustJSON(c)}
}

// Finish ends the client stream. After message_stop it sends [DONE]. With an
// error, or when the upstream ended before message_stop, it sends an
// OpenAI error object ({"error":{...}}, which the SDKs raise) and no
// [DONE], so the client cannot mistake a cut stream for a complete one.
func (t *AnthropicToChatStream) Finish(upstreamErr error) []Event {
	if t.finished {
		return nil
	}
	t.finished = true
	if upstreamErr == nil && !t.stopped {
		upstreamErr = streamError(nil)
	}
	if upstreamErr != nil {
		e := streamError(upstreamErr)
		return []Event{{Data: openai.MarshalError(e)}}
	}
	return []Event{{Data: Done}}
}

// Usage returns the upstream's token counts in OpenAI terms (prompt
// includes cache reads and writes); ok is false when the upstream sent none.
func (t *AnthropicToChatStream) Usage() (prompt, completion, cacheRead int, ok bool) {
	if !t.usageSet {
		return 0, 0, 0, false
	}
	u := chatUsage(t.usage)
	return u.PromptTokens, u.CompletionTokens, t.usage.CacheReadInputTokens, true
}
