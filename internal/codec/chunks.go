package codec

import (
	"encoding/json"
	"strconv"
)

// completionAsChunks turns a chat.completion (chat) or text_completion
// body into the equivalent stream chunk, and a usage-only chunk when the
// body has usage.
func completionAsChunks(body []byte, chat bool) (chunk, usageChunk []byte, err error) {
	var in struct {
		ID                string            `json:"id"`
		Created           int64             `json:"created"`
		Model             string            `json:"model"`
		SystemFingerprint *string           `json:"system_fingerprint,omitempty"`
		Choices           []json.RawMessage `json:"choices"`
		Usage             json.RawMessage   `json:"usage"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, nil, err
	}
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	type envelope struct {
		ID                string            `json:"id"`
		Object            string            `json:"object"`
		Created           int64             `json:"created"`
		Model             string            `json:"model"`
		SystemFingerprint *string           `json:"system_fingerprint,omitempty"`
		Choices           []json.RawMessage `json:"choices"`
		Usage             json.RawMessage   `json:"usage,omitempty"`
	}
	out := envelope{ID: in.ID, Object: object, Created: in.Created, Model: in.Model, SystemFingerprint: in.SystemFingerprint,
		Choices: make([]json.RawMessage, 0, len(in.Choices))}
	for _, raw := range in.Choices {
		var ch map[string]json.RawMessage
		if err := json.Unmarshal(raw, &ch); err != nil {
			return nil, nil, err
		}
		if chat {
			delta, err := messageAsDelta(ch["message"])
			if err != nil {
				return nil, nil, err
			}
			delete(ch, "message")
			ch["delta"] = delta
		}
		for _, k := range []string{"finish_reason", "logprobs"} {
			if _, ok := ch[k]; !ok {
				ch[k] = json.RawMessage("null")
			}
		}
		b, err := json.Marshal(ch)
		if err != nil {
			return nil, nil, err
		}
		out.Choices = append(out.Choices, b)
	}
	if chunk, err = json.Marshal(out); err != nil {
		return nil, nil, err
	}
	if len(in.Usage) > 0 && string(in.Usage) != "null" {
		out.Choices, out.Usage = []json.RawMessage{}, in.Usage
		if usageChunk, err = json.Marshal(out); err != nil {
			return nil, nil, err
		}
	}
	return chunk, usageChunk, nil
}

// messageAsDelta turns a chat message into a stream delta: the same fields,
// with each tool call given the "index" stream deltas carry.
func messageAsDelta(msg json.RawMessage) (json.RawMessage, error) {
	if len(msg) == 0 || string(msg) == "null" {
		return json.RawMessage(`{}`), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, err
	}
	if tc, ok := m["tool_calls"]; ok && string(tc) != "null" {
		var calls []map[string]json.RawMessage
		if err := json.Unmarshal(tc, &calls); err != nil {
			return nil, err
		}
		for i := range calls {
			calls[i]["index"] = json.RawMessage(strconv.Itoa(i))
		}
		b, err := json.Marshal(calls)
		if err != nil {
			return nil, err
		}
		m["tool_calls"] = b
	}
	return json.Marshal(m)
}
