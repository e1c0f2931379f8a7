package translate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
)

// DefaultAnthropicMaxTokens is the max_tokens sent to an anthropic backend
// when the chat request sets neither max_tokens nor max_completion_tokens:
// Anthropic requires the field, chat does not.
const DefaultAnthropicMaxTokens = 4096

// reasoningBudgets maps reasoning_effort to a thinking budget.
var reasoningBudgets = map[string]int{"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768}

// ChatToAnthropicRequest converts an OpenAI chat request into an Anthropic
// Messages request for an anthropic-dialect backend.
//
// system and developer messages (wherever they appear) join the top-level
// system prompt, in order (as text blocks when a part carries an Anthropic
// cache_control marker, which is kept there and on user, assistant and tool
// content); consecutive messages of the same role are merged because
// tool results must sit in the user turn right after the tool calls; tool
// messages become tool_result blocks; data: URI images become base64 image
// sources and http(s) URLs url sources; assistant reasoning_content is
// dropped (Anthropic rejects thinking blocks without its signature);
// temperature is clamped to Anthropic's 0..1 and wins over top_p (recent
// Claude models reject both at once); n > 1 and response_format
// other than text are rejected with a 400; reasoning_effort enables
// thinking with a budget (minimal 1024, low 2048, medium 8192, high 24576,
// xhigh 32768 tokens) and raises max_tokens above the budget; "none"
// disables thinking.
func ChatToAnthropicRequest(req *openai.ChatCompletionRequest) (*anthropic.MessagesRequest, error) {
	if req.N != nil && *req.N > 1 {
		return nil, badRequest("n", "n > 1 is not supported for models on an anthropic backend; send n separate requests")
	}
	if len(req.ResponseFormat) > 0 {
		var rf struct{ Type string }
		_ = json.Unmarshal(req.ResponseFormat, &rf)
		if rf.Type != "" && rf.Type != "text" {
			return nil, badRequest("response_format", "response_format %q is not supported for models on an anthropic backend; describe the format in the prompt or use a tool", rf.Type)
		}
	}
	out := &anthropic.MessagesRequest{
		Model:         req.Model,
		MaxTokens:     DefaultAnthropicMaxTokens,
		TopP:          req.TopP,
		StopSequences: req.Stop,
		Stream:        req.Stream,
	}
	switch {
	case req.MaxCompletionTokens != nil:
		out.MaxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		out.MaxTokens = *req.MaxTokens
	}
	if out.MaxTokens <= 0 {
		return nil, badRequest("max_tokens", "max_tokens must be a positive integer")
	}
	if req.Temperature != nil {
		out.Temperature = ptr(min(max(*req.Temperature, 0), 1))
		// Recent Claude models reject requests that set both.
		out.TopP = nil
	}
	if req.User != "" {
		out.Metadata = &anthropic.Metadata{UserID: req.User}
	}
	if budget, ok := reasoningBudgets[req.ReasoningEffort]; ok {
		out.Thinking = &anthropic.ThinkingConfig{Type: "enabled", BudgetTokens: budget}
		out.MaxTokens += budget
		// Anthropic rejects sampling parameters while thinking is enabled.
		out.Temperature, out.TopP = nil, nil
	} else if req.ReasoningEffort == "none" {
		out.Thinking = &anthropic.ThinkingConfig{Type: "disabled"}
	}

	var system []anthropic.ContentBlock
	conv := turns{chat: req.Messages}
	for i := range req.Messages {
		m := &req.Messages[i]
		switch m.Role {
		case "system", "developer":
			system = append(system, systemBlocks(m.Content)...)
		case "user":
			if err := chatUserBlocks(&conv, m.Content, i); err != nil {
				return nil, err
			}
		case "assistant":
			if err := chatAssistantBlocks(&conv, m, i); err != nil {
				return nil, err
			}
		case "tool":
			if m.ToolCallID == "" {
				path := msgPath(i)
				return nil, badRequest(path+".tool_call_id", "%s.tool_call_id is required for tool messages", path)
			}
			conv.add("user", i, anthropic.ContentBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: ptr(anthropic.TextContent(m.Content.String())),
				CacheControl: partsCacheControl(m.Content)})
		default:
			path := msgPath(i)
			return nil, badRequest(path+".role", "%s.role %q is not one of system, developer, user, assistant, tool", path, m.Role)
		}
	}
	out.Messages = conv.end()
	if len(out.Messages) == 0 {
		return nil, badRequest("messages", "messages must contain at least one user or assistant message")
	}
	out.System = systemPrompt(system)

	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d] must be a function tool with a name", i)
		}
		schema := t.Function.Parameters
		if len(schema) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, anthropic.Tool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema})
	}
	tc, err := anthropicToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls && len(out.Tools) > 0 {
		if tc == nil {
			tc = &anthropic.ToolChoice{Type: "auto"}
		}
		if tc.Type != "none" {
			tc.DisableParallelToolUse = ptr(true)
		}
	}
	out.ToolChoice = tc
	return out, nil
}

// systemBlocks returns the text blocks of a system or developer message.
func systemBlocks(c openai.Content) []anthropic.ContentBlock {
	if c.Text != nil {
		return []anthropic.ContentBlock{{Type: "text", Text: *c.Text}}
	}
	var out []anthropic.ContentBlock
	for _, p := range c.Parts {
		if p.Type == "text" {
			out = append(out, anthropic.ContentBlock{Type: "text", Text: p.Text, CacheControl: p.CacheControl})
		}
	}
	return out
}

// systemPrompt joins system blocks into one string, or keeps them as blocks
// when one carries a cache_control marker. Empty text is left out: Anthropic
// rejects empty text blocks.
func systemPrompt(blocks []anthropic.ContentBlock) anthropic.SystemPrompt {
	blocks = slices.DeleteFunc(blocks, func(b anthropic.ContentBlock) bool { return b.Text == "" })
	if len(blocks) == 0 {
		return anthropic.SystemPrompt{}
	}
	if slices.ContainsFunc(blocks, func(b anthropic.ContentBlock) bool { return len(b.CacheControl) > 0 }) {
		return anthropic.SystemPrompt{Blocks: blocks}
	}
	texts := make([]string, len(blocks))
	for i, b := range blocks {
		texts[i] = b.Text
	}
	return anthropic.TextContent(strings.Join(texts, "\n\n"))
}

// partsCacheControl returns the cache_control marker of the last part that
// carries one, for content that becomes a single Anthropic block.
func partsCacheControl(c openai.Content) json.RawMessage {
	var cc json.RawMessage
	for _, p := range c.Parts {
		if len(p.CacheControl) > 0 {
			cc = p.CacheControl
		}
	}
	return cc
}

// turns builds the Anthropic conversation from chat messages: consecutive
// messages of one role merge into one turn (tool results must sit in the
// user turn right after the tool calls; system messages go to the system
// prompt and do not end a turn), and a user turn's tool results come
// first, in order, then its other blocks (Anthropic wants them first).
//
// A turn is sized when it opens, from the messages it will hold, and its
// blocks fill one array: the tool results from the front, the others from
// the back half. Building a conversation is linear in its messages, with
// one allocation per turn, however they alternate (re-sorting the whole
// turn at each tool message was quadratic: 8,000 tool results, a 1 MB
// body, took 28 s of CPU).
type turns struct {
	chat          []openai.ChatMessage
	msgs          []anthropic.MessageParam
	role          string
	all           []anthropic.ContentBlock // the open turn's array
	results, rest []anthropic.ContentBlock // its front and back
}

// turnRole is the Anthropic turn a chat message of role goes to ("" for
// system messages, which go to the system prompt).
func turnRole(role string) string {
	switch role {
	case "user", "tool":
		return "user"
	case "assistant":
		return "assistant"
	}
	return ""
}

// add appends the blocks of chat message i to the turn of role, ending the
// turn before it when the role changes. A message without blocks (empty
// text) neither opens nor ends a turn.
func (t *turns) add(role string, i int, blocks ...anthropic.ContentBlock) {
	if len(blocks) == 0 {
		return
	}
	if role != t.role {
		t.close()
		t.open(role, i)
	}
	for k := range blocks {
		if role == "user" && blocks[k].Type == "tool_result" {
			t.results = append(t.results, blocks[k])
		} else {
			t.rest = append(t.rest, blocks[k])
		}
	}
}

// open starts a turn of role at chat message i, sized for the blocks of
// the messages up to the next one of another turn (at most: empty text is
// left out).
func (t *turns) open(role string, i int) {
	results, rest := 0, 0
	for _, m := range t.chat[i:] {
		r := turnRole(m.Role)
		if r == "" {
			continue
		}
		if r != role {
			break
		}
		switch {
		case m.Role == "tool":
			results++
		case m.Role == "assistant":
			rest += 1 + len(m.ToolCalls)
		case m.Content.Text != nil:
			rest++
		default:
			rest += len(m.Content.Parts)
		}
	}
	t.all = make([]anthropic.ContentBlock, results+rest)
	t.role, t.results, t.rest = role, t.all[:0:results], t.all[results:results]
}

func (t *turns) close() {
	if t.role == "" {
		return
	}
	blocks, n := t.rest, len(t.results)
	switch {
	case n == 0:
	case len(t.rest) == 0:
		blocks = t.results
	case n == cap(t.results) && n < len(t.all) && &t.all[n] == &t.rest[0]:
		// The results filled the front exactly and the rest follows them
		// in the same array.
		blocks = t.all[:n+len(t.rest)]
	default:
		// The turn outgrew its size: a message that adds nothing (an
		// empty assistant message) did not end it where open stopped
		// counting, so more results or blocks came than it made room for.
		blocks = append(append(make([]anthropic.ContentBlock, 0, n+len(t.rest)), t.results...), t.rest...)
	}
	t.msgs = append(t.msgs, anthropic.MessageParam{Role: t.role, Content: anthropic.Content{Blocks: blocks}})
	t.role, t.all, t.results, t.rest = "", nil, nil, nil
}

// end closes the last turn and returns the conversation.
func (t *turns) end() []anthropic.MessageParam {
	t.close()
	return t.msgs
}

// msgPath is the parameter path of messages[i], for error messages (built
// only when one is).
func msgPath(i int) string { return fmt.Sprintf("messages[%d]", i) }

// chatUserBlocks adds the blocks of user message messages[i] to conv.
func chatUserBlocks(conv *turns, c openai.Content, i int) error {
	// Anthropic rejects empty text blocks, so empty text is left out.
	if c.Text != nil {
		if *c.Text != "" {
			conv.add("user", i, anthropic.ContentBlock{Type: "text", Text: *c.Text})
		}
		return nil
	}
	for j := range c.Parts {
		p := &c.Parts[j]
		switch p.Type {
		case "text":
			if p.Text != "" {
				conv.add("user", i, anthropic.ContentBlock{Type: "text", Text: p.Text, CacheControl: p.CacheControl})
			}
		case "image_url":
			pp := fmt.Sprintf("%s.content[%d]", msgPath(i), j)
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return badRequest(pp+".image_url.url", "%s.image_url.url is required", pp)
			}
			src, err := anthropicImageSource(p.ImageURL.URL, pp)
			if err != nil {
				return err
			}
			conv.add("user", i, anthropic.ContentBlock{Type: "image", Source: src, CacheControl: p.CacheControl})
		default:
			pp := fmt.Sprintf("%s.content[%d]", msgPath(i), j)
			return badRequest(pp+".type", "%s: content part type %q is not supported for models on an anthropic backend", pp, p.Type)
		}
	}
	return nil
}

// anthropicImageSource parses a data: URI or takes an http(s) URL.
func anthropicImageSource(u, path string) (*anthropic.ImageSource, error) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		mediaType, isB64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isB64 || mediaType == "" {
			return nil, badRequest(path+".image_url.url", "%s: data URIs must look like data:image/png;base64,<data>", path)
		}
		return &anthropic.ImageSource{Type: "base64", MediaType: mediaType, Data: data}, nil
	}
	if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
		return &anthropic.ImageSource{Type: "url", URL: u}, nil
	}
	return nil, badRequest(path+".image_url.url", "%s: image URLs must be http(s) URLs or base64 data URIs", path)
}

// chatAssistantBlocks adds the blocks of assistant message messages[i]
// (its text, then its tool calls) to conv.
func chatAssistantBlocks(conv *turns, m *openai.ChatMessage, i int) error {
	if text := m.Content.String(); text != "" {
		conv.add("assistant", i, anthropic.ContentBlock{Type: "text", Text: text, CacheControl: partsCacheControl(m.Content)})
	}
	for k := range m.ToolCalls {
		tc := &m.ToolCalls[k]
		if tc.ID == "" || tc.Function.Name == "" {
			tp := fmt.Sprintf("%s.tool_calls[%d]", msgPath(i), k)
			return badRequest(tp, "%s needs an id and a function name", tp)
		}
		input := json.RawMessage(`{}`)
		if strings.TrimSpace(tc.Function.Arguments) != "" {
			if !validJSONObject(tc.Function.Arguments) {
				tp := fmt.Sprintf("%s.tool_calls[%d]", msgPath(i), k)
				return badRequest(tp+".function.arguments", "%s.function.arguments must be a JSON object", tp)
			}
			input = json.RawMessage(compactJSON([]byte(tc.Function.Arguments)))
		}
		conv.add("assistant", i, anthropic.ContentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: input})
	}
	return nil
}

func anthropicToolChoice(raw json.RawMessage) (*anthropic.ToolChoice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto":
			return &anthropic.ToolChoice{Type: "auto"}, nil
		case "none":
			return &anthropic.ToolChoice{Type: "none"}, nil
		case "required":
			return &anthropic.ToolChoice{Type: "any"}, nil
		}
		return nil, badRequest("tool_choice", "tool_choice %q is not one of auto, none, required", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Type != "function" || obj.Function.Name == "" {
		return nil, badRequest("tool_choice", `tool_choice must be "auto", "none", "required" or {"type":"function","function":{"name":...}}`)
	}
	return &anthropic.ToolChoice{Type: "tool", Name: obj.Function.Name}, nil
}

// DropUnsignedThinking removes thinking blocks without a signature from the
// assistant turns of req and reports whether it changed anything. Such
// blocks come from conversations that were served by an openai backend
// (reasoning_content has no signature); Anthropic rejects them, so a
// request that switches to an anthropic backend mid-conversation must lose
// them.
func DropUnsignedThinking(req *anthropic.MessagesRequest) bool {
	changed := false
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role != "assistant" || m.Content.Blocks == nil {
			continue
		}
		kept := m.Content.Blocks[:0]
		for _, b := range m.Content.Blocks {
			if b.Type == "thinking" && b.Signature == "" {
				changed = true
				continue
			}
			kept = append(kept, b)
		}
		m.Content.Blocks = kept
	}
	return changed
}

// AnthropicToChatCompletion converts an Anthropic message into a chat
// completion for a client that spoke OpenAI chat. Text blocks join into
// content, thinking blocks into reasoning_content, tool_use blocks become
// tool_calls. stop_reason maps end_turn/stop_sequence/pause_turn -> stop,
// max_tokens/model_context_window_exceeded -> length, tool_use ->
// tool_calls, refusal -> content_filter. prompt_tokens counts input plus
// cache reads and writes, as OpenAI does, with cached_tokens = cache reads.
func AnthropicToChatCompletion(msg *anthropic.Message, model string) *openai.ChatCompletion {
	m := openai.ChatMessage{Role: "assistant"}
	var text, thinking strings.Builder
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "thinking":
			thinking.WriteString(b.Thinking)
		case "tool_use":
			args := "{}"
			if len(b.Input) > 0 {
				args = compactJSON(b.Input)
			}
			m.ToolCalls = append(m.ToolCalls, openai.ToolCall{ID: b.ID, Type: "function",
				Function: openai.FunctionCall{Name: b.Name, Arguments: args}})
		}
	}
	if text.Len() > 0 || len(m.ToolCalls) == 0 {
		m.Content = openai.TextContent(text.String())
	}
	m.ReasoningContent = thinking.String()
	reason := ""
	if msg.StopReason != nil {
		reason = *msg.StopReason
	}
	finish := finishReason(reason)
	u := chatUsage(msg.Usage)
	return &openai.ChatCompletion{
		ID:      chatID(msg.ID),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   model,
		Choices: []openai.ChatChoice{{Index: 0, Message: m, FinishReason: &finish}},
		Usage:   &u,
	}
}

func chatID(anthropicID string) string {
	if anthropicID == "" {
		return newID("chatcmpl-")
	}
	return "chatcmpl-" + strings.TrimPrefix(anthropicID, "msg_")
}

// finishReason maps an Anthropic stop reason to an OpenAI finish_reason.
func finishReason(stop string) string {
	switch stop {
	case anthropic.StopMaxTokens, anthropic.StopContextLimit:
		return "length"
	case anthropic.StopToolUse:
		return "tool_calls"
	case anthropic.StopRefusal:
		return "content_filter"
	default:
		return "stop"
	}
}

func chatUsage(u anthropic.Usage) openai.Usage {
	prompt := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	out := openai.Usage{PromptTokens: prompt, CompletionTokens: u.OutputTokens, TotalTokens: prompt + u.OutputTokens}
	if u.CacheReadInputTokens > 0 {
		out.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: u.CacheReadInputTokens}
	}
	return out
}
