package openai

import (
	"encoding/json"

	"llmgate/internal/apierror"
)

// ResponsesRequest is the body of POST /v1/responses (the Responses API as
// Codex uses it). Only the fields the translator reads are typed.
type ResponsesRequest struct {
	Model              string            `json:"model"`
	Input              ResponsesInput    `json:"input"`
	Instructions       string            `json:"instructions,omitempty"`
	Tools              []ResponsesTool   `json:"tools,omitempty"`
	ToolChoice         json.RawMessage   `json:"tool_choice,omitempty"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls,omitempty"`
	MaxOutputTokens    *int              `json:"max_output_tokens,omitempty"`
	Temperature        *float64          `json:"temperature,omitempty"`
	TopP               *float64          `json:"top_p,omitempty"`
	Stream             bool              `json:"stream,omitempty"`
	Store              *bool             `json:"store,omitempty"`
	PreviousResponseID string            `json:"previous_response_id,omitempty"`
	User               string            `json:"user,omitempty"`
	SafetyIdentifier   string            `json:"safety_identifier,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	Reasoning          *ReasoningConfig  `json:"reasoning,omitempty"`
	Text               *TextConfig       `json:"text,omitempty"`
	Include            []string          `json:"include,omitempty"`
	PromptCacheKey     string            `json:"prompt_cache_key,omitempty"`
	Conversation       json.RawMessage   `json:"conversation,omitempty"`
}

// ReasoningConfig is the "reasoning" request object.
type ReasoningConfig struct {
	Effort  string `json:"effort,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// TextConfig is the "text" request object (output format).
type TextConfig struct {
	Format    *TextFormat `json:"format,omitempty"`
	Verbosity string      `json:"verbosity,omitempty"`
}

// TextFormat is {"type":"text"}, {"type":"json_object"} or
// {"type":"json_schema","name":...,"schema":...,"strict":...}.
type TextFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ResponsesInput is the "input" field: a string or a list of input items.
type ResponsesInput struct {
	Text  *string
	Items []InputItem
}

// MarshalJSON writes a string or an array of items.
func (in ResponsesInput) MarshalJSON() ([]byte, error) {
	if in.Text != nil {
		return json.Marshal(*in.Text)
	}
	if in.Items == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(in.Items)
}

// UnmarshalJSON reads a string or an array of items.
func (in *ResponsesInput) UnmarshalJSON(b []byte) error {
	return DecodeStringOrList(b, &in.Text, &in.Items, "input must be a string or an array of input items")
}

// InputItem is one element of a Responses input list. Type is "message"
// (also implied by a bare {"role","content"}), "function_call",
// "function_call_output", "reasoning", or another item kind.
type InputItem struct {
	Type    string           `json:"type,omitempty"`
	ID      string           `json:"id,omitempty"`
	Role    string           `json:"role,omitempty"`
	Content ResponsesContent `json:"content,omitzero"`
	Status  string           `json:"status,omitempty"`
	// function_call
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	// function_call_output: a string or a list of content parts
	Output ResponsesContent `json:"output,omitzero"`
	// reasoning: summary parts (summary_text) and the opaque
	// encrypted_content the server returned with the item; its raw
	// reasoning_text parts are in Content.
	Summary          []ResponsesContentPart `json:"summary,omitempty"`
	EncryptedContent string                 `json:"encrypted_content,omitempty"`
}

// ResponsesContent is a string or a list of content parts.
type ResponsesContent struct {
	Text  *string
	Parts []ResponsesContentPart
}

// IsZero reports whether the content is absent.
func (c ResponsesContent) IsZero() bool { return c.Text == nil && c.Parts == nil }

// MarshalJSON writes a string or an array of parts.
func (c ResponsesContent) MarshalJSON() ([]byte, error) {
	switch {
	case c.Text != nil:
		return json.Marshal(*c.Text)
	case c.Parts != nil:
		return json.Marshal(c.Parts)
	default:
		return []byte(`""`), nil
	}
}

// UnmarshalJSON reads a string, an array of parts, or null.
func (c *ResponsesContent) UnmarshalJSON(b []byte) error {
	return DecodeStringOrList(b, &c.Text, &c.Parts, "content must be a string or an array of content parts")
}

// ResponsesContentPart is an input or output content part: input_text,
// output_text, refusal, input_image, input_file.
type ResponsesContentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	Refusal  string `json:"refusal,omitempty"`
	ImageURL string `json:"image_url,omitempty"`
	FileID   string `json:"file_id,omitempty"`
	FileData string `json:"file_data,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// ResponsesTool is a tool of a Responses request. Function tools are flat:
// {"type":"function","name","description","parameters","strict"}.
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Response is the Responses API response object, returned by a
// non-streaming call and embedded in lifecycle stream events. Nullable
// fields are pointers so they are written as null, as the API does.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"` // "response"
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Error              *ResponseError     `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []OutputItem       `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Store              bool               `json:"store"`
	Temperature        *float64           `json:"temperature"`
	TopP               *float64           `json:"top_p"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []ResponsesTool    `json:"tools"`
	Truncation         string             `json:"truncation"`
	Usage              *ResponsesUsage    `json:"usage"`
	User               *string            `json:"user"`
	Metadata           map[string]string  `json:"metadata"`
}

// Response statuses.
const (
	ResponseInProgress = "in_progress"
	ResponseCompleted  = "completed"
	ResponseIncomplete = "incomplete"
	ResponseFailed     = "failed"
)

// ResponseError is the error of a failed response.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails says why a response is incomplete: "max_output_tokens"
// or "content_filter".
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// OutputItem is an item of Response.Output: a "message" (Role, Content), a
// "function_call" (CallID, Name, Arguments) or a "reasoning" item (Summary,
// Content). MarshalJSON writes the fields of its type, including empty
// arrays the SDKs require.
type OutputItem struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Status    string          `json:"status,omitempty"`
	Role      string          `json:"role,omitempty"`
	Content   []OutputContent `json:"content,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments string          `json:"arguments,omitempty"`
	Summary   []OutputContent `json:"summary,omitempty"`
	// EncryptedContent is the opaque state of a reasoning item, returned
	// when the request's include lists "reasoning.encrypted_content".
	EncryptedContent string `json:"encrypted_content,omitempty"`
}

// MarshalJSON writes the fields of the item's type.
func (it OutputItem) MarshalJSON() ([]byte, error) {
	nonNil := func(c []OutputContent) []OutputContent {
		if c == nil {
			return []OutputContent{}
		}
		return c
	}
	switch it.Type {
	case "message":
		return json.Marshal(struct {
			Type    string          `json:"type"`
			ID      string          `json:"id"`
			Status  string          `json:"status"`
			Role    string          `json:"role"`
			Content []OutputContent `json:"content"`
		}{it.Type, it.ID, it.Status, it.Role, nonNil(it.Content)})
	case "function_call":
		return json.Marshal(struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			Status    string `json:"status"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}{it.Type, it.ID, it.Status, it.CallID, it.Name, it.Arguments})
	case "reasoning":
		return json.Marshal(struct {
			Type             string          `json:"type"`
			ID               string          `json:"id"`
			Status           string          `json:"status,omitempty"`
			Summary          []OutputContent `json:"summary"`
			Content          []OutputContent `json:"content,omitempty"`
			EncryptedContent string          `json:"encrypted_content,omitempty"`
		}{it.Type, it.ID, it.Status, nonNil(it.Summary), it.Content, it.EncryptedContent})
	default:
		type plain OutputItem
		return json.Marshal(plain(it))
	}
}

// OutputContent is a content part of an output item: "output_text" (Text,
// Annotations, Logprobs), "refusal", "summary_text" or "reasoning_text".
type OutputContent struct {
	Type        string            `json:"type"`
	Text        string            `json:"text"`
	Annotations []json.RawMessage `json:"annotations,omitempty"`
	Logprobs    []json.RawMessage `json:"logprobs,omitempty"`
}

// MarshalJSON writes output_text parts with the annotations and logprobs
// arrays the SDKs require, and other parts with type and text only.
func (c OutputContent) MarshalJSON() ([]byte, error) {
	if c.Type != "output_text" {
		return json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{c.Type, c.Text})
	}
	ann, lp := c.Annotations, c.Logprobs
	if ann == nil {
		ann = []json.RawMessage{}
	}
	if lp == nil {
		lp = []json.RawMessage{}
	}
	return json.Marshal(struct {
		Type        string            `json:"type"`
		Text        string            `json:"text"`
		Annotations []json.RawMessage `json:"annotations"`
		Logprobs    []json.RawMessage `json:"logprobs"`
	}{c.Type, c.Text, ann, lp})
}

// ResponsesUsage is token accounting in the Responses API.
type ResponsesUsage struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int                 `json:"total_tokens"`
}

// InputTokensDetails breaks input tokens down.
type InputTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// OutputTokensDetails breaks output tokens down.
type OutputTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// ResponsesLifecycleEvent is response.created, response.in_progress,
// response.completed, response.incomplete and response.failed.
type ResponsesLifecycleEvent struct {
	Type           string   `json:"type"`
	SequenceNumber int      `json:"sequence_number"`
	Response       Response `json:"response"`
}

// ResponsesOutputItemEvent is response.output_item.added and .done.
type ResponsesOutputItemEvent struct {
	Type           string     `json:"type"`
	SequenceNumber int        `json:"sequence_number"`
	OutputIndex    int        `json:"output_index"`
	Item           OutputItem `json:"item"`
}

// ResponsesContentPartEvent is response.content_part.added and .done.
type ResponsesContentPartEvent struct {
	Type           string        `json:"type"`
	SequenceNumber int           `json:"sequence_number"`
	ItemID         string        `json:"item_id"`
	OutputIndex    int           `json:"output_index"`
	ContentIndex   int           `json:"content_index"`
	Part           OutputContent `json:"part"`
}

// ResponsesTextEvent is response.output_text.delta (Delta set) and
// response.output_text.done (Text set), and the reasoning_text variants.
type ResponsesTextEvent struct {
	Type           string            `json:"type"`
	SequenceNumber int               `json:"sequence_number"`
	ItemID         string            `json:"item_id"`
	OutputIndex    int               `json:"output_index"`
	ContentIndex   int               `json:"content_index"`
	Delta          *string           `json:"delta,omitempty"`
	Text           *string           `json:"text,omitempty"`
	Logprobs       []json.RawMessage `json:"logprobs"`
}

// ResponsesArgumentsEvent is response.function_call_arguments.delta (Delta
// set) and .done (Arguments set).
type ResponsesArgumentsEvent struct {
	Type           string  `json:"type"`
	SequenceNumber int     `json:"sequence_number"`
	ItemID         string  `json:"item_id"`
	OutputIndex    int     `json:"output_index"`
	Delta          *string `json:"delta,omitempty"`
	Arguments      *string `json:"arguments,omitempty"`
}

// ResponsesErrorEvent is the "error" stream event.
type ResponsesErrorEvent struct {
	Type           string  `json:"type"` // "error"
	SequenceNumber int     `json:"sequence_number"`
	Code           *string `json:"code"`
	Message        string  `json:"message"`
	Param          *string `json:"param"`
}

// ResponsesErrorCode maps a dialect-neutral kind to the code of a failed
// response (Response.Error.Code), which Codex branches on: rate limits are
// retried after a delay, server errors are retried, others are shown.
func ResponsesErrorCode(k apierror.Kind) string {
	switch k {
	case apierror.KindRateLimit:
		return "rate_limit_exceeded"
	case apierror.KindInvalidRequest:
		return "invalid_prompt"
	default:
		return "server_error"
	}
}

// Responses API errors before the stream starts use the ordinary OpenAI
// envelope ({"error":{"message","type","param","code"}}): WriteError and
// MarshalError in errors.go render them.
