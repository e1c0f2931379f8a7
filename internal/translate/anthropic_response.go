package translate

import (
	"encoding/json"
	"fmt"
	"strings"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
)

// ChatBodyToAnthropic decodes a raw, non-streaming chat completion body and
// converts it into an Anthropic message. model is the model name the client
// asked for. A body that is not a chat completion is a 502 *apierror.Error.
//
// Content order is thinking (from reasoning_content, or reasoning as newer
// vLLM names it; with an empty signature, which the SDKs accept and which
// marks it as not Anthropic's when the client sends it back), text, then one
// tool_use block per tool call with its arguments parsed as the input
// object. finish_reason maps stop -> end_turn, length -> max_tokens,
// tool_calls and function_call -> tool_use, content_filter -> refusal. A
// chat completion cannot say that a stop sequence matched, so it also reads
// choices[0].stop_reason (vLLM) and matched_stop (SGLang), which name the
// stop string that ended generation: when one is a string and finish_reason
// is "stop", the message gets stop_reason "stop_sequence" and stop_sequence
// set to that string. Usage: input_tokens = prompt_tokens - cached_tokens
// and cache_read_input_tokens = cached_tokens, because Anthropic counts
// cache reads separately from input while OpenAI includes them in
// prompt_tokens.
func ChatBodyToAnthropic(body []byte, model string) (*anthropic.Message, error) {
	var resp openai.ChatCompletion
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, upstreamStreamError(apierror.KindUpstream, "the backend returned a body that is not a chat completion").Wrap(err)
	}
	var ext struct {
		Choices []struct {
			StopReason  json.RawMessage `json:"stop_reason"`
			MatchedStop json.RawMessage `json:"matched_stop"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(body, &ext)
	matched := ""
	if len(ext.Choices) > 0 {
		matched = stopString(ext.Choices[0].StopReason) + stopString(ext.Choices[0].MatchedStop)
	}
	return chatToAnthropic(&resp, model, matched), nil
}

// stopString returns the stop string of a vLLM stop_reason (a string, or a
// token id number when a stop token matched, or null).
func stopString(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

func chatToAnthropic(resp *openai.ChatCompletion, model, matchedStop string) *anthropic.Message {
	msg := &anthropic.Message{
		ID:      anthropicMessageID(resp.ID),
		Type:    "message",
		Role:    "assistant",
		Model:   model,
		Content: []anthropic.ContentBlock{},
	}
	finish := ""
	if len(resp.Choices) > 0 {
		c := resp.Choices[0]
		if c.FinishReason != nil {
			finish = *c.FinishReason
		}
		m := c.Message
		if rt := m.ReasoningText(); rt != "" {
			msg.Content = append(msg.Content, anthropic.ContentBlock{Type: "thinking", Thinking: rt})
		}
		if text := m.Content.String(); text != "" {
			msg.Content = append(msg.Content, anthropic.ContentBlock{Type: "text", Text: text})
		}
		for i, tc := range m.ToolCalls {
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("toolu_%s_%d", strings.TrimPrefix(resp.ID, "chatcmpl-"), i)
			}
			msg.Content = append(msg.Content, anthropic.ContentBlock{Type: "tool_use", ID: id,
				Name: tc.Function.Name, Input: toolInput(tc.Function.Arguments)})
		}
	}
	hasTools := false
	for _, b := range msg.Content {
		hasTools = hasTools || b.Type == "tool_use"
	}
	reason, seq := stopReason(finish, matchedStop, hasTools)
	msg.StopReason = &reason
	msg.StopSequence = seq
	if resp.Usage != nil {
		msg.Usage = anthropicUsage(resp.Usage)
	} else {
		// No usage from the backend: estimate output so clients that
		// budget on output_tokens see a plausible value.
		chars := 0
		for _, b := range msg.Content {
			chars += len(b.Text) + len(b.Thinking) + len(b.Input)
		}
		msg.Usage.OutputTokens = estimateTextTokens(chars)
	}
	return msg
}

// anthropicMessageID derives a stable message id from the upstream id so
// logs on both sides can be matched.
func anthropicMessageID(upstream string) string {
	if upstream == "" {
		return newID("msg_")
	}
	return "msg_" + strings.TrimPrefix(upstream, "chatcmpl-")
}

// stopReason maps an OpenAI finish_reason to an Anthropic stop reason.
func stopReason(finish, matchedStop string, hasTools bool) (string, *string) {
	switch finish {
	case "length":
		return anthropic.StopMaxTokens, nil
	case "tool_calls", "function_call":
		return anthropic.StopToolUse, nil
	case "content_filter":
		return anthropic.StopRefusal, nil
	case "stop", "":
		if matchedStop != "" {
			return anthropic.StopStopSequence, &matchedStop
		}
		// Some engines report "stop" after a tool call; the client must
		// still see tool_use or it will not run the tools.
		if hasTools {
			return anthropic.StopToolUse, nil
		}
		return anthropic.StopEndTurn, nil
	default:
		return anthropic.StopEndTurn, nil
	}
}

// anthropicUsage converts OpenAI usage.
func anthropicUsage(u *openai.Usage) anthropic.Usage {
	cached := 0
	if u.PromptTokensDetails != nil {
		cached = u.PromptTokensDetails.CachedTokens
	}
	return anthropic.Usage{
		InputTokens:          max(u.PromptTokens-cached, 0),
		OutputTokens:         u.CompletionTokens,
		CacheReadInputTokens: cached,
	}
}

// toolInput turns a tool call's JSON arguments into a tool_use input object.
// Models sometimes emit arguments that are not a JSON object; they are kept
// under "raw_arguments" so the client's tool validation reports the problem
// to the model instead of the call silently running with no arguments.
func toolInput(args string) json.RawMessage {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage(`{}`)
	}
	if validJSONObject(args) {
		return json.RawMessage(compactJSON([]byte(args)))
	}
	return mustJSON(map[string]string{"raw_arguments": args})
}
