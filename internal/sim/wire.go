package sim

import "encoding/json"

// Wire shapes as vLLM 0.11 serializes them. Field order and the presence of
// null fields follow vLLM's pydantic models (vllm/entrypoints/openai/
// protocol.py): non-streaming responses are dumped with every field, stream
// chunks with exclude_unset, the usage-only chunk with exclude_none.

// jsonNull marshals as null; used where vLLM always sends null.
type jsonNull struct{}

func (jsonNull) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

var rawNull = json.RawMessage("null")

type usageInfo struct {
	PromptTokens        int             `json:"prompt_tokens"`
	TotalTokens         int             `json:"total_tokens"`
	CompletionTokens    int             `json:"completion_tokens"`
	PromptTokensDetails json.RawMessage `json:"prompt_tokens_details,omitempty"`
	// CompletionTokensDetails is reported only for models with a reasoning
	// parser, as vLLM releases that count reasoning tokens do (vLLM PR
	// #45802); vLLM 0.11 has no such field.
	CompletionTokensDetails *completionDetails `json:"completion_tokens_details,omitempty"`
}

type completionDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
	// llama.cpp's numbers on a request that does not fit the context.
	NPromptTokens int `json:"n_prompt_tokens,omitempty"`
	NCtx          int `json:"n_ctx,omitempty"`
}

type errorResponse struct {
	Error errorInfo `json:"error"`
}

// Chat, non-streaming.

type chatMessage struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	Refusal          jsonNull       `json:"refusal"`
	Annotations      jsonNull       `json:"annotations"`
	Audio            jsonNull       `json:"audio"`
	FunctionCall     jsonNull       `json:"function_call"`
	ToolCalls        []toolCallWire `json:"tool_calls"`
	ReasoningContent *string        `json:"reasoning_content"`
}

// toolCallWire is vLLM's ToolCall: id "chatcmpl-tool-<32 hex>".
type toolCallWire struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionWire `json:"function"`
}

type functionWire struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     jsonNull    `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	StopReason   any         `json:"stop_reason"`
	TokenIDs     jsonNull    `json:"token_ids"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	ServiceTier       jsonNull     `json:"service_tier"`
	SystemFingerprint jsonNull     `json:"system_fingerprint"`
	Usage             usageInfo    `json:"usage"`
	PromptLogprobs    jsonNull     `json:"prompt_logprobs"`
	PromptTokenIDs    jsonNull     `json:"prompt_token_ids"`
	KVTransferParams  jsonNull     `json:"kv_transfer_params"`
	// Timings are llama-server's (the llama.cpp face only).
	Timings *llamaTimings `json:"timings,omitempty"`
}

// Chat, streaming.

// chatDelta is vLLM's DeltaMessage dumped with exclude_unset: only the
// fields a chunk sets appear.
type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []deltaToolCall `json:"tool_calls,omitempty"`
}

// deltaToolCall is vLLM's DeltaToolCall: the first delta of a call carries
// id, type and the function name, later ones argument pieces only.
type deltaToolCall struct {
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Index    int           `json:"index"`
	Function deltaFunction `json:"function"`
}

type deltaFunction struct {
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

type chatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        chatDelta       `json:"delta"`
	Logprobs     jsonNull        `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
	TokenIDs     json.RawMessage `json:"token_ids,omitempty"`
}

type chatChunk struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Created        int64             `json:"created"`
	Model          string            `json:"model"`
	Choices        []chatChunkChoice `json:"choices"`
	Usage          *usageInfo        `json:"usage,omitempty"`
	PromptTokenIDs json.RawMessage   `json:"prompt_token_ids,omitempty"`
}

// Completions.

type completionChoice struct {
	Index          int      `json:"index"`
	Text           string   `json:"text"`
	Logprobs       jsonNull `json:"logprobs"`
	FinishReason   *string  `json:"finish_reason"`
	StopReason     any      `json:"stop_reason"`
	TokenIDs       jsonNull `json:"token_ids"`
	PromptLogprobs jsonNull `json:"prompt_logprobs"`
	PromptTokenIDs jsonNull `json:"prompt_token_ids"`
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	ServiceTier       jsonNull           `json:"service_tier"`
	SystemFingerprint jsonNull           `json:"system_fingerprint"`
	Usage             usageInfo          `json:"usage"`
	KVTransferParams  jsonNull           `json:"kv_transfer_params"`
	Timings           *llamaTimings      `json:"timings,omitempty"`
}

type completionChunkChoice struct {
	Index          int      `json:"index"`
	Text           string   `json:"text"`
	Logprobs       jsonNull `json:"logprobs"`
	FinishReason   *string  `json:"finish_reason"`
	StopReason     any      `json:"stop_reason"`
	PromptTokenIDs jsonNull `json:"prompt_token_ids"`
	TokenIDs       jsonNull `json:"token_ids"`
}

type completionChunk struct {
	ID      string                  `json:"id"`
	Object  string                  `json:"object"`
	Created int64                   `json:"created"`
	Model   string                  `json:"model"`
	Choices []completionChunkChoice `json:"choices"`
	Usage   *usageInfo              `json:"usage"`
}

type completionUsageChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []any         `json:"choices"`
	Usage   usageInfo     `json:"usage"`
	Timings *llamaTimings `json:"timings,omitempty"`
}

// llamaTimings is llama-server's "timings" object: cache_n prompt tokens
// reused from the slot's cache, prompt_n computed, predicted_n generated.
type llamaTimings struct {
	CacheN              int     `json:"cache_n"`
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// Embeddings.

type embeddingData struct {
	Index     int    `json:"index"`
	Object    string `json:"object"`
	Embedding any    `json:"embedding"`
}

type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   usageInfo       `json:"usage"`
}

// Models.

type modelPermission struct {
	ID                 string   `json:"id"`
	Object             string   `json:"object"`
	Created            int64    `json:"created"`
	AllowCreateEngine  bool     `json:"allow_create_engine"`
	AllowSampling      bool     `json:"allow_sampling"`
	AllowLogprobs      bool     `json:"allow_logprobs"`
	AllowSearchIndices bool     `json:"allow_search_indices"`
	AllowView          bool     `json:"allow_view"`
	AllowFineTuning    bool     `json:"allow_fine_tuning"`
	Organization       string   `json:"organization"`
	Group              jsonNull `json:"group"`
	IsBlocking         bool     `json:"is_blocking"`
}

type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        string            `json:"root"`
	Parent      jsonNull          `json:"parent"`
	MaxModelLen int               `json:"max_model_len"`
	Permission  []modelPermission `json:"permission"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

// Requests: the fields the simulator honours. Unknown fields are ignored,
// as vLLM ignores them (with a log line).

type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []chatRequestMsg  `json:"messages"`
	Stream              bool              `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Temperature         *float64          `json:"temperature"`
	N                   *int              `json:"n"`
	Stop                stopParam         `json:"stop"`
	Seed                *int64            `json:"seed"`
	IgnoreEOS           bool              `json:"ignore_eos"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	// ChatTemplateKwargs is passed to the chat template; Qwen3's reads
	// enable_thinking.
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	// IncludeReasoning false drops reasoning_content from the answer (the
	// tokens are still generated), as in vLLM.
	IncludeReasoning *bool `json:"include_reasoning"`
}

type chatRequestMsg struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name"`
	// ToolCalls of an assistant message count as prompt tokens.
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type streamOptions struct {
	IncludeUsage         *bool `json:"include_usage"`
	ContinuousUsageStats bool  `json:"continuous_usage_stats"`
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
	Temperature   *float64        `json:"temperature"`
	N             *int            `json:"n"`
	Stop          stopParam       `json:"stop"`
	Seed          *int64          `json:"seed"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	Echo          bool            `json:"echo"`
}

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// stopParam accepts a string, a list of strings, or null.
type stopParam []string

func (s *stopParam) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = stopParam{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errStop
	}
	*s = many
	return nil
}

type stopError struct{}

func (stopError) Error() string { return "stop must be a string or a list of strings" }

var errStop = stopError{}
