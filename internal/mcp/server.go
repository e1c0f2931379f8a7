// Package mcpserver serves the models behind an OpenAI-compatible endpoint as
// Model Context Protocol tools (list_models, chat, compare), so that MCP
// clients such as Cline can ask another model for a second opinion, a
// translation or a side-by-side comparison. "llmgate mcp" runs it over stdio.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Limits of the compare tool: two models make a comparison; more than four
// overloads a single local engine and the agent's context alike.
const (
	minCompare = 2
	maxCompare = 4
)

// toolServer holds the tools' state: the endpoint client and the default model.
type toolServer struct {
	client       *Client
	defaultModel string
	log          *slog.Logger
	// progressEvery is the least time between two progress notifications
	// of one tool call.
	progressEvery time.Duration
}

// New validates cfg (normalizing its base URL) and returns the MCP server
// with the list_models, chat and compare tools registered. version is
// reported to clients in the initialize handshake. log receives one line
// per tool call; sdkLog receives the SDK's own session messages. Either may
// be nil.
func New(cfg Config, version string, log, sdkLog *slog.Logger) (*mcp.Server, error) {
	s, err := newServer(cfg, log)
	if err != nil {
		return nil, err
	}
	if sdkLog == nil {
		sdkLog = s.log
	}
	return s.build(version, sdkLog)
}

func newServer(cfg Config, log *slog.Logger) (*toolServer, error) {
	base, err := NormalizeBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	cfg.BaseURL = base
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &toolServer{client: NewClient(cfg, nil, log), defaultModel: cfg.Model, log: log, progressEvery: time.Second}, nil
}

func (s *toolServer) build(version string, sdkLog *slog.Logger) (*mcp.Server, error) {
	if version == "" {
		version = "dev"
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "llmgate", Title: "llmgate models", Version: version},
		&mcp.ServerOptions{Instructions: s.instructions(), Logger: sdkLog})

	chatIn, err := jsonschema.For[ChatInput](nil)
	if err != nil {
		return nil, fmt.Errorf("chat input schema: %w", err)
	}
	if !s.hasDefault() {
		chatIn.Required = append(chatIn.Required, "model")
	}
	limitChatSchema(chatIn)
	cmpIn, err := jsonschema.For[CompareInput](nil)
	if err != nil {
		return nil, fmt.Errorf("compare input schema: %w", err)
	}
	limitChatSchema(cmpIn)
	if m := cmpIn.Properties["models"]; m != nil {
		m.Type, m.Types = "array", nil // a nil slice is never a valid list of models
		m.MinItems, m.MaxItems = jsonschema.Ptr(minCompare), jsonschema.Ptr(maxCompare)
	}

	// chat and compare change nothing, but they cost tokens and are not
	// idempotent (sampling), so they are not marked idempotent.
	annotate := func(title string, idempotent bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, IdempotentHint: idempotent,
			DestructiveHint: jsonschema.Ptr(false), OpenWorldHint: jsonschema.Ptr(true)}
	}

	mcp.AddTool(srv, &mcp.Tool{
		Name:        "list_models",
		Title:       "List models",
		Description: "List the models the endpoint serves (" + s.client.BaseURL() + "). Use the ids as the model argument of chat and compare.",
		Annotations: annotate("List models", true),
	}, guard(s, "list_models", s.listModels))
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "chat",
		Title: "Ask a model",
		Description: "Send one prompt (with an optional system message) to a model behind the endpoint and return its answer, " +
			"with prompt and completion tokens, time to first token (ms) and generation speed (tokens/s). " +
			"Use it for a second opinion, a translation or a task for a cheaper or stronger model. " + s.modelHint(),
		InputSchema: chatIn,
		Annotations: annotate("Ask a model", false),
	}, guard(s, "chat", s.chat))
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "compare",
		Title: "Compare models",
		Description: "Send the same prompt to 2-4 models at once and return their answers side by side with each one's tokens, " +
			"time to first token, latency and tokens/s. The requests run concurrently, so models served by the same engine " +
			"slow each other down; compare speeds with that in mind. A model that fails is reported in its row; the others still answer.",
		InputSchema: cmpIn,
		Annotations: annotate("Compare models", false),
	}, guard(s, "compare", s.compare))
	return srv, nil
}

// limitChatSchema adds the numeric bounds the struct tags cannot express.
func limitChatSchema(in *jsonschema.Schema) {
	if p := in.Properties["max_tokens"]; p != nil {
		p.Minimum = jsonschema.Ptr(1.0)
	}
	if p := in.Properties["temperature"]; p != nil {
		p.Minimum, p.Maximum = jsonschema.Ptr(0.0), jsonschema.Ptr(2.0)
	}
	if p := in.Properties["prompt"]; p != nil {
		p.MinLength = jsonschema.Ptr(1)
	}
}

func (s *toolServer) hasDefault() bool { return s.defaultModel != "" }

func (s *toolServer) modelHint() string {
	if s.hasDefault() {
		return fmt.Sprintf("model is optional: it defaults to %q.", s.defaultModel)
	}
	return "Call list_models first to learn the model names."
}

func (s *toolServer) instructions() string {
	return "These tools reach the language models served at " + s.client.BaseURL() +
		". list_models shows their names; chat asks one model; compare asks 2-4 models the same prompt and shows " +
		"their answers and speeds side by side. Errors say which setting to fix (LLMGATE_BASE_URL, LLMGATE_API_KEY, LLMGATE_MODEL)."
}

// ListModelsInput takes no arguments.
type ListModelsInput struct{}

// ListModelsOutput is the structured result of list_models.
type ListModelsOutput struct {
	BaseURL      string      `json:"base_url" jsonschema:"the API root that was asked"`
	DefaultModel string      `json:"default_model,omitempty" jsonschema:"the model chat uses when none is given"`
	Models       []ModelInfo `json:"models" jsonschema:"the models the endpoint serves"`
}

func (s *toolServer) listModels(ctx context.Context, _ *mcp.CallToolRequest, _ ListModelsInput) (*mcp.CallToolResult, ListModelsOutput, error) {
	start := time.Now()
	models, err := s.client.ListModels(ctx)
	if err != nil {
		return fail[ListModelsOutput](s, "list_models", "", start, err)
	}
	out := ListModelsOutput{BaseURL: s.client.BaseURL(), DefaultModel: s.defaultModel, Models: models}
	s.log.Info("tool call", "tool", "list_models", "models", len(models), "ms", time.Since(start).Milliseconds())
	return textResult(formatModels(out)), out, nil
}

// ChatInput is the arguments of chat.
type ChatInput struct {
	Model       string   `json:"model,omitempty" jsonschema:"the model to ask, as list_models names it"`
	Prompt      string   `json:"prompt" jsonschema:"the user message to send"`
	System      string   `json:"system,omitempty" jsonschema:"an optional system message"`
	MaxTokens   int      `json:"max_tokens,omitempty" jsonschema:"the most tokens to generate; the endpoint's default when omitted"`
	Temperature *float64 `json:"temperature,omitempty" jsonschema:"sampling temperature from 0 to 2; the endpoint's default when omitted"`
}

// Answer is one model's answer with the figures measured for it.
type Answer struct {
	Model            string   `json:"model" jsonschema:"the model that answered"`
	Answer           string   `json:"answer" jsonschema:"the answer text"`
	Reasoning        string   `json:"reasoning,omitempty" jsonschema:"reasoning text, for models that return it separately"`
	FinishReason     string   `json:"finish_reason,omitempty" jsonschema:"why generation stopped: stop, length (max_tokens reached), ..."`
	PromptTokens     int      `json:"prompt_tokens" jsonschema:"tokens in the prompt"`
	CompletionTokens int      `json:"completion_tokens" jsonschema:"tokens generated"`
	TokensEstimated  bool     `json:"tokens_estimated,omitempty" jsonschema:"true when the endpoint reported no usage and the counts are estimates"`
	TTFTms           *float64 `json:"ttft_ms,omitempty" jsonschema:"time to first token in milliseconds; absent when the endpoint did not stream"`
	LatencyMs        float64  `json:"latency_ms" jsonschema:"time from sending the request to the last byte of the answer, in milliseconds"`
	TokensPerSecond  float64  `json:"tokens_per_second" jsonschema:"generation speed: tokens after the first per second after the first token (whole answer over latency when not streamed)"`
	Error            string   `json:"error,omitempty" jsonschema:"why this model gave no answer (compare only)"`
}

func answerFrom(r *ChatResult) Answer {
	a := Answer{
		Model: r.Model, Answer: r.Answer, Reasoning: r.Reasoning, FinishReason: r.FinishReason,
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, TokensEstimated: r.TokensEstimated,
		LatencyMs: ms(r.Latency), TokensPerSecond: round1(r.TokensPerSecond()),
	}
	if r.Streamed && r.TTFT > 0 {
		t := ms(r.TTFT)
		a.TTFTms = &t
	}
	return a
}

func ms(d time.Duration) float64 { return round1(float64(d) / float64(time.Millisecond)) }

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func (s *toolServer) chat(ctx context.Context, req *mcp.CallToolRequest, in ChatInput) (*mcp.CallToolResult, Answer, error) {
	start := time.Now()
	model, err := s.resolveModel(ctx, in.Model)
	if err != nil {
		return fail[Answer](s, "chat", in.Model, start, err)
	}
	if strings.TrimSpace(in.Prompt) == "" {
		return fail[Answer](s, "chat", model, start, errors.New("the prompt is empty: pass the question or task in \"prompt\""))
	}
	prog := s.newProgress(ctx, req, 1)
	res, err := s.client.Chat(ctx, ChatParams{Model: model, System: in.System, Prompt: in.Prompt, MaxTokens: in.MaxTokens,
		Temperature: in.Temperature, OnChunk: prog.update(0, model)})
	if err != nil {
		return fail[Answer](s, "chat", model, start, err)
	}
	a := answerFrom(res)
	s.log.Info("tool call", "tool", "chat", "model", model, "completion_tokens", a.CompletionTokens, "ms", time.Since(start).Milliseconds())
	return textResult(formatAnswer(a)), a, nil
}

// resolveModel picks the model for a chat: the argument, else the default.
// Without either the error lists the endpoint's models, so the agent can
// retry with a valid name at once.
func (s *toolServer) resolveModel(ctx context.Context, model string) (string, error) {
	if m := strings.TrimSpace(model); m != "" {
		return m, nil
	}
	if s.hasDefault() {
		return s.defaultModel, nil
	}
	models, err := s.client.ListModels(ctx)
	names := ""
	if err == nil && len(models) > 0 {
		ids := make([]string, 0, len(models))
		for _, m := range models {
			ids = append(ids, m.ID)
		}
		names = " (available: " + strings.Join(ids, ", ") + ")"
	}
	return "", fmt.Errorf("no model given: pass \"model\"%s, or set %s (or --model) to a default", names, EnvModel)
}

// CompareInput is the arguments of compare.
type CompareInput struct {
	Models      []string `json:"models" jsonschema:"2 to 4 model names, as list_models names them"`
	Prompt      string   `json:"prompt" jsonschema:"the user message every model receives"`
	System      string   `json:"system,omitempty" jsonschema:"an optional system message for every model"`
	MaxTokens   int      `json:"max_tokens,omitempty" jsonschema:"the most tokens each model may generate; the endpoint's default when omitted"`
	Temperature *float64 `json:"temperature,omitempty" jsonschema:"sampling temperature from 0 to 2; the endpoint's default when omitted"`
}

// CompareOutput is the structured result of compare.
type CompareOutput struct {
	Results []Answer `json:"results" jsonschema:"one entry per model, in the order asked"`
}

func (s *toolServer) compare(ctx context.Context, req *mcp.CallToolRequest, in CompareInput) (*mcp.CallToolResult, CompareOutput, error) {
	start := time.Now()
	models := make([]string, 0, len(in.Models))
	for _, m := range in.Models {
		if m = strings.TrimSpace(m); m != "" {
			models = append(models, m)
		}
	}
	label := strings.Join(models, ",")
	if len(models) < minCompare || len(models) > maxCompare {
		return fail[CompareOutput](s, "compare", label, start, fmt.Errorf("compare needs %d to %d model names in \"models\", got %d: use chat for one model", minCompare, maxCompare, len(models)))
	}
	if strings.TrimSpace(in.Prompt) == "" {
		return fail[CompareOutput](s, "compare", label, start, errors.New("the prompt is empty: pass the question or task in \"prompt\""))
	}
	out := CompareOutput{Results: make([]Answer, len(models))}
	prog := s.newProgress(ctx, req, len(models))
	var wg sync.WaitGroup
	for i, m := range models {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					s.log.Error("compare: panic", "model", m, "panic", r, "stack", string(debug.Stack()))
					out.Results[i] = Answer{Model: m, Error: internalError("compare")}
				}
			}()
			res, err := s.client.Chat(ctx, ChatParams{Model: m, System: in.System, Prompt: in.Prompt, MaxTokens: in.MaxTokens,
				Temperature: in.Temperature, OnChunk: prog.update(i, m)})
			if err != nil {
				s.log.Warn("compare: model failed", "model", m, "error", err)
				out.Results[i] = Answer{Model: m, Error: toolMessage(err)}
				return
			}
			out.Results[i] = answerFrom(res)
		})
	}
	wg.Wait()
	failed := 0
	for _, r := range out.Results {
		if r.Error != "" {
			failed++
		}
	}
	if ctx.Err() != nil {
		return fail[CompareOutput](s, "compare", label, start, errors.New("the request was cancelled by the MCP client"))
	}
	if failed == len(models) {
		// Nothing to compare: a tool error, so the agent does not mistake it for answers.
		msgs := make([]string, 0, len(models))
		for _, r := range out.Results {
			msgs = append(msgs, fmt.Sprintf("%s: %s", r.Model, r.Error))
		}
		return fail[CompareOutput](s, "compare", label, start, errors.New("every model failed:\n"+strings.Join(msgs, "\n")))
	}
	s.log.Info("tool call", "tool", "compare", "models", label, "failed", failed, "ms", time.Since(start).Milliseconds())
	return textResult(formatCompare(out)), out, nil
}

// guard turns a panic in a tool handler into a tool error: the SDK does
// not recover panics, and one bad response must not take the server (and
// every tool with it) down for the rest of the editor session.
func guard[In, Out any](s *toolServer, tool string, h mcp.ToolHandlerFor[In, Out]) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (res *mcp.CallToolResult, out Out, err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("tool panicked", "tool", tool, "panic", r, "stack", string(debug.Stack()))
				var zero Out
				res, out, err = nil, zero, errors.New(internalError(tool))
			}
		}()
		return h(ctx, req, in)
	}
}

func internalError(tool string) string {
	return "internal error in llmgate mcp while running " + tool + "; its log (stderr) has the details, please report it"
}

// fail logs a failed tool call with its internal cause and returns the
// client-facing message as a tool error (IsError), never a protocol error.
func fail[Out any](s *toolServer, tool, model string, start time.Time, err error) (*mcp.CallToolResult, Out, error) {
	var zero Out
	s.log.Warn("tool call failed", "tool", tool, "model", model, "ms", time.Since(start).Milliseconds(), "error", err)
	return nil, zero, errors.New(toolMessage(err))
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// progress sends MCP progress notifications while answers stream in, when
// the client asked for them with a progress token. Clients that reset their
// request time-out on progress then wait for long generations instead of
// giving up. Notifications are throttled to one per progressEvery.
type progress struct {
	s      *toolServer
	ctx    context.Context
	req    *mcp.CallToolRequest
	token  any
	mu     sync.Mutex
	chunks []int
	last   time.Time
}

func (s *toolServer) newProgress(ctx context.Context, req *mcp.CallToolRequest, models int) *progress {
	p := &progress{s: s, ctx: ctx, req: req, chunks: make([]int, models)}
	if req != nil && req.Params != nil && req.Session != nil {
		p.token = req.Params.GetProgressToken()
	}
	return p
}

// update returns the OnChunk callback of the i-th model, or nil when the
// client wants no progress.
func (p *progress) update(i int, model string) func(int) {
	if p.token == nil {
		return nil
	}
	return func(n int) {
		// The lock is held while sending so that progress never goes
		// backwards between the streams of a compare.
		p.mu.Lock()
		defer p.mu.Unlock()
		p.chunks[i] = n
		now := time.Now()
		if now.Sub(p.last) < p.s.progressEvery {
			return
		}
		p.last = now
		total := 0
		for _, c := range p.chunks {
			total += c
		}
		msg := fmt.Sprintf("%s: %d tokens so far", model, n)
		if len(p.chunks) > 1 {
			msg = fmt.Sprintf("%d tokens so far across %d models", total, len(p.chunks))
		}
		err := p.req.Session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{
			ProgressToken: p.token, Progress: float64(total), Message: msg})
		if err != nil {
			p.s.log.Debug("progress notification failed", "error", err)
		}
	}
}
