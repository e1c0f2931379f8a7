// Package anthropic holds the Anthropic Messages API wire types used by the
// gateway and the translators: requests, responses, stream events, token
// counting and the error envelope. Field names follow the official
// anthropic-sdk-go types (message.go of v2.15.0).
package anthropic

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"

	"llmgate/internal/api/openai"
	"llmgate/internal/jsonscan"
)

// MessagesRequest is the body of POST /v1/messages. POST
// /v1/messages/count_tokens takes the same body without max_tokens.
//
// The fields the gateway interprets are typed; every other member (beta
// fields such as context_management, container, mcp_servers, speed, a
// top-level cache_control, and fields of API versions newer than this
// type) is kept in Extra and written back on encoding, so a request that is
// decoded and re-encoded for an anthropic backend loses nothing.
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
	// OutputConfig is {"effort": ..., "format": ...}.
	OutputConfig *OutputConfig `json:"output_config,omitempty"`
	// OutputFormat is the structured-outputs beta's
	// {"type":"json_schema","schema":{...}}, which output_config.format
	// replaced.
	OutputFormat json.RawMessage `json:"output_format,omitempty"`

	// Extra holds the members not named above.
	Extra openai.Extra `json:"-"`
}

var requestFields = openai.FieldNames(reflect.TypeFor[MessagesRequest]())

// UnmarshalJSON decodes the named fields and keeps the others in Extra.
func (r *MessagesRequest) UnmarshalJSON(b []byte) error {
	type plain MessagesRequest
	var p plain
	// The messages' slice at its final size (the decoder appends to its
	// capacity), rather than grown by doubling: a request of many short
	// messages is not several copies of their slice.
	if spans, err := jsonscan.Find(b, "messages"); err == nil && spans[0].Valid() {
		p.Messages = openai.Presized[MessageParam](b[spans[0].Start:spans[0].End])
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = MessagesRequest(p)
	_ = jsonscan.Fields(b, func(key []byte, val jsonscan.Span) bool {
		switch k := openai.MemberName(key); {
		case strings.EqualFold(k, "tools"):
			keepUnknownToolFields(b[val.Start:val.End], r.Tools)
		case !requestFields.Has(k):
			if r.Extra == nil {
				r.Extra = openai.Extra{}
			}
			r.Extra[k] = bytes.Clone(b[val.Start:val.End])
		}
		return true
	})
	return nil
}

// keepUnknownToolFields fills the Extra of each tool from the JSON array arr
// the tools were decoded from.
func keepUnknownToolFields(arr []byte, tools []Tool) {
	_ = jsonscan.Elements(arr, func(i int, val jsonscan.Span) bool {
		if i >= len(tools) {
			return false
		}
		tools[i].Extra = openai.UnknownFields(arr[val.Start:val.End], toolFields)
		return true
	})
}

// MarshalJSON writes the named fields, then the members of Extra.
func (r MessagesRequest) MarshalJSON() ([]byte, error) {
	type plain MessagesRequest
	b, err := json.Marshal(plain(r))
	if err != nil {
		return nil, err
	}
	return openai.AppendFields(b, r.Extra, requestFields), nil
}

// OutputConfig configures the output: Effort is "low", "medium", "high",
// "xhigh" or "max"; Format is {"type":"json_schema","schema":{...}}. On a
// role "system" message only Effort is allowed (it applies from that turn).
type OutputConfig struct {
	Effort string          `json:"effort,omitempty"`
	Format json.RawMessage `json:"format,omitempty"`
	// Extra keeps members such as task_budget.
	Extra openai.Extra `json:"-"`
}

var outputConfigFields = openai.FieldNames(reflect.TypeFor[OutputConfig]())

// UnmarshalJSON decodes the named fields and keeps the others in Extra.
func (c *OutputConfig) UnmarshalJSON(b []byte) error {
	type plain OutputConfig
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = OutputConfig(p)
	c.Extra = openai.UnknownFields(b, outputConfigFields)
	return nil
}

// MarshalJSON writes the named fields, then the members of Extra.
func (c OutputConfig) MarshalJSON() ([]byte, error) {
	type plain OutputConfig
	b, err := json.Marshal(plain(c))
	if err != nil {
		return nil, err
	}
	return openai.AppendFields(b, c.Extra, outputConfigFields), nil
}

// Metadata is the request metadata object.
type Metadata struct {
	UserID string `json:"user_id,omitempty"`
}

// ThinkingConfig enables extended thinking: {"type":"enabled","budget_tokens":N},
// {"type":"disabled"} or {"type":"adaptive"}. Display ("summarized",
// "omitted") is a newer option of the same object.
type ThinkingConfig struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
	Display      string `json:"display,omitempty"`
}

// Tool is a tool offered to the model. Client tools have no type (or
// "custom") and an input_schema; server tools (web_search_..., bash_...) have
// a versioned type and options of their own, kept in Extra with the other
// members not named here (defer_loading, input_examples, allowed_callers).
type Tool struct {
	Type         string          `json:"type,omitempty"`
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	Strict       *bool           `json:"strict,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`

	Extra openai.Extra `json:"-"`
}

var toolFields = openai.FieldNames(reflect.TypeFor[Tool]())

// MarshalJSON writes the named fields, then the members of Extra.
func (t Tool) MarshalJSON() ([]byte, error) {
	type plain Tool
	b, err := json.Marshal(plain(t))
	if err != nil {
		return nil, err
	}
	return openai.AppendFields(b, t.Extra, toolFields), nil
}

// ToolChoice is {"type":"auto"|"any"|"tool"|"none"}; Name is set for "tool".
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use,omitempty"`
}

// MessageParam is one input message. Role is "user", "assistant" or
// "system"; a system message (as Claude Code sends inside messages) may say
// when it stops applying (ClearAt "next_user_message": once a later user
// message exists) and carry a per-turn OutputConfig (effort only).
type MessageParam struct {
	Role         string        `json:"role"`
	Content      Content       `json:"content"`
	ClearAt      string        `json:"clear_at,omitempty"`
	OutputConfig *OutputConfig `json:"output_config,omitempty"`
}

// Message roles.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleSystem    = "system"
)

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

// UnmarshalJSON reads a string, an array of blocks, or null. Members of a
// block its type does not name go to the block's Extra; a block of a type
// this package does not model is kept whole in its Raw.
//
// An array is decoded block by block, each block once: a block of another
// type whose fields clash with ours (search_result's source is a string)
// then fails alone. (Decoding the whole array first and retrying block by
// block on failure did nested content twice per level: 2^depth work.)
func (c *Content) UnmarshalJSON(b []byte) error {
	const what = "content must be a string or an array of content blocks"
	if i := bytes.IndexFunc(b, func(r rune) bool { return r != ' ' && r != '\t' && r != '\n' && r != '\r' }); i < 0 || b[i] != '[' {
		return openai.DecodeStringOrList(b, &c.Text, &c.Blocks, what)
	}
	c.Text = nil
	blocks, err := decodeBlocks(b)
	if err != nil {
		return err
	}
	c.Blocks = blocks
	keepUnknownBlockFields(b, c.Blocks)
	return nil
}

// decodeBlocks decodes the array of blocks arr one block at a time, so that
// a block of an unmodelled type that does not fit ContentBlock's fields is
// kept (by its type, then in Raw) rather than failing the request. The
// blocks are counted first and decoded in place: a request of many small
// blocks costs one slice of them, not a copy of each and the slice's
// growth (an array of 200,000 empty text blocks took ~70 bytes of garbage
// per byte of JSON).
func decodeBlocks(arr []byte) ([]ContentBlock, error) {
	n, err := jsonscan.Len(arr)
	if err != nil {
		return nil, err
	}
	blocks := make([]ContentBlock, n)
	_ = jsonscan.Elements(arr, func(i int, val jsonscan.Span) bool {
		elem := arr[val.Start:val.End]
		blk := &blocks[i]
		if derr := json.Unmarshal(elem, blk); derr != nil {
			var t struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(elem, &t) != nil || t.Type == "" || IsModelled(t.Type) {
				err = derr
				return false
			}
			*blk = ContentBlock{Type: t.Type}
		}
		return true
	})
	return blocks, err
}

// keepUnknownBlockFields fills Extra (of each block and of its source) and
// Raw from the JSON array arr the blocks were decoded from.
func keepUnknownBlockFields(arr []byte, blocks []ContentBlock) {
	_ = jsonscan.Elements(arr, func(i int, val jsonscan.Span) bool {
		if i >= len(blocks) {
			return false
		}
		b := &blocks[i]
		elem := arr[val.Start:val.End]
		if !IsModelled(b.Type) {
			b.Raw = bytes.Clone(elem)
			return true
		}
		_ = jsonscan.Fields(elem, func(key []byte, v jsonscan.Span) bool {
			switch k := openai.MemberName(key); {
			case strings.EqualFold(k, "source") && b.Source != nil:
				b.Source.Extra = openai.UnknownFields(elem[v.Start:v.End], sourceFields)
			case !blockFields.Has(k):
				if b.Extra == nil {
					b.Extra = openai.Extra{}
				}
				b.Extra[k] = bytes.Clone(elem[v.Start:v.End])
			}
			return true
		})
		return true
	})
}

// SystemPrompt is the top-level system prompt: a string or text blocks.
type SystemPrompt = Content

// ImageSource is the source of an image or document block. Members not
// named here (a document's "content" source) are kept in Extra.
type ImageSource struct {
	Type      string `json:"type"` // "base64", "url", "text", "file", "content"
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
	FileID    string `json:"file_id,omitempty"`

	Extra openai.Extra `json:"-"`
}

var sourceFields = openai.FieldNames(reflect.TypeFor[ImageSource]())

// MarshalJSON writes the named fields, then the members of Extra.
func (s ImageSource) MarshalJSON() ([]byte, error) {
	type plain ImageSource
	b, err := json.Marshal(plain(s))
	if err != nil {
		return nil, err
	}
	return openai.AppendFields(b, s.Extra, sourceFields), nil
}

// ContentBlock is any content block, input or output. Type selects which
// fields are meaningful; MarshalJSON writes exactly the fields of that type
// (including empty ones the SDKs expect, such as "text":"" in a streamed
// block start). Members not named here are kept in Extra; a block of a type
// this package does not model (server tool results, search_result,
// compaction, ...) is kept whole in Raw and written back byte for byte.
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

	// Extra holds the members not named above.
	Extra openai.Extra `json:"-"`
	// Raw is the whole block when its type is not one of text, image,
	// document, thinking, redacted_thinking, tool_use and tool_result (the
	// fields it shares with those are decoded too, where they fit).
	Raw json.RawMessage `json:"-"`
}

var blockFields = openai.FieldNames(reflect.TypeFor[ContentBlock]())

// IsModelled reports whether this package models blocks of type typ (the
// others are kept in Raw).
func IsModelled(typ string) bool {
	switch typ {
	case "text", "image", "document", "thinking", "redacted_thinking", "tool_use", "tool_result":
		return true
	}
	return false
}

// MarshalJSON writes the fields that belong to the block's type.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	if b.Raw != nil {
		return b.Raw, nil
	}
	var out []byte
	var err error
	switch b.Type {
	case "text":
		out, err = json.Marshal(struct {
			Type         string          `json:"type"`
			Text         string          `json:"text"`
			Citations    json.RawMessage `json:"citations,omitempty"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.Text, b.Citations, b.CacheControl})
	case "thinking":
		out, err = json.Marshal(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{b.Type, b.Thinking, b.Signature})
	case "redacted_thinking":
		out, err = json.Marshal(struct {
			Type string `json:"type"`
			Data string `json:"data"`
		}{b.Type, b.Data})
	case "tool_use":
		in := b.Input
		if len(bytes.TrimSpace(in)) == 0 {
			in = json.RawMessage(`{}`)
		}
		out, err = json.Marshal(struct {
			Type         string          `json:"type"`
			ID           string          `json:"id"`
			Name         string          `json:"name"`
			Input        json.RawMessage `json:"input"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.ID, b.Name, in, b.CacheControl})
	default:
		type plain ContentBlock // no MarshalJSON: avoids recursion
		out, err = json.Marshal(plain(b))
	}
	if err != nil {
		return nil, err
	}
	return openai.AppendFields(out, b.Extra, blockFields), nil
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
