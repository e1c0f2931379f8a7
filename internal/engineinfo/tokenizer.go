package engineinfo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/dialect"
	"llmgate/internal/provider"
)

// Method is how a deployment's prompts are counted.
type Method string

// Counting methods, by engine.
const (
	// MethodVLLM is vLLM's (and SGLang's) POST /tokenize, which renders
	// chat messages through the model's chat template itself.
	MethodVLLM Method = "vllm /tokenize"
	// MethodLlamaCpp is llama.cpp's POST /apply-template (the chat
	// template) followed by POST /tokenize of the rendered prompt.
	MethodLlamaCpp Method = "llama.cpp /apply-template + /tokenize"
)

// Prompt is what a request asks the engine to read: chat messages and
// tools (rendered by the engine's chat template), or a completion prompt.
type Prompt struct {
	Messages []openai.ChatMessage
	Tools    []openai.Tool
	Text     string // a completion prompt, when Messages is nil
}

// ErrNoTokenizer is Count's answer for a deployment whose prompts cannot be
// counted by its engine; the caller estimates.
var ErrNoTokenizer = errors.New("the backend has no usable tokenizer")

// errAnswerTooLarge is a tokenizer answer beyond the limit.
var errAnswerTooLarge = errors.New("answer too large")

const (
	// noTokenizerFor is how long a server whose tokenizer cannot be used
	// is not asked again (a Refresh asks at once).
	noTokenizerFor = 10 * time.Minute
	// maxTokenizeAnswer bounds a tokenizer's answer, which lists every
	// token id: ~7 bytes a token, so a 1M-token prompt is ~7 MB.
	maxTokenizeAnswer = 64 << 20
)

// tokenizerState is what was learned of one deployment's tokenizer.
type tokenizerState struct {
	method  Method    // what worked last
	reason  string    // why none works, when retryAt is set
	retryAt time.Time // not asked again before this
}

// shapeError is an answer that shows the endpoint is not a tokenizer of
// the shape asked (404, a catch-all page, another engine's API): the
// method is not usable there.
type shapeError struct{ reason string }

func (e *shapeError) Error() string { return e.reason }

// Count counts p with the engine of the deployment (b, upstream): exactly
// what the engine will report as prompt_tokens for a request with the same
// messages and tools. A tokenizer request larger than maxBody bytes is not
// sent. It returns ErrNoTokenizer (wrapped, with the reason) when the
// engine has no usable tokenizer, and another error when it could not be
// asked this time (down, slow, refused this prompt).
func (l *Learner) Count(ctx context.Context, b *provider.Backend, upstream string, p Prompt, maxBody int) (int, error) {
	if b == nil || b.Dialect == dialect.Anthropic {
		return 0, ErrNoTokenizer
	}
	if !strings.HasSuffix(strings.TrimSuffix(b.BaseURL, "/"), "/v1") {
		return 0, fmt.Errorf("%w: its base URL does not end in /v1, so it is not an engine's OpenAI API", ErrNoTokenizer)
	}
	info := l.lookup(ctx, b, upstream)
	k := key{b, upstream}
	l.mu.Lock()
	e := l.cache[k]
	if e == nil { // forgotten meanwhile (cannot happen: entries are never deleted)
		l.mu.Unlock()
		return 0, ErrNoTokenizer
	}
	st := e.tok
	gen := e.gen
	l.mu.Unlock()
	if !st.retryAt.IsZero() && l.now().Before(st.retryAt) {
		return 0, fmt.Errorf("%w: %s", ErrNoTokenizer, st.reason)
	}
	methods := []Method{st.method}
	if st.method == "" {
		switch info.Kind {
		case KindLlamaCpp:
			methods = []Method{MethodLlamaCpp}
		case KindOllama:
			l.noTokenizer(e, gen, b, upstream, info.Kind, "Ollama has no tokenizer endpoint")
			return 0, fmt.Errorf("%w: Ollama has no tokenizer endpoint", ErrNoTokenizer)
		default:
			methods = []Method{MethodVLLM, MethodLlamaCpp}
		}
	}
	var reasons []string
	for _, m := range methods {
		n, err := count(ctx, b, upstream, m, p, maxBody)
		if err == nil {
			l.mu.Lock()
			if e.gen == gen {
				e.tok = tokenizerState{method: m}
				e.info.Tokenizer, e.info.NoTokenizer = m, ""
			}
			l.mu.Unlock()
			return n, nil
		}
		var se *shapeError
		if !errors.As(err, &se) {
			return 0, err // could not ask this time: estimate this once
		}
		reasons = append(reasons, string(m)+": "+se.reason)
	}
	reason := strings.Join(reasons, "; ")
	l.noTokenizer(e, gen, b, upstream, info.Kind, reason)
	return 0, fmt.Errorf("%w: %s", ErrNoTokenizer, reason)
}

// noTokenizer records (and logs, once until it changes) that a
// deployment's prompts cannot be counted by its engine.
func (l *Learner) noTokenizer(e *entry, gen int, b *provider.Backend, upstream string, kind Kind, reason string) {
	l.mu.Lock()
	if e.gen != gen {
		l.mu.Unlock()
		return
	}
	changed := e.info.NoTokenizer != reason
	e.tok = tokenizerState{reason: reason, retryAt: l.now().Add(noTokenizerFor)}
	e.info.Tokenizer, e.info.NoTokenizer = "", reason
	l.mu.Unlock()
	if !changed {
		return
	}
	engine := string(kind)
	if engine == "" {
		engine = "unknown"
	}
	l.log.Warn("backend's tokenizer cannot be used: prompts sent there are estimated (count_tokens, fitting output limits); the engine still checks its context",
		"backend", b.Name, "model", upstream, "engine", engine, "reason", reason, "asked_again_in", noTokenizerFor)
}

// count asks one tokenizer method.
func count(ctx context.Context, b *provider.Backend, upstream string, m Method, p Prompt, maxBody int) (int, error) {
	switch m {
	case MethodVLLM:
		var body any
		if p.Messages != nil {
			body = vllmChat{Model: upstream, Messages: p.Messages, Tools: p.Tools, AddGenerationPrompt: true}
		} else {
			body = vllmPrompt{Model: upstream, Prompt: p.Text}
		}
		raw, err := marshalBounded(body, maxBody)
		if err != nil {
			return 0, err
		}
		var got struct {
			Count  *int            `json:"count"`
			Tokens json.RawMessage `json:"tokens"`
		}
		if err := post(ctx, b, "/tokenize", raw, &got); err != nil {
			return 0, err
		}
		if got.Count == nil || *got.Count < 0 {
			if len(got.Tokens) > 0 {
				// llama.cpp answers 200 {"tokens":[]} to vLLM's body.
				return 0, &shapeError{"/tokenize answered without a count (not vLLM's tokenizer)"}
			}
			return 0, &shapeError{"/tokenize answered 200 without a count"}
		}
		return *got.Count, nil
	case MethodLlamaCpp:
		text := p.Text
		if p.Messages != nil {
			raw, err := marshalBounded(llamaTemplate{Messages: p.Messages, Tools: p.Tools}, maxBody)
			if err != nil {
				return 0, err
			}
			var got struct {
				Prompt *string `json:"prompt"`
			}
			if err := post(ctx, b, "/apply-template", raw, &got); err != nil {
				return 0, err
			}
			if got.Prompt == nil {
				return 0, &shapeError{"/apply-template answered 200 without a prompt"}
			}
			text = *got.Prompt
		}
		raw, err := marshalBounded(llamaTokenize{Content: text, AddSpecial: true, ParseSpecial: true}, maxBody)
		if err != nil {
			return 0, err
		}
		var got struct {
			Tokens *[]json.RawMessage `json:"tokens"`
		}
		if err := post(ctx, b, "/tokenize", raw, &got); err != nil {
			return 0, err
		}
		if got.Tokens == nil {
			return 0, &shapeError{"/tokenize answered 200 without tokens"}
		}
		return len(*got.Tokens), nil
	}
	return 0, &shapeError{"no tokenizer method"}
}

// vllmChat is vLLM's POST /tokenize body for chat messages.
type vllmChat struct {
	Model               string               `json:"model"`
	Messages            []openai.ChatMessage `json:"messages"`
	Tools               []openai.Tool        `json:"tools,omitempty"`
	AddGenerationPrompt bool                 `json:"add_generation_prompt"`
}

// vllmPrompt is vLLM's POST /tokenize body for a completion prompt.
type vllmPrompt struct {
	Model  string `json:"model"`
	Prompt string `json:"prompt"`
}

// llamaTemplate is llama.cpp's POST /apply-template body.
type llamaTemplate struct {
	Messages []openai.ChatMessage `json:"messages"`
	Tools    []openai.Tool        `json:"tools,omitempty"`
}

// llamaTokenize is llama.cpp's POST /tokenize body. The chat endpoints
// tokenize the rendered prompt with special tokens added and parsed.
type llamaTokenize struct {
	Content      string `json:"content"`
	AddSpecial   bool   `json:"add_special"`
	ParseSpecial bool   `json:"parse_special"`
}

// errTooLarge is a tokenizer request beyond the caller's bound.
var errTooLarge = errors.New("the tokenizer request would be larger than the request it counts allows")

func marshalBounded(v any, maxBody int) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if maxBody > 0 && len(raw) > maxBody {
		return nil, errTooLarge
	}
	return raw, nil
}

// post sends one tokenizer request at the server root and decodes a 200
// answer into v. 404, 405, 422 and 501 (no such endpoint, another shape)
// and a 200 that is not JSON are shape errors; anything else is a failure
// of this once.
func post(ctx context.Context, b *provider.Backend, path string, body []byte, v any) error {
	status, raw, err := call(ctx, b, path, true, body, maxTokenizeAnswer)
	if err != nil {
		return err
	}
	switch status {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented, http.StatusUnprocessableEntity:
		return &shapeError{fmt.Sprintf("%s answered %d", path, status)}
	default:
		return fmt.Errorf("%s answered %d", path, status)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return &shapeError{path + " answered 200 with something that is not its JSON"}
	}
	return nil
}
