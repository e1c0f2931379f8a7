package translate

import (
	"llmgate/internal/api/anthropic"
	"llmgate/internal/usage"
)

// Token estimate constants. They approximate Claude-family and common BPE
// tokenizers; the estimate is for count_tokens and for message_start before
// real usage is known, never for billing when the upstream reports usage.
const (
	// imageTokens approximates one image: Anthropic documents about
	// width*height/750 tokens, capped near 1,600 for a 1.15 MP image.
	imageTokens = 1600
	// messageOverhead covers role markers and separators per message.
	messageOverhead = 4
	// toolsOverhead covers the tool-use system prompt a backend's chat
	// template adds when tools are present (Anthropic documents 300-400).
	toolsOverhead = 350
	// toolOverhead covers the framing of each tool definition.
	toolOverhead = 8
)

// EstimateAnthropicInputTokens approximates the input tokens of a Messages
// request without a tokenizer: ASCII text at 4 bytes per token, every
// non-ASCII character as one token (CJK text is close to one token per
// character), a fixed 1,600 tokens per image, 4 tokens of framing per
// message, and for tools their JSON definitions plus 350 tokens of tool-use
// preamble. It counts the system prompt, text, thinking, tool_use inputs,
// tool_result contents and documents. System messages inside messages are
// counted as AnthropicToChat sends them: as part of the one leading system
// message (no framing of their own), and not at all once their clear_at has
// taken effect. Expect +-25% on English prose; the result is at least 1.
func EstimateAnthropicInputTokens(req *anthropic.MessagesRequest) int {
	n := 0
	n += contentTokens(&req.System)
	lastUser := lastUserIndex(req.Messages)
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role == anthropic.RoleSystem {
			if !systemCleared(m, i, lastUser) {
				n += contentTokens(&m.Content)
			}
			continue
		}
		n += messageOverhead + contentTokens(&m.Content)
	}
	if len(req.Tools) > 0 {
		n += toolsOverhead
		for _, t := range req.Tools {
			n += toolOverhead + textTokens(t.Name) + textTokens(t.Description) + textTokens(string(t.InputSchema))
		}
	}
	return max(n, 1)
}

func contentTokens(c *anthropic.Content) int {
	if c == nil {
		return 0
	}
	if c.Text != nil {
		return textTokens(*c.Text)
	}
	n := 0
	for i := range c.Blocks {
		b := &c.Blocks[i]
		switch b.Type {
		case "image":
			n += imageTokens
		case "document":
			if b.Source != nil {
				if b.Source.Type == "text" {
					n += textTokens(b.Source.Data)
				} else {
					// A base64 PDF: about 3/4 of its encoded size in bytes,
					// at roughly 1 token per 3 bytes of PDF.
					n += len(b.Source.Data) / 4
				}
			}
		default:
			if b.Raw != nil {
				// A block type the gateway does not model: its JSON is
				// the best measure of what it holds.
				n += textTokens(string(b.Raw))
				continue
			}
			n += textTokens(b.Text) + textTokens(b.Thinking) + textTokens(b.Name) + textTokens(string(b.Input))
			n += contentTokens(b.Content)
		}
	}
	return n
}

// textTokens estimates the tokens of s with the gateway's one rule (see
// usage.EstimateTokens), so ledger estimates and count_tokens agree.
func textTokens(s string) int {
	if s == "" {
		return 0
	}
	return usage.EstimateTokens(s)
}

// estimateTextTokens estimates output tokens from a character count.
func estimateTextTokens(chars int) int {
	return usage.EstimateTokensFromChars(chars)
}
