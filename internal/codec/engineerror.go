package codec

import (
	"encoding/json"
	"regexp"
	"strconv"
)

// EngineError is what an engine's error body says beyond its message: its
// own error type, and for a request too long for the model's context the
// numbers (llama.cpp sends them as fields; vLLM and SGLang write them in
// the message).
type EngineError struct {
	Type string // the engine's error type: exceed_context_size_error, BadRequestError, ...
	// PromptTokens, ContextTokens and OutputTokens describe a context
	// overflow; 0 when not said.
	PromptTokens, ContextTokens, OutputTokens int
}

// ContextOverflow reports whether the engine refused the request for not
// fitting its context, with the numbers to say so.
func (e EngineError) ContextOverflow() bool { return e.PromptTokens > 0 && e.ContextTokens > 0 }

// How vLLM (several releases) and SGLang word a context overflow.
var (
	ctxLenRes = []*regexp.Regexp{
		regexp.MustCompile(`maximum context length (?:is|of) (\d+)`),
		regexp.MustCompile(`maximum model length (?:is|of) (\d+)`),
		regexp.MustCompile(`context length \((\d+) tokens\)`),
		regexp.MustCompile(`context size \((\d+) tokens\)`),
		regexp.MustCompile(`\d+ tokens > (\d+) maximum`), // Anthropic's API
	}
	promptLenRes = []*regexp.Regexp{
		regexp.MustCompile(`(\d+) in the messages`),
		regexp.MustCompile(`has (\d+) input tokens`),
		regexp.MustCompile(`prompt \(length (\d+)\)`),
		regexp.MustCompile(`input \((\d+) tokens\)`),
		regexp.MustCompile(`(\d+) tokens from the input`),
		regexp.MustCompile(`request \((\d+) tokens\)`),
		regexp.MustCompile(`too long: (\d+) tokens > \d+ maximum`),
	}
	outputLenRes = []*regexp.Regexp{
		regexp.MustCompile(`(\d+) in the completion`),
		regexp.MustCompile(`is too large: (\d+)`),
		regexp.MustCompile(`(\d+) tokens for the completion`),
	}
)

// ParseEngineError reads an engine's error body.
func ParseEngineError(body []byte) EngineError {
	var v struct {
		Error json.RawMessage `json:"error"`
		Type  string          `json:"type"` // vLLM's older flat body
	}
	var out EngineError
	if json.Unmarshal(body, &v) != nil {
		return out
	}
	out.Type = v.Type
	var inner struct {
		Type          string          `json:"type"`
		NPromptTokens json.RawMessage `json:"n_prompt_tokens"`
		NCtx          json.RawMessage `json:"n_ctx"`
	}
	if len(v.Error) > 0 && json.Unmarshal(v.Error, &inner) == nil {
		if inner.Type != "" {
			out.Type = inner.Type
		}
		out.PromptTokens, out.ContextTokens = positive(inner.NPromptTokens), positive(inner.NCtx)
	}
	if out.ContextOverflow() {
		return out
	}
	msg := ErrorMessage(body)
	ctx, prompt := firstNumber(msg, ctxLenRes), firstNumber(msg, promptLenRes)
	if ctx > 0 && prompt > 0 {
		out.PromptTokens, out.ContextTokens, out.OutputTokens = prompt, ctx, firstNumber(msg, outputLenRes)
	}
	return out
}

func firstNumber(s string, res []*regexp.Regexp) int {
	for _, re := range res {
		if m := re.FindStringSubmatch(s); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

func positive(raw json.RawMessage) int {
	var n float64
	if len(raw) == 0 || json.Unmarshal(raw, &n) != nil || n <= 0 || n > 1<<31 {
		return 0
	}
	return int(n)
}
