package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/sse"
)

// maxErrorBody bounds how much of an error response is read: enough for any
// error envelope, small enough that a misdirected download cannot hurt.
const maxErrorBody = 64 << 10

// maxAnswerBody bounds a non-streaming answer.
const maxAnswerBody = 32 << 20

// Client calls one OpenAI-compatible endpoint. It is safe for concurrent
// use; compare runs several chats on it at once.
type Client struct {
	baseURL string
	apiKey  string
	timeout time.Duration
	http    *http.Client
	log     *slog.Logger
	// mode is the request form the endpoint accepts (modeStreamUsage
	// until it refuses one); learned once, shared by concurrent calls.
	mode atomic.Int32
}

// NewClient returns a Client for cfg. The base URL must already be
// normalized (NormalizeBaseURL). A nil hc gets a client with a short
// connect time-out, so an unreachable host is reported in seconds rather
// than after the whole request time-out.
func NewClient(cfg Config, hc *http.Client, log *slog.Logger) *Client {
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		tr.MaxIdleConnsPerHost = 8 // compare runs up to four requests at once
		hc = &http.Client{Transport: tr}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{baseURL: cfg.BaseURL, apiKey: cfg.APIKey, timeout: timeout, http: hc, log: log}
}

// BaseURL returns the API root the client calls.
func (c *Client) BaseURL() string { return c.baseURL }

// ModelInfo is one model the endpoint serves.
type ModelInfo struct {
	ID          string `json:"id" jsonschema:"the model name to pass to chat and compare"`
	OwnedBy     string `json:"owned_by,omitempty" jsonschema:"who serves the model, as the endpoint reports it"`
	MaxModelLen int    `json:"max_model_len,omitempty" jsonschema:"context length in tokens, when the endpoint reports it (vLLM does)"`
}

// ListModels returns the models of GET /models.
func (c *Client) ListModels(ctx context.Context) ([]ModelInfo, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, c.baseURL+"/models", nil)
	if err != nil {
		return nil, apierror.New(http.StatusBadRequest, apierror.KindInvalidRequest, "bad_base_url", err.Error())
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(ctx, err, c.baseURL, "", c.timeout, 0)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, httpError(opListModels, resp.StatusCode, resp.Header, body, c.baseURL, "")
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBody))
	if err != nil {
		return nil, transportError(ctx, err, c.baseURL, "", c.timeout, 0)
	}
	var list openai.ModelList
	if err := json.Unmarshal(body, &list); err != nil || (list.Data == nil && !bytes.Contains(body, []byte(`"data"`))) {
		if ee, ok := parseEndpointError(body); ok {
			return nil, bodyError(opListModels, ee, c.baseURL, "")
		}
		return nil, notOpenAI(resp, body, c.baseURL)
	}
	out := make([]ModelInfo, 0, len(list.Data))
	for _, m := range list.Data {
		out = append(out, ModelInfo{ID: m.ID, OwnedBy: m.OwnedBy, MaxModelLen: m.MaxModelLen})
	}
	return out, nil
}

// notOpenAI explains a 200 answer that is not OpenAI JSON, typically a web
// page because the base URL points at a UI rather than the API.
func notOpenAI(resp *http.Response, body []byte, baseURL string) *apierror.Error {
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "no content type"
	}
	return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "not_openai",
		"%s answered 200 but not with OpenAI JSON (%s, %s): set %s to the API root, e.g. http://127.0.0.1:4000/v1",
		baseURL, ct, snippet(body), EnvBaseURL)
}

func (c *Client) authorize(req *http.Request) {
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	req.Header.Set("User-Agent", "llmgate-mcp")
}

// ChatParams is one chat request.
type ChatParams struct {
	Model       string
	System      string
	Prompt      string
	MaxTokens   int
	Temperature *float64
	// OnChunk, when set, is called from the reading goroutine with the
	// number of text chunks received so far, for progress reporting.
	OnChunk func(chunks int)
}

// ChatResult is an answer with the figures measured on the client side.
type ChatResult struct {
	Model            string
	Answer           string
	Reasoning        string
	FinishReason     string
	PromptTokens     int
	CompletionTokens int
	// TokensEstimated is true when the endpoint reported no usage and the
	// counts were estimated (completion: text chunks; prompt: characters/4).
	TokensEstimated bool
	// Streamed is false when the endpoint answered without streaming; TTFT
	// is then unknown.
	Streamed bool
	TTFT     time.Duration
	Latency  time.Duration
}

// TokensPerSecond is the generation speed: for a streamed answer the tokens
// after the first over the time after the first (1000/TPOT, as vLLM's
// benchmark defines it); otherwise completion tokens over total latency.
func (r *ChatResult) TokensPerSecond() float64 {
	if r.Streamed && r.CompletionTokens > 1 && r.Latency > r.TTFT {
		return float64(r.CompletionTokens-1) / (r.Latency - r.TTFT).Seconds()
	}
	if r.Latency > 0 {
		return float64(r.CompletionTokens) / r.Latency.Seconds()
	}
	return 0
}

// Request modes, from the most informative down. An endpoint that refuses
// one is asked in the next form from then on.
const (
	modeStreamUsage int32 = iota // stream with stream_options.include_usage
	modeStream                   // stream without stream_options
	modeWhole                    // no streaming; TTFT unknown
)

// Chat sends one chat completion. It streams with usage reporting to
// measure time to first token; when the endpoint rejects stream_options or
// streaming it retries in the simpler form and remembers that.
func (c *Client) Chat(ctx context.Context, p ChatParams) (*ChatResult, error) {
	for {
		mode := c.mode.Load()
		res, err := c.chat(ctx, p, mode)
		var ae *apierror.Error
		if err == nil || mode == modeWhole || !errors.As(err, &ae) {
			return res, err
		}
		next, ok := fallbackMode(ae)
		if !ok || next <= mode {
			return res, err
		}
		c.log.Info("endpoint refused a request form; falling back", "base_url", c.baseURL,
			"from", modeName(mode), "to", modeName(next), "error", ae.Message)
		c.mode.CompareAndSwap(mode, next)
	}
}

func modeName(m int32) string {
	return [...]string{"stream+usage", "stream", "non-streaming"}[m]
}

// fallbackMode reads a 400-class error that is about stream_options or
// stream, which some OpenAI-compatible servers reject, and says which
// request form to try next.
func fallbackMode(e *apierror.Error) (int32, bool) {
	if e.Status != http.StatusBadRequest && e.Status != http.StatusUnprocessableEntity && e.Status != http.StatusNotImplemented {
		return 0, false
	}
	m := strings.ToLower(e.Message)
	switch {
	case strings.Contains(m, "stream_options") || strings.Contains(m, "include_usage"):
		return modeStream, true
	case strings.Contains(m, "stream"):
		return modeWhole, true
	}
	return 0, false
}

func (c *Client) chat(ctx context.Context, p ChatParams, mode int32) (*ChatResult, error) {
	stream := mode != modeWhole
	body, err := json.Marshal(buildRequest(p, mode))
	if err != nil {
		return nil, fmt.Errorf("encode chat request: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.baseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, apierror.New(http.StatusBadRequest, apierror.KindInvalidRequest, "bad_base_url", err.Error())
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(ctx, err, c.baseURL, p.Model, c.timeout, 0)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, httpError(opChat, resp.StatusCode, resp.Header, raw, c.baseURL, p.Model)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		return c.readStream(ctx, resp.Body, p, start)
	}
	// Some servers ignore "stream": true and answer with one JSON body.
	return c.readWhole(ctx, resp, p, start)
}

func buildRequest(p ChatParams, mode int32) *openai.ChatCompletionRequest {
	msgs := make([]openai.ChatMessage, 0, 2)
	if p.System != "" {
		msgs = append(msgs, openai.ChatMessage{Role: "system", Content: openai.TextContent(p.System)})
	}
	msgs = append(msgs, openai.ChatMessage{Role: "user", Content: openai.TextContent(p.Prompt)})
	r := &openai.ChatCompletionRequest{Model: p.Model, Messages: msgs, Temperature: p.Temperature}
	if p.MaxTokens > 0 {
		mt := p.MaxTokens
		r.MaxTokens = &mt
	}
	if mode != modeWhole {
		r.Stream = true
	}
	if mode == modeStreamUsage {
		r.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	return r
}

// streamChunk decodes only what the tools read from a chat chunk. It is
// its own type because engines disagree on the reasoning field: DeepSeek,
// SGLang and older vLLM send delta.reasoning_content, newer vLLM and
// OpenRouter send delta.reasoning.
type streamChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          *string           `json:"content"`
			ReasoningContent *string           `json:"reasoning_content"`
			Reasoning        *string           `json:"reasoning"`
			ToolCalls        []json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

func (c *Client) readStream(ctx context.Context, body io.Reader, p ChatParams, start time.Time) (*ChatResult, error) {
	res := &ChatResult{Model: p.Model, Streamed: true}
	var answer, reasoning strings.Builder
	var usage *openai.Usage
	textChunks := 0
	done := false
	r := sse.NewReader(body, 0)
	for {
		ev, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, transportError(ctx, err, c.baseURL, p.Model, c.timeout, answer.Len()+reasoning.Len())
		}
		// Timestamp at the byte read, before JSON parsing.
		now := time.Now()
		if ev.Done() {
			done = true
			res.Latency = now.Sub(start)
			break
		}
		if ev.Name == "error" || bytes.Contains(ev.Data, []byte(`"error"`)) {
			if ee, ok := parseEndpointError(ev.Data); ok {
				return nil, bodyError(opChat, ee, c.baseURL, p.Model)
			}
		}
		var ch streamChunk
		if err := json.Unmarshal(ev.Data, &ch); err != nil {
			return nil, apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_stream",
				"the stream from %s carried an event that is not a chat chunk (%s): check that the endpoint speaks the OpenAI chat API",
				c.baseURL, snippet(ev.Data)).Wrap(err)
		}
		res.Latency = now.Sub(start)
		if ch.Usage != nil {
			usage = ch.Usage
		}
		if ch.Model != "" {
			res.Model = ch.Model
		}
		for _, choice := range ch.Choices {
			if choice.Index != 0 {
				continue
			}
			d := choice.Delta
			gotText := false
			if d.Content != nil && *d.Content != "" {
				answer.WriteString(*d.Content)
				gotText = true
			}
			for _, r := range []*string{d.ReasoningContent, d.Reasoning} {
				if r != nil && *r != "" {
					reasoning.WriteString(*r)
					gotText = true
				}
			}
			if gotText || len(d.ToolCalls) > 0 {
				textChunks++
				if res.TTFT == 0 {
					res.TTFT = now.Sub(start)
				}
				if p.OnChunk != nil {
					p.OnChunk(textChunks)
				}
			}
			if choice.FinishReason != nil && *choice.FinishReason != "" {
				res.FinishReason = *choice.FinishReason
			}
		}
	}
	res.Answer, res.Reasoning = answer.String(), reasoning.String()
	if !done && res.FinishReason == "" {
		return nil, transportError(ctx, errStreamCut, c.baseURL, p.Model, c.timeout, answer.Len()+reasoning.Len())
	}
	if usage != nil {
		res.PromptTokens, res.CompletionTokens = usage.PromptTokens, usage.CompletionTokens
	} else {
		// Engines that ignore include_usage: most send one token per chunk.
		res.TokensEstimated = true
		res.CompletionTokens = textChunks
		res.PromptTokens = (len(p.System) + len(p.Prompt) + 3) / 4
	}
	return res, nil
}

func (c *Client) readWhole(ctx context.Context, resp *http.Response, p ChatParams, start time.Time) (*ChatResult, error) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBody))
	if err != nil {
		return nil, transportError(ctx, err, c.baseURL, p.Model, c.timeout, 0)
	}
	latency := time.Since(start)
	var cc struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content          openai.Content `json:"content"`
				ReasoningContent string         `json:"reasoning_content"`
				Reasoning        string         `json:"reasoning"`
			} `json:"message"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *openai.Usage   `json:"usage"`
		Error json.RawMessage `json:"error,omitempty"`
	}
	if err := json.Unmarshal(raw, &cc); err != nil {
		return nil, notOpenAI(resp, raw, c.baseURL)
	}
	if len(cc.Error) > 0 && string(cc.Error) != "null" {
		if ee, ok := parseEndpointError(raw); ok {
			return nil, bodyError(opChat, ee, c.baseURL, p.Model)
		}
	}
	if len(cc.Choices) == 0 {
		return nil, apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "no_choices",
			"model %q answered with no choices (%s): check the endpoint's log; the model may have failed to generate", p.Model, snippet(raw))
	}
	res := &ChatResult{Model: p.Model, Latency: latency}
	if cc.Model != "" {
		res.Model = cc.Model
	}
	msg := cc.Choices[0].Message
	res.Answer, res.Reasoning = msg.Content.String(), msg.ReasoningContent+msg.Reasoning
	if fr := cc.Choices[0].FinishReason; fr != nil {
		res.FinishReason = *fr
	}
	if cc.Usage != nil {
		res.PromptTokens, res.CompletionTokens = cc.Usage.PromptTokens, cc.Usage.CompletionTokens
	} else {
		res.TokensEstimated = true
		res.PromptTokens = (len(p.System) + len(p.Prompt) + 3) / 4
		res.CompletionTokens = (len(res.Answer) + len(res.Reasoning) + 3) / 4
	}
	return res, nil
}
