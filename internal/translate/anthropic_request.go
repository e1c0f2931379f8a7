package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
)

// AnthropicToChat converts an Anthropic Messages request into an OpenAI chat
// completions request for an openai-dialect backend.
//
// Mapping: system (string or text blocks) -> a leading system message;
// text and image blocks -> content parts (base64 images become data: URIs);
// assistant tool_use -> tool_calls; user tool_result -> "tool" messages placed
// right after the assistant turn (OpenAI requires that order), with is_error
// results prefixed "Error: " because chat has no error flag; thinking blocks
// in history -> reasoning_content of the same assistant message (never
// visible text), redacted_thinking is dropped; tools/tool_choice map to
// function tools (any -> "required", tool -> named function,
// disable_parallel_tool_use -> parallel_tool_calls:false); stop_sequences ->
// stop; metadata.user_id -> user; stream -> stream with
// stream_options.include_usage so usage can be reported. top_k and the
// thinking config have no chat equivalent and are dropped.
//
// Invalid input returns a 400 *apierror.Error naming the parameter to fix.
func AnthropicToChat(req *anthropic.MessagesRequest) (*openai.ChatCompletionRequest, error) {
	if req.MaxTokens <= 0 {
		return nil, badRequest("max_tokens", "max_tokens is required and must be a positive integer")
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must contain at least one message")
	}
	out := &openai.ChatCompletionRequest{
		Model:       req.Model,
		MaxTokens:   ptr(req.MaxTokens),
		Temperature: req.Temperature,
		TopP:        req.TopP,
		Stop:        req.StopSequences,
		Stream:      req.Stream,
	}
	if req.Stream {
		out.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	if req.Metadata != nil {
		out.User = req.Metadata.UserID
	}

	sys, err := systemText(req.System)
	if err != nil {
		return nil, err
	}
	if sys != "" {
		out.Messages = append(out.Messages, openai.ChatMessage{Role: "system", Content: openai.TextContent(sys)})
	}
	for i := range req.Messages {
		msgs, err := convertAnthropicMessage(&req.Messages[i], fmt.Sprintf("messages[%d]", i))
		if err != nil {
			return nil, err
		}
		out.Messages = append(out.Messages, msgs...)
	}

	for i, t := range req.Tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i),
				"tools[%d] (%q) is an Anthropic server tool of type %q, which an OpenAI-compatible backend cannot run; remove it from tools or route this model to an anthropic backend", i, t.Name, t.Type)
		}
		if t.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d].name", i), "tools[%d].name is required", i)
		}
		params := t.InputSchema
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, openai.Tool{Type: "function",
			Function: openai.FunctionDecl{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	if tc := req.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			out.ToolChoice = json.RawMessage(`"auto"`)
		case "any":
			out.ToolChoice = json.RawMessage(`"required"`)
		case "none":
			out.ToolChoice = json.RawMessage(`"none"`)
		case "tool":
			if tc.Name == "" {
				return nil, badRequest("tool_choice.name", `tool_choice of type "tool" needs the name of the tool to call`)
			}
			out.ToolChoice = mustJSON(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		default:
			return nil, badRequest("tool_choice.type", "tool_choice.type %q is not one of auto, any, tool, none", tc.Type)
		}
		if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse && len(out.Tools) > 0 {
			out.ParallelToolCalls = ptr(false)
		}
	}
	return out, nil
}

// systemText joins the text blocks of a system prompt.
func systemText(s anthropic.SystemPrompt) (string, error) {
	if s.Text != nil {
		return *s.Text, nil
	}
	parts := make([]string, 0, len(s.Blocks))
	for i, b := range s.Blocks {
		if b.Type != "text" {
			return "", badRequest(fmt.Sprintf("system[%d].type", i), "system blocks must be text blocks, got %q", b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

// convertAnthropicMessage turns one Anthropic message into one or more chat
// messages (a user message with tool results becomes tool messages followed
// by a user message for the rest of its content).
func convertAnthropicMessage(m *anthropic.MessageParam, path string) ([]openai.ChatMessage, error) {
	switch m.Role {
	case "user", "assistant":
	default:
		return nil, badRequest(path+".role", `%s.role must be "user" or "assistant", got %q (put system prompts in the top-level system field)`, path, m.Role)
	}
	if m.Content.Text != nil {
		return []openai.ChatMessage{{Role: m.Role, Content: openai.TextContent(*m.Content.Text)}}, nil
	}
	if m.Role == "assistant" {
		msg, err := assistantBlocks(m.Content.Blocks, path)
		if err != nil {
			return nil, err
		}
		return []openai.ChatMessage{msg}, nil
	}

	var tools []openai.ChatMessage
	var parts []openai.ContentPart
	for j, b := range m.Content.Blocks {
		bp := fmt.Sprintf("%s.content[%d]", path, j)
		switch b.Type {
		case "tool_result":
			if b.ToolUseID == "" {
				return nil, badRequest(bp+".tool_use_id", "%s.tool_use_id is required", bp)
			}
			text, images, err := toolResultContent(b.Content, bp)
			if err != nil {
				return nil, err
			}
			if b.IsError {
				text = "Error: " + text
			}
			tools = append(tools, openai.ChatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: openai.TextContent(text)})
			// Chat tool messages carry text only: images a tool returned
			// travel in the user message that follows, labelled.
			if len(images) > 0 {
				parts = append(parts, openai.ContentPart{Type: "text", Text: "Images returned by tool call " + b.ToolUseID + ":"})
				parts = append(parts, images...)
			}
		default:
			p, err := userPart(b, bp)
			if err != nil {
				return nil, err
			}
			if p != nil {
				parts = append(parts, *p)
			}
		}
	}
	out := tools
	if len(parts) > 0 {
		out = append(out, openai.ChatMessage{Role: "user", Content: simplifyParts(parts)})
	} else if len(tools) == 0 {
		// An empty user message still has to exist to keep turn order.
		out = append(out, openai.ChatMessage{Role: "user", Content: openai.TextContent("")})
	}
	return out, nil
}

// simplifyParts sends text-only content as a plain string: some local
// engines' chat templates handle only string content.
func simplifyParts(parts []openai.ContentPart) openai.Content {
	var sb strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return openai.Content{Parts: parts}
		}
		if i > 0 {
			sb.WriteString("\n\n")
		}
		sb.WriteString(p.Text)
	}
	return openai.TextContent(sb.String())
}

// userPart converts a text, image or document block of a user message.
func userPart(b anthropic.ContentBlock, path string) (*openai.ContentPart, error) {
	switch b.Type {
	case "text":
		return &openai.ContentPart{Type: "text", Text: b.Text}, nil
	case "image":
		u, err := imageURL(b.Source, path)
		if err != nil {
			return nil, err
		}
		return &openai.ContentPart{Type: "image_url", ImageURL: &openai.ImageURL{URL: u}}, nil
	case "document":
		if b.Source != nil && b.Source.Type == "text" {
			text := b.Source.Data
			if b.Title != "" {
				text = b.Title + "\n\n" + text
			}
			return &openai.ContentPart{Type: "text", Text: text}, nil
		}
		return nil, badRequest(path+".source", "%s: only plain-text documents (source.type \"text\") can be sent to an OpenAI-compatible backend; extract the text and send it as a text block", path)
	case "thinking", "redacted_thinking":
		return nil, nil // only meaningful in assistant turns; ignore
	case "tool_use":
		return nil, badRequest(path+".type", "%s: tool_use blocks belong in assistant messages", path)
	default:
		return nil, badRequest(path+".type", "%s: content block type %q is not supported by OpenAI-compatible backends", path, b.Type)
	}
}

// imageURL converts an image source into a URL or data: URI.
func imageURL(src *anthropic.ImageSource, path string) (string, error) {
	if src == nil {
		return "", badRequest(path+".source", "%s.source is required for image blocks", path)
	}
	switch src.Type {
	case "base64":
		if src.MediaType == "" || src.Data == "" {
			return "", badRequest(path+".source", "%s.source needs media_type and data for base64 images", path)
		}
		return "data:" + src.MediaType + ";base64," + src.Data, nil
	case "url":
		if src.URL == "" {
			return "", badRequest(path+".source.url", "%s.source.url is required for url images", path)
		}
		return src.URL, nil
	default:
		return "", badRequest(path+".source.type", "%s.source.type %q is not supported; send the image as base64 or url", path, src.Type)
	}
}

// toolResultContent flattens tool_result content into text and image parts.
func toolResultContent(c *anthropic.Content, path string) (string, []openai.ContentPart, error) {
	if c == nil {
		return "", nil, nil
	}
	if c.Text != nil {
		return *c.Text, nil, nil
	}
	var texts []string
	var images []openai.ContentPart
	for k, b := range c.Blocks {
		bp := fmt.Sprintf("%s.content[%d]", path, k)
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "image":
			u, err := imageURL(b.Source, bp)
			if err != nil {
				return "", nil, err
			}
			images = append(images, openai.ContentPart{Type: "image_url", ImageURL: &openai.ImageURL{URL: u}})
		case "document":
			p, err := userPart(b, bp)
			if err != nil {
				return "", nil, err
			}
			texts = append(texts, p.Text)
		default:
			return "", nil, badRequest(bp+".type", "%s: tool_result content must be text, image or document blocks, got %q", bp, b.Type)
		}
	}
	return strings.Join(texts, "\n\n"), images, nil
}

// assistantBlocks converts an assistant turn: text -> content, tool_use ->
// tool_calls, thinking -> reasoning_content.
func assistantBlocks(blocks []anthropic.ContentBlock, path string) (openai.ChatMessage, error) {
	msg := openai.ChatMessage{Role: "assistant"}
	var text, thinking strings.Builder
	hasText := false
	for j, b := range blocks {
		bp := fmt.Sprintf("%s.content[%d]", path, j)
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
			hasText = true
		case "thinking":
			thinking.WriteString(b.Thinking)
		case "redacted_thinking":
			// Encrypted reasoning is only meaningful to Anthropic's models.
		case "tool_use":
			if b.ID == "" || b.Name == "" {
				return msg, badRequest(bp, "%s: tool_use blocks need an id and a name", bp)
			}
			args := "{}"
			if len(b.Input) > 0 {
				if !json.Valid(b.Input) {
					return msg, badRequest(bp+".input", "%s.input is not valid JSON", bp)
				}
				args = compactJSON(b.Input)
			}
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: b.ID, Type: "function",
				Function: openai.FunctionCall{Name: b.Name, Arguments: args}})
		default:
			return msg, badRequest(bp+".type", "%s: assistant content block type %q is not supported by OpenAI-compatible backends", bp, b.Type)
		}
	}
	if hasText || len(msg.ToolCalls) == 0 {
		msg.Content = openai.TextContent(text.String())
	}
	msg.ReasoningContent = thinking.String()
	return msg, nil
}

// compactJSON removes insignificant whitespace from valid JSON.
func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}
