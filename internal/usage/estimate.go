package usage

import (
	"encoding/json"
	"unicode/utf8"
)

// Token estimates are used only when a backend reports no usage; records
// built from them are marked Estimated. The rule follows the common
// rule of thumb for BPE tokenizers on English text (about 4 characters per
// token) and counts CJK and other non-ASCII characters as one token each,
// which is close for Qwen and DeepSeek tokenizers on Chinese text.

// EstimateTokens estimates the tokens of a text.
func EstimateTokens(s string) int {
	ascii, other := 0, 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			ascii++
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		other++
		i += size
	}
	n := (ascii+3)/4 + other
	if n == 0 && len(s) > 0 {
		n = 1
	}
	return n
}

// EstimateTokensFromChars estimates tokens from a character count.
func EstimateTokensFromChars(chars int) int { return (chars + 3) / 4 }

// EstimatePromptTokens estimates the prompt tokens of a chat, completion or
// embedding request body: message contents plus a few tokens of chat
// template per message.
func EstimatePromptTokens(body []byte) int {
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Prompt    json.RawMessage `json:"prompt"`
		Input     json.RawMessage `json:"input"`
		System    json.RawMessage `json:"system"`
		Query     json.RawMessage `json:"query"`     // rerank
		Documents json.RawMessage `json:"documents"` // rerank: strings or {"text"}
	}
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	n := 0
	for _, m := range req.Messages {
		n += 4 + textTokens(m.Content)
	}
	n += textTokens(req.Prompt) + textTokens(req.Input) + textTokens(req.System) + textTokens(req.Query) + textTokens(req.Documents)
	return n
}

// textTokens estimates the tokens of a JSON value holding text: a string, an
// array of strings, token ids, or content parts with "text".
func textTokens(raw json.RawMessage) int {
	if len(raw) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return EstimateTokens(s)
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		n := 0
		for _, e := range arr {
			var id int
			if json.Unmarshal(e, &id) == nil {
				n++
				continue
			}
			var part struct {
				Text    string          `json:"text"`
				Content json.RawMessage `json:"content"`
			}
			if json.Unmarshal(e, &part) == nil && (part.Text != "" || len(part.Content) > 0) {
				n += EstimateTokens(part.Text) + textTokens(part.Content)
				continue
			}
			n += textTokens(e)
		}
		return n
	}
	return 0
}
