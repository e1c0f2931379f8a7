package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/dialect"
)

// BillingHeaderPrefix starts the line Claude Code puts first in its system
// prompt (cc_version, cc_entrypoint and more, for Anthropic's billing).
const BillingHeaderPrefix = "x-anthropic-billing-header:"

// AnthropicToChat converts an Anthropic Messages request into an OpenAI chat
// completions request for an openai-dialect backend, with the default
// dialect.ChatOptions. See AnthropicToChatWith.
func AnthropicToChat(req *anthropic.MessagesRequest) (*openai.ChatCompletionRequest, error) {
	return AnthropicToChatWith(req, dialect.ChatOptions{})
}

// AnthropicToChatWith converts an Anthropic Messages request into an OpenAI
// chat completions request for an openai-dialect backend.
//
// Mapping: system (string or text blocks) -> a leading system message;
// system-role messages inside messages (as Claude Code sends them) join that
// leading message in order, after the top-level system prompt, because chat
// templates differ on a system message that is not first: Qwen2.5/Qwen3 and
// Llama 3 render it in place, DeepSeek-R1's template itself concatenates all
// system messages into the first, and Mistral's and Gemma's raise an
// exception; a leading one is the form they all accept (opts.SystemInPlace
// keeps them in place instead). A system message with clear_at
// "next_user_message" is left out once a later user message exists, as
// Anthropic does. Claude Code's "x-anthropic-billing-header:" first line of
// the system prompt is removed unless opts.KeepBillingHeader.
//
// Text and image blocks -> content parts (base64 images become data: URIs);
// assistant tool_use -> tool_calls; user tool_result -> "tool" messages placed
// right after the assistant turn (OpenAI requires that order), with is_error
// results prefixed "Error: " because chat has no error flag; thinking blocks
// in history -> reasoning_content of the same assistant message (never
// visible text), redacted_thinking is dropped; tools/tool_choice map to
// function tools (any -> "required", tool -> named function,
// disable_parallel_tool_use -> parallel_tool_calls:false, strict -> strict);
// stop_sequences -> stop; top_k -> top_k (vLLM, SGLang, llama.cpp, Ollama);
// metadata.user_id -> user; output_config.format (or the beta output_format)
// json_schema -> response_format json_schema; stream -> stream with
// stream_options.include_usage so usage can be reported. thinking and
// output_config.effort go where opts.Reasoning says (nowhere by default).
// cache_control markers, context_management, container, mcp_servers,
// service_tier and other fields a chat backend has no equivalent for are
// dropped; AnthropicIgnoredFields lists them.
//
// Invalid input returns a 400 *apierror.Error naming the parameter to fix.
func AnthropicToChatWith(req *anthropic.MessagesRequest, opts dialect.ChatOptions) (*openai.ChatCompletionRequest, error) {
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
		TopK:        req.TopK,
		Stop:        req.StopSequences,
		Stream:      req.Stream,
	}
	if req.Stream {
		out.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	if req.Metadata != nil {
		out.User = req.Metadata.UserID
	}
	rf, err := anthropicResponseFormat(req)
	if err != nil {
		return nil, err
	}
	out.ResponseFormat = rf
	defs := newToolIndex(req.Tools)
	if out.Messages, err = anthropicMessages(req, opts, defs); err != nil {
		return nil, err
	}
	referenced := referencedTools(req.Messages)
	if out.Tools, err = anthropicTools(req.Tools, referenced); err != nil {
		return nil, err
	}
	if tc := req.ToolChoice; tc != nil {
		if out.ToolChoice, err = toolChoiceFromAnthropic(tc, defs, referenced); err != nil {
			return nil, err
		}
		if len(out.Tools) == 0 {
			out.ToolChoice = nil // engines reject a tool_choice without tools
		}
		if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse && len(out.Tools) > 0 {
			out.ParallelToolCalls = ptr(false)
		}
	}
	if err := ApplyReasoning(out, AnthropicReasoning(req), opts.Reasoning); err != nil {
		return nil, err
	}
	return out, nil
}

// anthropicMessages builds the chat messages: one leading system message
// of the system prompt and the system messages before the conversation (or
// all of them, unless opts.SystemInPlace keeps later ones where they are),
// then the conversation.
func anthropicMessages(req *anthropic.MessagesRequest, opts dialect.ChatOptions, defs *toolIndex) ([]openai.ChatMessage, error) {
	system0 := req.System
	if !opts.KeepBillingHeader {
		system0 = withoutBillingLine(system0)
	}
	sys, err := systemText(system0, "system")
	if err != nil {
		return nil, err
	}
	var system []string
	if sys != "" {
		system = append(system, sys)
	}
	lastUser := lastUserIndex(req.Messages)
	inPlace := make([]string, len(req.Messages)) // text of system messages kept where they are
	leading := true                              // no user or assistant message yet
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role != anthropic.RoleSystem {
			leading = false
			continue
		}
		if systemCleared(m, i, lastUser) {
			continue
		}
		text, err := systemText(m.Content, fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return nil, err
		}
		switch {
		case text == "": // a message that only sets output_config
		case opts.SystemInPlace && !leading:
			inPlace[i] = text
		default:
			system = append(system, text)
		}
	}
	msgs := make([]openai.ChatMessage, 0, len(req.Messages)+1)
	if len(system) > 0 {
		msgs = append(msgs, openai.ChatMessage{Role: "system", Content: openai.TextContent(strings.Join(system, "\n\n"))})
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role == anthropic.RoleSystem {
			if inPlace[i] != "" {
				msgs = append(msgs, openai.ChatMessage{Role: "system", Content: openai.TextContent(inPlace[i])})
			}
			continue
		}
		if msgs, err = appendAnthropicMessage(msgs, m, i, defs); err != nil {
			return nil, err
		}
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must contain at least one user or assistant message")
	}
	return msgs, nil
}

// anthropicTools maps custom tools to function tools; a defer_loading tool
// no tool_reference has loaded is left out, and a server tool is refused.
func anthropicTools(tools []anthropic.Tool, referenced map[string]bool) ([]openai.Tool, error) {
	var out []openai.Tool
	for i, t := range tools {
		if deferred(t) && !referenced[t.Name] {
			continue // hidden from the model until a tool_reference loads it, as with Anthropic
		}
		if t.Type != "" && t.Type != "custom" {
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i),
				"tools[%d] (%q) is an Anthropic server tool of type %q, which an OpenAI-compatible backend cannot run; remove it from tools or route this model to an anthropic backend", i, t.Name, t.Type)
		}
		if t.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d].name", i), "tools[%d].name is required", i)
		}
		params := t.InputSchema
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, openai.Tool{Type: "function",
			Function: openai.FunctionDecl{Name: t.Name, Description: t.Description, Parameters: params, Strict: t.Strict}})
	}
	return out, nil
}

// toolChoiceFromAnthropic maps tool_choice: any -> "required", tool -> the
// named function.
func toolChoiceFromAnthropic(tc *anthropic.ToolChoice, defs *toolIndex, referenced map[string]bool) (json.RawMessage, error) {
	switch tc.Type {
	case "auto":
		return json.RawMessage(`"auto"`), nil
	case "any":
		return json.RawMessage(`"required"`), nil
	case "none":
		return json.RawMessage(`"none"`), nil
	case "tool":
		if tc.Name == "" {
			return nil, badRequest("tool_choice.name", `tool_choice of type "tool" needs the name of the tool to call`)
		}
		if d := defs.defs[tc.Name]; d != nil && deferred(*d) && !referenced[tc.Name] {
			return nil, badRequest("tool_choice.name", "tool_choice names %q, a defer_loading tool no tool_reference has loaded yet; load it with a tool search first, or drop defer_loading", tc.Name)
		}
		return mustJSON(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}), nil
	}
	return nil, badRequest("tool_choice.type", "tool_choice.type %q is not one of auto, any, tool, none", tc.Type)
}

// lastUserIndex returns the index of the last user message, -1 when none.
func lastUserIndex(msgs []anthropic.MessageParam) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == anthropic.RoleUser {
			return i
		}
	}
	return -1
}

// systemCleared reports whether the system message m at index i no longer
// applies: its clear_at is "next_user_message" and a user message follows.
func systemCleared(m *anthropic.MessageParam, i, lastUser int) bool {
	return m.ClearAt == "next_user_message" && lastUser > i
}

// anthropicResponseFormat maps output_config.format, or the structured
// outputs beta's output_format, to a chat response_format.
func anthropicResponseFormat(req *anthropic.MessagesRequest) (json.RawMessage, error) {
	raw, param := req.OutputFormat, "output_format"
	if oc := req.OutputConfig; oc != nil && len(oc.Format) > 0 && string(oc.Format) != "null" {
		raw, param = oc.Format, "output_config.format"
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(raw, &f) != nil || f.Type != "json_schema" || len(f.Schema) == 0 {
		return nil, badRequest(param, `%s must be {"type":"json_schema","schema":{...}}`, param)
	}
	return mustJSON(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "output", "schema": f.Schema, "strict": true}}), nil
}

// systemText joins the text blocks of a system prompt; path names the field
// in errors.
func systemText(s anthropic.SystemPrompt, path string) (string, error) {
	if s.Text != nil {
		return *s.Text, nil
	}
	parts := make([]string, 0, len(s.Blocks))
	for i, b := range s.Blocks {
		if b.Type != "text" {
			return "", badRequest(fmt.Sprintf("%s[%d].type", path, i), "%s blocks must be text blocks, got %q", path, b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

// withoutBillingLine returns the system prompt without its first line when
// that line is Claude Code's billing header (a first text block holding
// only that line goes whole). s itself is not changed.
func withoutBillingLine(s anthropic.SystemPrompt) anthropic.SystemPrompt {
	cut := func(text string) (string, bool) {
		if !strings.HasPrefix(text, BillingHeaderPrefix) {
			return text, false
		}
		_, rest, _ := strings.Cut(text, "\n")
		return rest, true
	}
	if s.Text != nil {
		if rest, ok := cut(*s.Text); ok {
			return anthropic.SystemPrompt{Text: &rest}
		}
		return s
	}
	if len(s.Blocks) == 0 || s.Blocks[0].Type != "text" {
		return s
	}
	rest, ok := cut(s.Blocks[0].Text)
	switch {
	case !ok:
		return s
	case strings.TrimSpace(rest) == "":
		return anthropic.SystemPrompt{Blocks: s.Blocks[1:len(s.Blocks):len(s.Blocks)]}
	}
	blocks := slices.Clone(s.Blocks)
	blocks[0].Text = rest
	return anthropic.SystemPrompt{Blocks: blocks}
}

// AnthropicIgnoredFields lists the request fields that a chat backend
// translated with opts does not honour, for the log: the top-level
// cache_control, context_management, container, mcp_servers, service_tier,
// thinking and output_config.effort when opts.Reasoning has nowhere to put
// them, and members the gateway does not know. cache_control markers on
// blocks are not listed (every Claude Code request has them; prompt caching
// on a local engine is automatic).
func AnthropicIgnoredFields(req *anthropic.MessagesRequest, opts dialect.ChatOptions) []string {
	var out []string
	if req.ServiceTier != "" {
		out = append(out, "service_tier")
	}
	r, ro := AnthropicReasoning(req), opts.Reasoning
	if req.Thinking != nil && ro.Switch == "" && (r.BudgetTokens == 0 || ro.Budget == "") && (r.Effort == "" || ro.Effort == "") {
		out = append(out, "thinking")
	}
	if r.Effort != "" && ro.Effort == "" {
		out = append(out, "output_config.effort")
	}
	if req.OutputConfig != nil {
		for k := range req.OutputConfig.Extra {
			out = append(out, "output_config."+k)
		}
	}
	for k := range req.Extra {
		out = append(out, k)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// appendAnthropicMessage appends to dst the chat messages one Anthropic
// message (messages[i]) turns into: one, or for a user message with tool
// results the tool messages followed by a user message for the rest of
// its content. Its error paths are built only when needed: a request of
// many short messages costs their chat messages, nothing per message more.
func appendAnthropicMessage(dst []openai.ChatMessage, m *anthropic.MessageParam, i int, defs *toolIndex) ([]openai.ChatMessage, error) {
	switch m.Role {
	case anthropic.RoleUser, anthropic.RoleAssistant:
	default:
		path := fmt.Sprintf("messages[%d]", i)
		return nil, badRequest(path+".role", `%s.role must be "user", "assistant" or "system", got %q`, path, m.Role)
	}
	if m.Content.Text != nil {
		return append(dst, openai.ChatMessage{Role: m.Role, Content: openai.TextContent(*m.Content.Text)}), nil
	}
	path := fmt.Sprintf("messages[%d]", i)
	if m.Role == "assistant" {
		msg, err := assistantBlocks(m.Content.Blocks, path)
		if err != nil {
			return nil, err
		}
		return append(dst, msg), nil
	}

	n0 := len(dst) // the tool messages go to dst as they come
	parts := make([]openai.ContentPart, 0, len(m.Content.Blocks))
	for j := range m.Content.Blocks {
		b := &m.Content.Blocks[j]
		if b.Type == "text" { // most blocks: no path, no copy
			parts = append(parts, openai.ContentPart{Type: "text", Text: b.Text})
			continue
		}
		bp := fmt.Sprintf("%s.content[%d]", path, j)
		switch b.Type {
		case "tool_result":
			if b.ToolUseID == "" {
				return nil, badRequest(bp+".tool_use_id", "%s.tool_use_id is required", bp)
			}
			text, images, err := toolResultContent(b.Content, bp, defs)
			if err != nil {
				return nil, err
			}
			if b.IsError {
				text = "Error: " + text
			}
			dst = append(dst, openai.ChatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: openai.TextContent(text)})
			// Chat tool messages carry text only: images a tool returned
			// travel in the user message that follows, labelled.
			if len(images) > 0 {
				parts = append(parts, openai.ContentPart{Type: "text", Text: "Images returned by tool call " + b.ToolUseID + ":"})
				parts = append(parts, images...)
			}
		default:
			p, err := userPart(*b, bp)
			if err != nil {
				return nil, err
			}
			if p != nil {
				parts = append(parts, *p)
			}
		}
	}
	if len(parts) > 0 {
		dst = append(dst, openai.ChatMessage{Role: "user", Content: simplifyParts(parts)})
	} else if len(dst) == n0 {
		// An empty user message still has to exist to keep turn order.
		dst = append(dst, openai.ChatMessage{Role: "user", Content: openai.TextContent("")})
	}
	return dst, nil
}

// simplifyParts sends text-only content as a plain string: some local
// engines' chat templates handle only string content.
func simplifyParts(parts []openai.ContentPart) openai.Content {
	size := 0
	for i := range parts {
		if parts[i].Type != "text" {
			return openai.Content{Parts: parts}
		}
		size += len(parts[i].Text) + 2
	}
	var sb strings.Builder
	sb.Grow(size)
	for i := range parts {
		if i > 0 {
			sb.WriteString("\n\n")
		}
		sb.WriteString(parts[i].Text)
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
	case "search_result":
		text, err := searchResultText(b, path)
		if err != nil {
			return nil, err
		}
		return &openai.ContentPart{Type: "text", Text: text}, nil
	case "thinking", "redacted_thinking":
		return nil, nil // only meaningful in assistant turns; ignore
	case "tool_use":
		return nil, badRequest(path+".type", "%s: tool_use blocks belong in assistant messages", path)
	default:
		return nil, badRequest(path+".type", "%s: content block type %q is not supported by OpenAI-compatible backends", path, b.Type)
	}
}

// searchResultText renders a search_result block (source, title and text
// content, as a RAG tool returns it) as text: chat has no such part.
func searchResultText(b anthropic.ContentBlock, path string) (string, error) {
	var sr struct {
		Source  string `json:"source"`
		Title   string `json:"title"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(b.Raw, &sr); err != nil {
		return "", badRequest(path, "%s: a search_result block needs a source and a title (strings) and text content", path)
	}
	parts := []string{sr.Title + " (" + sr.Source + ")"}
	for _, c := range sr.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n\n"), nil
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
// A tool_reference block (the answer of a tool search, such as Claude
// Code's ToolSearch over deferred MCP tools) becomes the referenced tool's
// definition in a <functions> block, the form Claude Code's ToolSearch
// describes to the model; the tool itself joins the chat request's tools.
func toolResultContent(c *anthropic.Content, path string, defs *toolIndex) (string, []openai.ContentPart, error) {
	if c == nil {
		return "", nil, nil
	}
	if c.Text != nil {
		return *c.Text, nil, nil
	}
	var texts, refs []string
	var images []openai.ContentPart
	for k, b := range c.Blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
			continue
		}
		bp := fmt.Sprintf("%s.content[%d]", path, k)
		switch b.Type {
		case "image":
			u, err := imageURL(b.Source, bp)
			if err != nil {
				return "", nil, err
			}
			images = append(images, openai.ContentPart{Type: "image_url", ImageURL: &openai.ImageURL{URL: u}})
		case "document", "search_result":
			p, err := userPart(b, bp)
			if err != nil {
				return "", nil, err
			}
			texts = append(texts, p.Text)
		case "tool_reference":
			name := toolReferenceName(b)
			if name == "" {
				return "", nil, badRequest(bp+".tool_name", "%s: a tool_reference block needs the tool_name of a tool in tools", bp)
			}
			refs = append(refs, name)
		default:
			return "", nil, badRequest(bp+".type", "%s: tool_result content must be text, image, document, search_result or tool_reference blocks, got %q", bp, b.Type)
		}
	}
	if len(refs) > 0 {
		texts = append(texts, defs.functionsBlock(refs))
	}
	return strings.Join(texts, "\n\n"), images, nil
}

// toolIndex finds tools by name (the first of a name wins) for the
// tool_reference blocks of one request, and remembers which definitions
// the converted conversation already holds.
type toolIndex struct {
	defs  map[string]*anthropic.Tool
	shown map[string]bool
}

func newToolIndex(tools []anthropic.Tool) *toolIndex {
	x := &toolIndex{defs: make(map[string]*anthropic.Tool, len(tools)), shown: map[string]bool{}}
	for i := range tools {
		if _, ok := x.defs[tools[i].Name]; !ok {
			x.defs[tools[i].Name] = &tools[i]
		}
	}
	return x
}

// deferred reports whether a tool is marked defer_loading: true.
func deferred(t anthropic.Tool) bool {
	v, ok := t.Extra["defer_loading"]
	return ok && string(bytes.TrimSpace(v)) == "true"
}

// toolReferenceName is the tool_name of a tool_reference block.
func toolReferenceName(b anthropic.ContentBlock) string {
	var ref struct {
		ToolName string `json:"tool_name"`
	}
	if len(b.Raw) > 0 {
		_ = json.Unmarshal(b.Raw, &ref)
	} else if v, ok := b.Extra["tool_name"]; ok {
		_ = json.Unmarshal(v, &ref.ToolName)
	}
	return ref.ToolName
}

// referencedTools names the tools that tool_reference blocks in tool
// results have loaded: a deferred tool is offered to the backend only then.
func referencedTools(msgs []anthropic.MessageParam) map[string]bool {
	var out map[string]bool
	for i := range msgs {
		for _, b := range msgs[i].Content.Blocks {
			if b.Type != "tool_result" || b.Content == nil {
				continue
			}
			for _, c := range b.Content.Blocks {
				if c.Type != "tool_reference" {
					continue
				}
				if name := toolReferenceName(c); name != "" {
					if out == nil {
						out = map[string]bool{}
					}
					out[name] = true
				}
			}
		}
	}
	return out
}

// ToolReferenceBytes is how much the <functions> blocks that tool_reference
// blocks become add to req's chat translation, in decoded bytes, counted
// before anything is written: each referenced tool's name, description and
// schema the first time (as functionsBlock writes them), its name at every
// later reference. The JSON escaping of the written text can add to it.
// A caller bounds a request's expansion with it before translating.
func ToolReferenceBytes(req *anthropic.MessagesRequest) int64 {
	const perFunction = len("\n<function>{\"description\":\"\",\"name\":\"\",\"parameters\":}</function>")
	var n int64
	defs := newToolIndex(req.Tools)
	for i := range req.Messages {
		for _, b := range req.Messages[i].Content.Blocks {
			if b.Type != "tool_result" || b.Content == nil {
				continue
			}
			for _, c := range b.Content.Blocks {
				if c.Type != "tool_reference" {
					continue
				}
				name := toolReferenceName(c)
				n += int64(len(name) + perFunction)
				if d := defs.defs[name]; d != nil && !defs.shown[name] {
					defs.shown[name] = true
					n += int64(len(d.Description) + len(d.InputSchema))
				}
			}
		}
	}
	return n
}

// functionsBlock writes the definitions of the referenced tools as
// <functions><function>{"description","name","parameters"}</function>…
// A tool's description and parameters are written the first time the
// conversation references it; later references, and names not in tools,
// give the name only, so a body of many references to one large tool
// cannot grow the request past the size of its tools.
func (x *toolIndex) functionsBlock(names []string) string {
	var sb strings.Builder
	sb.WriteString("<functions>")
	for _, name := range names {
		fn := struct {
			Description string          `json:"description,omitempty"`
			Name        string          `json:"name"`
			Parameters  json.RawMessage `json:"parameters,omitempty"`
		}{Name: name}
		if d := x.defs[name]; d != nil && !x.shown[name] {
			fn.Description, fn.Parameters = d.Description, d.InputSchema
			x.shown[name] = true
		}
		b, err := json.Marshal(fn)
		if err != nil { // an input_schema that is not JSON: the name alone
			b, _ = json.Marshal(struct {
				Name string `json:"name"`
			}{name})
		}
		sb.WriteString("\n<function>")
		sb.Write(b)
		sb.WriteString("</function>")
	}
	sb.WriteString("\n</functions>")
	return sb.String()
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
