package openai

import "encoding/json"

// CompletionRequest is the body of POST /v1/completions (legacy text completions).
type CompletionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"` // string, []string, []int or [][]int
	Stream        bool            `json:"stream,omitempty"`
	StreamOptions *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens     *int            `json:"max_tokens,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	N             *int            `json:"n,omitempty"`
	Stop          StopList        `json:"stop,omitempty"`
	Seed          *int64          `json:"seed,omitempty"`
	Echo          bool            `json:"echo,omitempty"`
	User          string          `json:"user,omitempty"`
	IgnoreEOS     bool            `json:"ignore_eos,omitempty"`
}

// Completion is a text completion response or stream chunk.
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"` // "text_completion"
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
	SystemFingerprint *string            `json:"system_fingerprint,omitempty"`
}

// CompletionChoice is one choice of a text completion.
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
	Logprobs     any     `json:"logprobs"`
}

// EmbeddingRequest is the body of POST /v1/embeddings.
type EmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"` // string, []string, []int or [][]int
	EncodingFormat string          `json:"encoding_format,omitempty"`
	Dimensions     *int            `json:"dimensions,omitempty"`
	User           string          `json:"user,omitempty"`
}

// EmbeddingResponse is the body returned by POST /v1/embeddings.
type EmbeddingResponse struct {
	ID     string      `json:"id,omitempty"`
	Object string      `json:"object"` // "list"
	Data   []Embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  *Usage      `json:"usage,omitempty"`
}

// Embedding is one vector. Embedding holds []float32 or a base64 string.
type Embedding struct {
	Object    string `json:"object"` // "embedding"
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}
