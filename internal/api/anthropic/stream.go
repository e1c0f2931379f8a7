package anthropic

// Stream event names. Each SSE event carries the name in "event:" and the
// same string in the data's "type".
const (
	EventMessageStart      = "message_start"
	EventContentBlockStart = "content_block_start"
	EventContentBlockDelta = "content_block_delta"
	EventContentBlockStop  = "content_block_stop"
	EventMessageDelta      = "message_delta"
	EventMessageStop       = "message_stop"
	EventPing              = "ping"
	EventError             = "error"
)

// Delta types of content_block_delta.
const (
	DeltaText      = "text_delta"
	DeltaInputJSON = "input_json_delta"
	DeltaThinking  = "thinking_delta"
	DeltaSignature = "signature_delta"
)

// MessageStartEvent opens a stream. Message.Usage must be present.
type MessageStartEvent struct {
	Type    string  `json:"type"`
	Message Message `json:"message"`
}

// ContentBlockStartEvent opens the block at Index.
type ContentBlockStartEvent struct {
	Type         string       `json:"type"`
	Index        int          `json:"index"`
	ContentBlock ContentBlock `json:"content_block"`
}

// ContentBlockDeltaEvent extends the block at Index.
type ContentBlockDeltaEvent struct {
	Type  string     `json:"type"`
	Index int        `json:"index"`
	Delta BlockDelta `json:"delta"`
}

// BlockDelta is the delta of a content_block_delta event; Type selects the
// field that is set.
type BlockDelta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	Signature   *string `json:"signature,omitempty"`
}

// ContentBlockStopEvent closes the block at Index.
type ContentBlockStopEvent struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

// MessageDeltaEvent carries the stop reason and the final usage.
type MessageDeltaEvent struct {
	Type  string       `json:"type"`
	Delta MessageDelta `json:"delta"`
	Usage DeltaUsage   `json:"usage"`
}

// MessageDelta is the delta of a message_delta event. Both fields are always
// written; null means "none".
type MessageDelta struct {
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

// TypeOnlyEvent is message_stop or ping.
type TypeOnlyEvent struct {
	Type string `json:"type"`
}

// StreamEvent decodes any stream event, for translators that read an
// Anthropic stream. Only the fields of the event's type are set.
type StreamEvent struct {
	Type         string        `json:"type"`
	Message      *Message      `json:"message,omitempty"`
	Index        int           `json:"index"`
	ContentBlock *ContentBlock `json:"content_block,omitempty"`
	Delta        *StreamDelta  `json:"delta,omitempty"`
	Usage        *DeltaUsage   `json:"usage,omitempty"`
	Error        *ErrorBody    `json:"error,omitempty"`
}

// StreamDelta is the union of content_block_delta and message_delta deltas.
type StreamDelta struct {
	Type         string  `json:"type"`
	Text         string  `json:"text"`
	PartialJSON  string  `json:"partial_json"`
	Thinking     string  `json:"thinking"`
	Signature    string  `json:"signature"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}
