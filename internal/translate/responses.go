package translate

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"llmgate/internal/api/openai"
	"llmgate/internal/dialect"
)

// ResponsesToChat converts a Responses API request into a chat completions
// request for a chat-only backend with the default ChatOptions; see
// ResponsesToChatWith.
func ResponsesToChat(req *openai.ResponsesRequest) (*openai.ChatCompletionRequest, error) {
	return ResponsesToChatWith(req, dialect.ChatOptions{})
}

// ResponsesToChatWith converts a Responses API request into a chat
// completions request for a chat-only backend. It translates one self-contained
// request: the server resolves previous_response_id into input items
// first (see server.previousItems); one still set here (storage off) and
// conversation are rejected with a 400 that says to send the full input.
//
// instructions -> leading system message; input string -> one user message;
// message items (roles system/developer -> system, user, assistant) with
// input_text/output_text/refusal/input_image parts; function_call items ->
// assistant tool_calls (consecutive calls and the assistant text before them
// share one assistant message); function_call_output -> tool messages;
// all system content (instructions first) is merged into one leading system
// message (opts.SystemInPlace keeps later ones in place);
// a reasoning item becomes the reasoning_content of the assistant message
// that follows it (its reasoning_text content, or the text llmgate put in
// its encrypted_content, or else its summary); reasoning from another
// server's encrypted_content cannot be read and is dropped. Function tools
// map to chat tools; hosted tools (web_search, file_search, ...) cannot run
// on a chat backend and are skipped. tool_choice, parallel_tool_calls,
// max_output_tokens, temperature, top_p, user and text.format (json_schema /
// json_object) map to their chat equivalents. reasoning.effort goes where
// opts.Reasoning says; with no reasoning options it goes to reasoning_effort
// unchanged, the chat API's field for the same setting.
func ResponsesToChatWith(req *openai.ResponsesRequest, opts dialect.ChatOptions) (*openai.ChatCompletionRequest, error) {
	if req.PreviousResponseID != "" {
		return nil, badRequest("previous_response_id", "previous_response_id is not supported: this gateway does not store responses (store_responses: false in its config); send the full conversation in input and set store to false")
	}
	if len(req.Conversation) > 0 && string(req.Conversation) != "null" {
		return nil, badRequest("conversation", "conversation is not supported: llmgate does not store conversations; send the full conversation in input and set store to false")
	}
	out := &openai.ChatCompletionRequest{
		Model:             req.Model,
		Stream:            req.Stream,
		MaxTokens:         req.MaxOutputTokens,
		Temperature:       req.Temperature,
		TopP:              req.TopP,
		ParallelToolCalls: req.ParallelToolCalls,
		User:              req.User,
	}
	if out.User == "" {
		out.User = req.SafetyIdentifier
	}
	if req.Stream {
		out.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	if req.Reasoning != nil && opts.Reasoning.IsZero() {
		out.ReasoningEffort = req.Reasoning.Effort
	}
	if req.Text != nil && req.Text.Format != nil {
		switch f := req.Text.Format; f.Type {
		case "json_schema":
			js := map[string]any{"name": f.Name, "schema": f.Schema}
			if f.Description != "" {
				js["description"] = f.Description
			}
			if f.Strict != nil {
				js["strict"] = *f.Strict
			}
			out.ResponseFormat = mustJSON(map[string]any{"type": "json_schema", "json_schema": js})
		case "json_object":
			out.ResponseFormat = json.RawMessage(`{"type":"json_object"}`)
		}
	}
	// At most one chat message per item (function calls join the assistant
	// message before them), plus instructions and a text input.
	out.Messages = make([]openai.ChatMessage, 0, len(req.Input.Items)+2)
	if req.Instructions != "" {
		out.Messages = append(out.Messages, openai.ChatMessage{Role: "system", Content: openai.TextContent(req.Instructions)})
	}
	if req.Input.Text != nil {
		out.Messages = append(out.Messages, openai.ChatMessage{Role: "user", Content: openai.TextContent(*req.Input.Text)})
	}
	items := req.Input.Items
	for i := 0; i < len(items); i++ {
		if items[i].Type == "reasoning" {
			// A run of reasoning items is joined once (adding each to the
			// message's text was quadratic in the run).
			var texts []string
			for ; i < len(items) && items[i].Type == "reasoning"; i++ {
				if text := inputReasoning(&items[i]); text != "" {
					texts = append(texts, text)
				}
			}
			i--
			out.Messages = appendReasoning(out.Messages, strings.Join(texts, "\n\n"))
			continue
		}
		var err error
		if out.Messages, err = appendInputItem(out.Messages, &items[i], fmt.Sprintf("input[%d]", i)); err != nil {
			return nil, err
		}
	}
	out.Messages = dropReasoningOnly(out.Messages)
	out.Messages = hoistSystem(out.Messages, opts.SystemInPlace)
	if len(out.Messages) == 0 {
		return nil, badRequest("input", "input is required: send a string or a list of input items")
	}
	for i, t := range req.Tools {
		if t.Type != "function" {
			continue
		}
		if t.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d].name", i), "tools[%d].name is required for function tools", i)
		}
		params := t.Parameters
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, openai.Tool{Type: "function", Function: openai.FunctionDecl{
			Name: t.Name, Description: t.Description, Parameters: params, Strict: t.Strict}})
	}
	if len(out.Tools) == 0 {
		out.ParallelToolCalls = nil // some engines reject it without tools
	}
	tc, err := chatToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	if len(out.Tools) > 0 {
		out.ToolChoice = tc
	}
	if !opts.Reasoning.IsZero() {
		if err := ApplyReasoning(out, ResponsesReasoning(req), opts.Reasoning); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dropReasoningOnly removes assistant messages that hold only reasoning (a
// reasoning item nothing followed): chat templates expect an assistant turn
// to say or call something.
func dropReasoningOnly(msgs []openai.ChatMessage) []openai.ChatMessage {
	out := msgs[:0]
	for _, m := range msgs {
		if reasoningOnly(&m) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// appendReasoning adds reasoning text to the reasoning-only assistant
// message that ends msgs, or as a new one.
func appendReasoning(msgs []openai.ChatMessage, text string) []openai.ChatMessage {
	if text == "" {
		return msgs
	}
	if n := len(msgs); n > 0 && reasoningOnly(&msgs[n-1]) {
		msgs[n-1].ReasoningContent += "\n\n" + text
		return msgs
	}
	return append(msgs, openai.ChatMessage{Role: "assistant", ReasoningContent: text})
}

func reasoningOnly(m *openai.ChatMessage) bool {
	return m.Role == "assistant" && m.Content.IsNull() && len(m.ToolCalls) == 0
}

// reasoningPrefix marks the encrypted_content of reasoning items llmgate
// wrote: it is the reasoning text, base64-encoded, so that a client which
// sends back only encrypted_content (Codex with store false drops the
// reasoning_text it received) still returns the model's reasoning to it.
const reasoningPrefix = "llmgate.reasoning.v1:"

// encodeReasoning returns the encrypted_content of a reasoning item.
func encodeReasoning(text string) string {
	return reasoningPrefix + base64.StdEncoding.EncodeToString([]byte(text))
}

// inputReasoning returns the text of a reasoning input item.
func inputReasoning(it *openai.InputItem) string {
	var parts []string
	for _, p := range it.Content.Parts {
		if p.Type == "reasoning_text" && p.Text != "" {
			parts = append(parts, p.Text)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "\n\n")
	}
	if enc, ok := strings.CutPrefix(it.EncryptedContent, reasoningPrefix); ok {
		if b, err := base64.StdEncoding.DecodeString(enc); err == nil {
			return string(b)
		}
	}
	for _, p := range it.Summary {
		if p.Text != "" {
			parts = append(parts, p.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// wantsEncryptedReasoning reports whether the client asked for reasoning
// items' encrypted_content.
func wantsEncryptedReasoning(req *openai.ResponsesRequest) bool {
	return req != nil && slices.Contains(req.Include, "reasoning.encrypted_content")
}

// hoistSystem merges every system message into one leading system message:
// many engines' chat templates reject a system message that is not first.
// With inPlace only those before the first other message are merged.
func hoistSystem(msgs []openai.ChatMessage, inPlace bool) []openai.ChatMessage {
	var sys []string
	rest := make([]openai.ChatMessage, 0, len(msgs))
	for _, m := range msgs {
		if m.Role == "system" && !(inPlace && len(rest) > 0) {
			sys = append(sys, m.Content.String())
			continue
		}
		rest = append(rest, m)
	}
	if len(sys) == 0 {
		return msgs
	}
	return append([]openai.ChatMessage{{Role: "system", Content: openai.TextContent(strings.Join(sys, "\n\n"))}}, rest...)
}

// appendInputItem appends the chat messages of one input item other than
// a reasoning one (ResponsesToChatWith joins each run of those).
func appendInputItem(msgs []openai.ChatMessage, it *openai.InputItem, path string) ([]openai.ChatMessage, error) {
	typ := it.Type
	if typ == "" && it.Role != "" {
		typ = "message"
	}
	switch typ {
	case "message":
		return appendInputMessage(msgs, it, path)
	case "function_call":
		if it.CallID == "" || it.Name == "" {
			return nil, badRequest(path, "%s: function_call items need call_id and name", path)
		}
		args := it.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		call := openai.ToolCall{ID: it.CallID, Type: "function", Function: openai.FunctionCall{Name: it.Name, Arguments: args}}
		if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
			msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
			return msgs, nil
		}
		return append(msgs, openai.ChatMessage{Role: "assistant", ToolCalls: []openai.ToolCall{call}}), nil
	case "function_call_output":
		if it.CallID == "" {
			return nil, badRequest(path+".call_id", "%s.call_id is required for function_call_output items", path)
		}
		out := it.Output
		text := ""
		if out.Text != nil {
			text = *out.Text
		} else {
			var parts []string
			for _, p := range out.Parts {
				if p.Type == "input_text" || p.Type == "output_text" {
					parts = append(parts, p.Text)
				}
			}
			text = strings.Join(parts, "\n\n")
		}
		return append(msgs, openai.ChatMessage{Role: "tool", ToolCallID: it.CallID, Content: openai.TextContent(text)}), nil
	default:
		return nil, badRequest(path+".type", "%s: input item type %q is not supported for chat-only backends; send message, function_call and function_call_output items", path, typ)
	}
}

func appendInputMessage(msgs []openai.ChatMessage, it *openai.InputItem, path string) ([]openai.ChatMessage, error) {
	role := it.Role
	switch role {
	case "system", "developer":
		role = "system" // many engines' chat templates know no "developer"
	case "user", "assistant":
	default:
		return nil, badRequest(path+".role", "%s.role %q is not one of system, developer, user, assistant", path, it.Role)
	}
	var content openai.Content
	if it.Content.Text != nil {
		content = openai.TextContent(*it.Content.Text)
	} else {
		parts := make([]openai.ContentPart, 0, len(it.Content.Parts))
		for j, p := range it.Content.Parts {
			pp := func() string { return fmt.Sprintf("%s.content[%d]", path, j) }
			switch p.Type {
			case "input_text", "output_text":
				parts = append(parts, openai.ContentPart{Type: "text", Text: p.Text})
			case "refusal":
				parts = append(parts, openai.ContentPart{Type: "text", Text: p.Refusal})
			case "input_image":
				if p.ImageURL == "" {
					return nil, badRequest(pp()+".image_url", "%s: input_image needs image_url (file_id is not supported)", pp())
				}
				parts = append(parts, openai.ContentPart{Type: "image_url", ImageURL: &openai.ImageURL{URL: p.ImageURL, Detail: p.Detail}})
			default:
				return nil, badRequest(pp()+".type", "%s: content type %q is not supported for chat-only backends", pp(), p.Type)
			}
		}
		content = simplifyParts(parts)
	}
	if n := len(msgs); role == "assistant" && n > 0 && reasoningOnly(&msgs[n-1]) {
		msgs[n-1].Content = content // the answer of the reasoning before it
		return msgs, nil
	}
	return append(msgs, openai.ChatMessage{Role: role, Content: content}), nil
}

// chatToolChoice converts a Responses tool_choice.
func chatToolChoice(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return raw, nil
		}
		return nil, badRequest("tool_choice", "tool_choice %q is not one of auto, none, required", s)
	}
	var obj struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &obj) != nil {
		return nil, badRequest("tool_choice", "tool_choice must be a string or an object")
	}
	if obj.Type == "function" && obj.Name != "" {
		return mustJSON(map[string]any{"type": "function", "function": map[string]string{"name": obj.Name}}), nil
	}
	// Hosted-tool choices cannot be honoured by a chat backend.
	return json.RawMessage(`"auto"`), nil
}

// ChatToResponses converts a non-streaming chat completion into a Responses
// API response. req is the client's request, echoed into the response
// (instructions, tools, sampling parameters); it may be nil. Reasoning
// (reasoning_content, or reasoning from newer vLLM) becomes a reasoning item
// with a reasoning_text part (and, when req includes
// "reasoning.encrypted_content", an encrypted_content that carries the text
// back in the next request), text a message item, each tool call a
// function_call item. finish_reason length gives status "incomplete" with
// reason max_output_tokens, content_filter reason content_filter; the last
// output item, the one that was cut, is then "incomplete" too.
func ChatToResponses(resp *openai.ChatCompletion, req *openai.ResponsesRequest) *openai.Response {
	r := baseResponse(responseID(resp.ID), resp.Created, resp.Model, req)
	base := strings.TrimPrefix(resp.ID, "chatcmpl-")
	finish := ""
	if len(resp.Choices) > 0 {
		c := resp.Choices[0]
		if c.FinishReason != nil {
			finish = *c.FinishReason
		}
		if rt := c.Message.ReasoningText(); rt != "" {
			it := openai.OutputItem{Type: "reasoning", ID: "rs_" + base, Status: openai.ResponseCompleted,
				Content: []openai.OutputContent{{Type: "reasoning_text", Text: rt}}}
			if wantsEncryptedReasoning(req) {
				it.EncryptedContent = encodeReasoning(rt)
			}
			r.Output = append(r.Output, it)
		}
		if text := c.Message.Content.String(); text != "" {
			r.Output = append(r.Output, openai.OutputItem{Type: "message", ID: "msg_" + base, Status: openai.ResponseCompleted,
				Role: "assistant", Content: []openai.OutputContent{{Type: "output_text", Text: text}}})
		}
		for i, tc := range c.Message.ToolCalls {
			callID := tc.ID
			if callID == "" {
				callID = fmt.Sprintf("call_%s_%d", base, i)
			}
			r.Output = append(r.Output, openai.OutputItem{Type: "function_call", ID: "fc_" + callID, Status: openai.ResponseCompleted,
				CallID: callID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	// A token limit or a filter cut the item the answer ended in, and only
	// that one (the stream translator marks its open item the same way): a
	// function call cut mid-arguments must not read "completed", or a
	// client runs it with truncated arguments.
	if n := len(r.Output); n > 0 {
		r.Output[n-1].Status = itemStatus(finish)
	}
	setTerminalStatus(r, finish)
	if resp.Usage != nil {
		r.Usage = responsesUsage(resp.Usage)
	}
	return r
}

func responseID(upstream string) string {
	if upstream == "" {
		return newID("resp_")
	}
	return "resp_" + strings.TrimPrefix(upstream, "chatcmpl-")
}

// baseResponse returns a response object echoing the request's settings.
func baseResponse(id string, created int64, model string, req *openai.ResponsesRequest) *openai.Response {
	r := &openai.Response{ID: id, Object: "response", CreatedAt: created, Status: openai.ResponseInProgress,
		Model: model, Output: []openai.OutputItem{}, ParallelToolCalls: true, ToolChoice: json.RawMessage(`"auto"`),
		Tools: []openai.ResponsesTool{}, Truncation: "disabled", Metadata: map[string]string{}}
	if req == nil {
		return r
	}
	if req.Model != "" {
		r.Model = req.Model
	}
	if req.Instructions != "" {
		r.Instructions = ptr(req.Instructions)
	}
	r.MaxOutputTokens = req.MaxOutputTokens
	if req.ParallelToolCalls != nil {
		r.ParallelToolCalls = *req.ParallelToolCalls
	}
	r.Store = req.Store != nil && *req.Store
	if req.PreviousResponseID != "" {
		r.PreviousResponseID = ptr(req.PreviousResponseID)
	}
	r.Temperature, r.TopP = req.Temperature, req.TopP
	if len(req.ToolChoice) > 0 {
		r.ToolChoice = req.ToolChoice
	}
	if req.Tools != nil {
		r.Tools = req.Tools
	}
	if req.User != "" {
		r.User = ptr(req.User)
	}
	if req.Metadata != nil {
		r.Metadata = req.Metadata
	}
	return r
}

// itemStatus is the status of a message item ended by finish: a message cut
// by the token limit or a filter is "incomplete", as the Responses API says.
func itemStatus(finish string) string {
	if finish == "length" || finish == "content_filter" {
		return openai.ResponseIncomplete
	}
	return openai.ResponseCompleted
}

// setTerminalStatus sets status and incomplete_details from finish_reason.
func setTerminalStatus(r *openai.Response, finish string) {
	switch finish {
	case "length":
		r.Status = openai.ResponseIncomplete
		r.IncompleteDetails = &openai.IncompleteDetails{Reason: "max_output_tokens"}
	case "content_filter":
		r.Status = openai.ResponseIncomplete
		r.IncompleteDetails = &openai.IncompleteDetails{Reason: "content_filter"}
	default:
		r.Status = openai.ResponseCompleted
	}
}

func responsesUsage(u *openai.Usage) *openai.ResponsesUsage {
	out := &openai.ResponsesUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens,
		TotalTokens: u.PromptTokens + u.CompletionTokens}
	if u.TotalTokens > 0 {
		out.TotalTokens = u.TotalTokens
	}
	if u.PromptTokensDetails != nil {
		out.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		out.OutputTokensDetails.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	return out
}
