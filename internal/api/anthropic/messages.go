// Package anthropic holds the Anthropic Messages API wire types used by the
// gateway and the translators: requests, responses, stream events, token
// counting and the error envelope. Field names follow the official
// anthropic-sdk-go types (message.go of v2.15.0).
package anthropic

import (
	"bytes"
	"encoding/json"

	"llmgate/internal/api/openai"
)

// MessagesRequest is the body of POST /v1/messages. POST
// /v1/messages/count_tokens takes the same body without max_tokens.
type MessagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     int             `json:"max_tokens,omitempty"`
	Messages      []MessageParam  `json:"messages"`
	System        SystemPrompt    `json:"system,omitzero"`
	Metadata      *Metadata       `json:"metadata,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	TopK          *int            `json:"top_k,omitempty"`
	Tools         []Tool          `json:"tools,omitempty"`
	ToolChoice    *ToolChoice     `json:"tool_choice,omitempty"`
	Thinking      *ThinkingConfig `json:"thinking,omitempty"`
	ServiceTier   string          `json:"service_tier,omitempty"`
}

// Metadata is the request metadata object.
type Metadata struct {
	UserID string `json:"user_id,omitempty"`
}

// ThinkingConfig enables extended thinking: {"type":"enabled","budget_tokens":N},
// {"type":"disabled"} or {"type":"adaptive"}.
type ThinkingConfig struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// Tool is a tool offered to the model. Client tools have no type (or
// "custom") and an input_schema; server tools (web_search_..., bash_...) have
// a versioned type.
type Tool struct {
	Type         string          `json:"type,omitempty"`
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// ToolChoice is {"type":"auto"|"any"|"tool"|"none"}; Name is set for "tool".
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use,omitempty"`
}

// MessageParam is one input message.
type MessageParam struct {
	Role    string  `json:"role"` // "user" or "assistant"
	Content Content `json:"content"`
}

// Content is either a plain string or a list of content blocks. It is used
// for message content, system prompts and tool_result content.
type Content struct {
	Text   *string
	Blocks []ContentBlock
}

// TextContent returns a Content holding a plain string.
func TextContent(s string) Content { return Content{Text: &s} }

// IsZero reports whether the content is absent, so omitzero drops it.
func (c Content) IsZero() bool { return c.Text == nil && c.Blocks == nil }

// MarshalJSON writes a string or an array of blocks.
func (c Content) MarshalJSON() ([]byte, error) {
	switch {
	case c.Text != nil:
		return json.Marshal(*c.Text)
	case c.Blocks != nil:
		return json.Marshal(c.Blocks)
	default:
		return []byte(`""`), nil
	}
}

// UnmarshalJSON reads a string, an array of blocks, or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	return openai.DecodeStringOrList(b, &c.Text, &c.Blocks, "content must be a string or an array of content blocks")
}

// SystemPrompt is the top-level system prompt: a string or text blocks.
type SystemPrompt = Content

// ImageSource is the source of an image or document block.
type ImageSource struct {
	Type      string `json:"type"` // "base64", "url", "text", "file"
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
	FileID    string `json:"file_id,omitempty"`
}

// ContentBlock is any content block, input or output. Type selects which
// fields are meaningful; MarshalJSON writes exactly the fields of that type
// (including empty ones the SDKs expect, such as "text":"" in a streamed
// block start).
type ContentBlock struct {
	Type string `json:"type"`
	// text
	Text      string          `json:"text,omitempty"`
	Citations json.RawMessage `json:"citations,omitempty"`
	// thinking / redacted_thinking
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result
	ToolUseID string   `json:"tool_use_id,omitempty"`
	Content   *Content `json:"content,omitempty"`
	IsError   bool     `json:"is_error,omitempty"`
	// image / document
	Source *ImageSource `json:"source,omitempty"`
	Title  string       `json:"title,omitempty"`

	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// MarshalJSON writes the fields that belong to the block's type.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case "text":
		return json.Marshal(struct {
			Type         string          `json:"type"`
			Text         string          `json:"text"`
			Citations    json.RawMessage `json:"citations,omitempty"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.Text, b.Citations, b.CacheControl})
	case "thinking":
		return json.Marshal(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{b.Type, b.Thinking, b.Signature})
	case "redacted_thinking":
		return json.Marshal(struct {
			Type string `json:"type"`
			Data string `json:"data"`
		}{b.Type, b.Data})
	case "tool_use":
		in := b.Input
		if len(bytes.TrimSpace(in)) == 0 {
			in = json.RawMessage(`{}`)
		}
		return json.Marshal(struct {
			Type         string          `json:"type"`
			ID           string          `json:"id"`
			Name         string          `json:"name"`
			Input        json.RawMessage `json:"input"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.ID, b.Name, in, b.CacheControl})
	default:
		type plain ContentBlock // no MarshalJSON: avoids recursion
		return json.Marshal(plain(b))
	}
}

// Message is a response of POST /v1/messages and the message of a
// message_start event. StopReason and StopSequence are null until known.
type Message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"` // "assistant"
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        Usage          `json:"usage"`
}

// Stop reasons.
const (
	StopEndTurn      = "end_turn"
	StopMaxTokens    = "max_tokens"
	StopStopSequence = "stop_sequence"
	StopToolUse      = "tool_use"
	StopPauseTurn    = "pause_turn"
	StopRefusal      = "refusal"
	StopContextLimit = "model_context_window_exceeded"
)

// Usage is the token accounting of a message. All four counts are always
// written: the official SDKs read them from message_start.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// DeltaUsage is the usage of a message_delta event. Counts are cumulative;
// the optional ones are omitted when unknown so that clients keep the value
// they got in message_start.
type DeltaUsage struct {
	InputTokens              *int `json:"input_tokens,omitempty"`
	OutputTokens             int  `json:"output_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens,omitempty"`
}

// CountTokensResponse is the body returned by POST /v1/messages/count_tokens.
type CountTokensResponse struct {
	InputTokens int `json:"input_tokens"`
}
