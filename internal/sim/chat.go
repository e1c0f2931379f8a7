package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
)

// Seeds of the draws a chat answer makes besides its content words, derived
// from the request's sampling seed so a seed (or greedy sampling) makes the
// whole answer reproducible and plain answers keep their text.
const (
	reasoningSeedMix = 0x2545f4914f6cdd1d
	toolSeedMix      = 0x9fb21c651e98df25
)

// toolChoice is what a request's tool_choice asks for.
type toolChoice int

const (
	choiceNone     toolChoice = iota // no tools, or "none"
	choiceAuto                       // the model decides ("auto", or tools without tool_choice)
	choiceRequired                   // at least one call
	choiceNamed                      // a call of one named function
)

// toolDef is an offered function tool.
type toolDef struct {
	name   string
	params json.RawMessage
}

// chatPlan is what a chat request asks of the answer besides its text.
type chatPlan struct {
	tools    []toolDef
	choice   toolChoice
	named    string
	parallel bool // parallel_tool_calls is not false
	// afterTool reports a tool result among the messages after the last
	// assistant message: the model is answering a tool's output.
	afterTool bool
	// thinkingOff is chat_template_kwargs.enable_thinking false.
	thinkingOff   bool
	hideReasoning bool
	// trailing is the text of the user and tool messages after the last
	// assistant message, which script turns match on.
	trailing string
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	eng := s.begin(w, r, &req)
	if eng == nil {
		return
	}
	if len(req.Messages) == 0 {
		writeAPIError(w, badRequest("messages", "messages must contain at least one message"))
		return
	}
	plan, e := parsePlan(&req)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	ph := newPrefixHasher(eng.mc.BlockSize)
	prompt, tokens, e := chatPromptHashed(req.Messages, req.Tools, true, ph)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	g := genRequest{chat: true, e: eng, model: eng.mc.Name, prompt: prompt, promptTokens: tokens, hashes: ph.hashes(), hasher: ph,
		maxTokens: req.MaxCompletionTokens, seed: req.Seed, stops: req.Stop, ignoreEOS: req.IgnoreEOS, stream: req.Stream,
		plan: plan}
	if g.maxTokens == nil {
		g.maxTokens = req.MaxTokens
	}
	if e := s.commonChecks(&g, req.N, req.Temperature, req.StreamOptions); e != nil {
		writeAPIError(w, e)
		return
	}
	s.serveGeneration(w, r, g)
}

// parsePlan reads tools, tool_choice, parallel_tool_calls and the thinking
// switches, refusing what vLLM refuses in its words.
func parsePlan(req *chatRequest) (*chatPlan, *apiError) {
	p := &chatPlan{parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		hideReasoning: req.IncludeReasoning != nil && !*req.IncludeReasoning}
	if raw, ok := req.ChatTemplateKwargs["enable_thinking"]; ok {
		var on bool
		if json.Unmarshal(raw, &on) == nil && !on {
			p.thinkingOff = true
		}
	}
	for i, raw := range req.Tools {
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, badRequest("tools", "tools[%d] must be an object like {\"type\": \"function\", \"function\": {\"name\": ...}}", i)
		}
		if t.Type != "" && t.Type != "function" {
			return nil, badRequest("tools", "tools[%d].type must be \"function\", got %q", i, t.Type)
		}
		if t.Function == nil || t.Function.Name == "" {
			return nil, badRequest("tools", "tools[%d].function.name is required", i)
		}
		p.tools = append(p.tools, toolDef{name: t.Function.Name, params: t.Function.Parameters})
	}
	choice := req.ToolChoice
	switch {
	case len(choice) == 0 || string(choice) == "null":
		if len(p.tools) > 0 {
			p.choice = choiceAuto
		}
	case string(choice) == `"none"`:
		// vLLM drops the tools: the answer is text.
		p.tools = nil
	default:
		if len(p.tools) == 0 {
			return nil, badRequest("tool_choice", "When using `tool_choice`, `tools` must be set.")
		}
		var mode string
		if json.Unmarshal(choice, &mode) == nil {
			switch mode {
			case "auto":
				p.choice = choiceAuto
			case "required":
				p.choice = choiceRequired
			default:
				return nil, badRequest("tool_choice", `Invalid value for `+"`tool_choice`"+`: %s! Only named tools, "none", "auto" or "required" are supported.`, mode)
			}
			break
		}
		var named struct {
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(choice, &named) != nil || named.Function == nil {
			return nil, badRequest("tool_choice", "Expected field `function` in `tool_choice`. Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`")
		}
		found := false
		for _, t := range p.tools {
			found = found || t.name == named.Function.Name
		}
		if !found {
			return nil, badRequest("tool_choice", "The tool specified in `tool_choice` does not match any of the specified `tools`")
		}
		p.choice, p.named = choiceNamed, named.Function.Name
	}
	last := -1
	for i, m := range req.Messages {
		if m.Role == "assistant" {
			last = i
		}
	}
	var trailing []string
	for _, m := range req.Messages[last+1:] {
		if m.Role != "user" && m.Role != "tool" {
			continue
		}
		p.afterTool = p.afterTool || m.Role == "tool"
		if text, err := messageText(m.Content); err == nil && text != "" {
			trailing = append(trailing, text)
		}
	}
	p.trailing = strings.Join(trailing, "\n")
	return p, nil
}

// offers reports whether the request offers a tool of that name.
func (p *chatPlan) offers(name string) bool {
	for _, t := range p.tools {
		if t.name == name {
			return true
		}
	}
	return false
}

// chatPrompt renders chat messages the way the simulator's chat template
// does and counts their tokens, with the generation prompt when asked.
func chatPrompt(msgs []chatRequestMsg, tools []json.RawMessage, generationPrompt bool) (string, int, *apiError) {
	return chatPromptHashed(msgs, tools, generationPrompt, nil)
}

// chatPromptHashed is chatPrompt that also feeds the prompt's tokens to h
// (when not nil) in the order a chat template renders them: the tools (in
// the system turn), each message's framing and text, the generation
// prompt. It feeds exactly as many tokens as it counts.
func chatPromptHashed(msgs []chatRequestMsg, tools []json.RawMessage, generationPrompt bool, h *prefixHasher) (string, int, *apiError) {
	var prompt strings.Builder
	tokens := 0
	for _, t := range tools {
		tokens += countTextTokens(string(t))
		h.text(string(t))
	}
	for i, m := range msgs {
		text, err := messageText(m.Content)
		if err != nil {
			return "", 0, badRequest("messages", "messages[%d].content: %v", i, err)
		}
		prompt.WriteString(m.Role)
		prompt.WriteByte('\n')
		prompt.WriteString(text)
		prompt.WriteByte('\n')
		tokens += chatTokensPerMessage + countTextTokens(text) + countTextTokens(m.Name)
		if h != nil {
			h.special("im_start", 1)
			h.text(m.Role)
			h.special("nl", chatTokensPerMessage-2)
			h.text(m.Name)
			h.text(text)
		}
		if calls := string(m.ToolCalls); calls != "" && calls != "null" && calls != "[]" {
			// The template writes an assistant's calls into the prompt.
			prompt.WriteString(calls)
			prompt.WriteByte('\n')
			tokens += countTextTokens(calls)
			h.text(calls)
		}
	}
	if generationPrompt {
		// Hashed as the header of the assistant message that the answer
		// becomes in the next turn's prompt, as a chat template renders
		// both ("<|im_start|>assistant\n"), so that the answer's blocks are
		// that prompt's too.
		tokens += chatGenerationPrompt
		h.special("im_start", 1)
		h.text("assistant")
		h.special("nl", chatTokensPerMessage-2)
	}
	return prompt.String(), tokens, nil
}

// buildChat draws a chat answer: a script turn when one matches, otherwise
// reasoning (for reasoning models), then tool calls or text.
func (s *Server) buildChat(g *genRequest, seed uint64) (generation, *apiError) {
	p, mc := g.plan, g.e.mc
	limit := *g.maxTokens
	if sc := s.cfg.Script; sc != nil {
		turn, matched := sc.match(p, mc.Name)
		if matched {
			return turn.generation(p, mc, limit), nil
		}
		if sc.errorUnmatched() {
			return generation{}, badRequest("", "no turn of the simulator's script (%s) matches this request; the text it matches on is %q. Add a turn with a match: that this text contains, or set on_unmatched: generate",
				sc.name, truncateForError(p.trailing))
		}
	}
	a := &answer{hideReasoning: p.hideReasoning, details: mc.Reasoning}
	var reasoning []string
	if mc.Reasoning && !p.thinkingOff {
		reasoning = drawReasoning(seed, limit, g.explicitMax, mc.MeanReasoningTokens)
	}
	rest := limit - reasoningCost(reasoning)
	if calls := s.drawCalls(p, seed); len(calls) > 0 {
		a.forced = p.choice == choiceRequired || p.choice == choiceNamed
		out := assemble(reasoning, generation{}, calls, limit, a)
		// A call the model chose itself is made only when it fits; a
		// required one is cut off at max_tokens, as an engine would.
		if a.forced || out.finish == "tool_calls" {
			return out, nil
		}
		a = &answer{hideReasoning: p.hideReasoning, details: mc.Reasoning}
	}
	content := generate(seed, rest, g.ignoreEOS, mc.MeanOutputTokens, g.stops)
	if len(reasoning) == 0 && !mc.Reasoning {
		return content, nil
	}
	return assemble(reasoning, content, nil, limit, a), nil
}

// reasoningCost is the tokens reasoning units take with their think tags.
func reasoningCost(units []string) int {
	if len(units) == 0 {
		return 0
	}
	return len(units) + 2
}

// drawReasoning draws the reasoning words. Their number is exponentially
// distributed with the given mean, and bounded so that an answer follows:
// at most half of an output limit the client set (real models can spend a
// whole small budget thinking and answer nothing; the simulator leaves room
// for an answer so clients that cap max_tokens still see one), or all but
// one token of what the context leaves. Budgets too small for the think
// tags and one word give no reasoning.
func drawReasoning(seed uint64, maxTokens int, explicit bool, mean int) []string {
	budget := maxTokens - 1
	if explicit {
		budget = maxTokens / 2
	}
	if budget < 3 {
		return nil
	}
	rs := seed ^ reasoningSeedMix
	r := rand.New(rand.NewPCG(rs, rs^0x6a09e667f3bcc909))
	n := 1 + int(-float64(mean)*math.Log(1-r.Float64()))
	n = min(n, budget-2)
	words := generate(r.Uint64(), n, true, n, nil)
	units := make([]string, n)
	for i := range units {
		units[i] = words.delta(i, i+1)
	}
	return units
}

// drawCalls decides whether the answer calls tools and draws the calls:
// always when tool_choice requires one, with probability ToolCallRate when
// it is "auto", never after a tool result (the model answers it in text).
func (s *Server) drawCalls(p *chatPlan, seed uint64) []toolCall {
	if len(p.tools) == 0 || p.choice == choiceNone {
		return nil
	}
	ts := seed ^ toolSeedMix
	r := rand.New(rand.NewPCG(ts, ts^0xbb67ae8584caa73b))
	if p.choice == choiceAuto {
		rate := s.cfg.ToolCallRate
		if p.afterTool || rate <= 0 || r.Float64() >= rate {
			return nil
		}
	}
	n := 1
	if p.choice != choiceNamed && p.parallel && s.cfg.MaxParallelToolCalls > 1 {
		n = 1 + r.IntN(s.cfg.MaxParallelToolCalls)
	}
	calls := make([]toolCall, n)
	for i := range calls {
		t := p.tools[r.IntN(len(p.tools))]
		if p.choice == choiceNamed {
			for _, c := range p.tools {
				if c.name == p.named {
					t = c
				}
			}
		}
		calls[i] = toolCall{id: "chatcmpl-tool-" + randomHex(), name: t.name, args: genArguments(t.params, r)}
	}
	return calls
}

// truncateForError keeps error messages readable.
func truncateForError(s string) string {
	const limit = 200
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d more bytes)", len(s)-cut)
}

func isRuneStart(b byte) bool { return b&0xc0 != 0x80 }
