package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"

	"llmgate/internal/jsonscan"
)

// ChatCompletionRequest is the body of POST /v1/chat/completions. Members
// the type does not name are kept in Extra when decoding and written back
// when encoding, so a decoded request forwards engine-specific parameters
// untouched; most of the gateway passes bodies through without decoding them.
type ChatCompletionRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	N                   *int            `json:"n,omitempty"`
	Stop                StopList        `json:"stop,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	User                string          `json:"user,omitempty"`
	Tools               []Tool          `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	ResponseFormat      json.RawMessage `json:"response_format,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`
	// IgnoreEOS is a vLLM extension used by benchmarks to force max_tokens.
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
	// TopK is a sampling parameter of vLLM, SGLang, llama.cpp and Ollama
	// (not of OpenAI's API).
	TopK *int `json:"top_k,omitempty"`

	// Extra holds the members not named above (chat_template_kwargs, ...).
	Extra Extra `json:"-"`
}

var chatRequestFields = FieldNames(reflect.TypeFor[ChatCompletionRequest]())

// IsChatRequestField reports whether name is a member ChatCompletionRequest
// names (and so always writes from its typed field, never from Extra).
func IsChatRequestField(name string) bool { return chatRequestFields.Has(name) }

// UnmarshalJSON decodes the named fields and keeps the others in Extra.
func (r *ChatCompletionRequest) UnmarshalJSON(b []byte) error {
	type plain ChatCompletionRequest // no methods: no recursion
	var p plain
	if spans, err := jsonscan.Find(b, "messages"); err == nil && spans[0].Valid() {
		p.Messages = Presized[ChatMessage](b[spans[0].Start:spans[0].End])
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = ChatCompletionRequest(p)
	r.Extra = UnknownFields(b, chatRequestFields)
	return nil
}

// MarshalJSON writes the named fields, then the members of Extra.
func (r ChatCompletionRequest) MarshalJSON() ([]byte, error) {
	type plain ChatCompletionRequest
	b, err := json.Marshal(plain(r))
	if err != nil {
		return nil, err
	}
	return AppendFields(b, r.Extra, chatRequestFields), nil
}

// StreamOptions controls extra stream content.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// StopList accepts either a string or an array of strings.
type StopList []string

// UnmarshalJSON accepts "x", ["x","y"] or null.
func (s *StopList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = StopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop must be a string or an array of strings")
	}
	*s = many
	return nil
}

// ChatMessage is one message of a chat conversation.
type ChatMessage struct {
	Role       string     `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// ReasoningContent is emitted by reasoning models served by vLLM, SGLang
	// and DeepSeek.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// Reasoning is the same text under the name newer vLLM releases (and
	// Ollama) use.
	Reasoning string `json:"reasoning,omitempty"`
}

// ReasoningText returns the message's chain of thought, whichever field
// carried it.
func (m *ChatMessage) ReasoningText() string {
	if m.ReasoningContent != "" {
		return m.ReasoningContent
	}
	return m.Reasoning
}

// Content is a message content: either a plain string or a list of parts.
// A nil Content marshals as null (assistant messages that only call tools).
type Content struct {
	Text  *string
	Parts []ContentPart
}

// TextContent returns a Content holding a plain string.
func TextContent(s string) Content { return Content{Text: &s} }

// String returns the text of the content, joining text parts.
func (c Content) String() string {
	if c.Text != nil {
		return *c.Text
	}
	var buf bytes.Buffer
	for _, p := range c.Parts {
		if p.Type == "text" {
			buf.WriteString(p.Text)
		}
	}
	return buf.String()
}

// IsNull reports whether the content is absent.
func (c Content) IsNull() bool { return c.Text == nil && c.Parts == nil }

// MarshalJSON writes a string, an array of parts, or null.
func (c Content) MarshalJSON() ([]byte, error) {
	switch {
	case c.Text != nil:
		return json.Marshal(*c.Text)
	case c.Parts != nil:
		return json.Marshal(c.Parts)
	default:
		return []byte("null"), nil
	}
}

// UnmarshalJSON reads a string, an array of parts, or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	return DecodeStringOrList(b, &c.Text, &c.Parts, "content must be a string, an array of content parts, or null")
}

// ContentPart is one element of an array content.
type ContentPart struct {
	Type     string    `json:"type"` // "text", "image_url", "input_audio", ...
	Text     string    `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
	// CacheControl is the Anthropic prompt-caching marker some clients put
	// on chat content parts (as OpenRouter and LiteLLM accept it); it is
	// kept for anthropic backends and never set on requests to chat ones.
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// ImageURL references an image by URL or data: URI.
type ImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// Tool is a function tool offered to the model.
type Tool struct {
	Type     string       `json:"type"`
	Function FunctionDecl `json:"function"`
}

// FunctionDecl declares a function the model may call.
type FunctionDecl struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolCall is a call the model made. In stream deltas Index identifies the
// call being extended and the other fields may be partial.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall holds the function name and its JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Usage is token accounting as OpenAI reports it.
type Usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// PromptTokensDetails breaks prompt tokens down.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// CompletionTokensDetails breaks completion tokens down.
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// ChatCompletion is a non-streaming chat response.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "chat.completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
	SystemFingerprint *string      `json:"system_fingerprint,omitempty"`
}

// ChatChoice is one choice of a non-streaming response.
type ChatChoice struct {
	Index        int         `json:"index"`
	Message      ChatMessage `json:"message"`
	FinishReason *string     `json:"finish_reason"`
	Logprobs     any         `json:"logprobs"`
}

// ChatCompletionChunk is one SSE event of a streaming chat response.
type ChatCompletionChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"` // "chat.completion.chunk"
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage,omitempty"`
	SystemFingerprint *string       `json:"system_fingerprint,omitempty"`
}

// ChunkChoice is one choice delta of a stream chunk.
type ChunkChoice struct {
	Index        int        `json:"index"`
	Delta        ChunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
	Logprobs     any        `json:"logprobs"`
}

// ChunkDelta is the incremental message content of a chunk.
type ChunkDelta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// MaxModelLen is a vLLM extension.
	MaxModelLen int `json:"max_model_len,omitempty"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}
