package sim

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// A chat answer's tokens are laid out in the order a reasoning model with a
// tool parser produces them: reasoning first (<think>, the reasoning words,
// </think>), then content, then tool calls. Each token shows at most one
// delta; the think tags and the tool-call framing show nothing, as vLLM's
// reasoning and tool parsers swallow them, but they still cost decode steps
// and count as completion tokens.

// toolCall is one call of an answer.
type toolCall struct {
	id   string
	name string
	args string // the arguments JSON shown (cut short when max_tokens ends the call)
}

// callStep is one tool-call token.
type callStep struct {
	call     int
	head     bool // the token completing the call's header: its id and name are shown
	from, to int  // bytes of the call's arguments the token shows; from == to shows nothing
}

// answer holds what a chat answer has besides plain content. A generation
// without one is plain text, laid out exactly as before tool calls and
// reasoning existed, so plain answers keep their shape and timing.
type answer struct {
	reasoning     string
	reasoningEnds []int // per reasoning token: byte offset in reasoning after it
	// reasoningTokens counts the tokens between the think tags, which is
	// what vLLM reports as completion_tokens_details.reasoning_tokens.
	reasoningTokens int
	hideReasoning   bool // include_reasoning: false
	calls           []toolCall
	steps           []callStep
	// forced marks a tool_choice that required the call: vLLM answers
	// content "" then, and null for calls the model chose itself.
	forced bool
	// details reports completion_tokens_details (the model has a
	// reasoning parser).
	details bool
}

// Token costs of the framing vLLM's hermes tool parser hides: "<tool_call>"
// is one special token before the JSON header, and the closing "}" and
// "</tool_call>" follow the arguments.
const (
	toolCallOpenTokens  = 1
	toolCallCloseTokens = 2
	// maxWordBytes and maxPunctBytes cap one output token of canned or
	// JSON text (see splitUnits).
	maxWordBytes  = 9
	maxPunctBytes = 3
)

// splitUnits cuts text into output tokens the way BPE vocabularies of the
// Qwen and Llama families roughly do: a word (letters and digits, with the
// space before it) is one token up to maxWordBytes, a run of punctuation
// one token up to maxPunctBytes, and newlines stand alone. Prose comes out
// near four bytes per token, as the simulator counts prompts, and JSON
// arguments near three and a half, so a tool call streams in many pieces.
func splitUnits(text string) []string {
	var out []string
	for len(text) > 0 {
		i := 0
		if text[0] == ' ' {
			i = 1
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		switch {
		case i == len(text):
		case r == '\n' || r == '\t' || (r == ' ' && i == 0):
			if i == 0 {
				i = size
			}
		case isWordRune(r):
			for i < len(text) {
				r, size := utf8.DecodeRuneInString(text[i:])
				if !isWordRune(r) || i+size > maxWordBytes && i > 1 {
					break
				}
				i += size
			}
		default:
			for i < len(text) {
				r, size := utf8.DecodeRuneInString(text[i:])
				if isWordRune(r) || r == ' ' || r == '\n' || r == '\t' || i+size > maxPunctBytes && i > 1 {
					break
				}
				i += size
			}
		}
		if i == 0 {
			i = size
		}
		out = append(out, text[:i])
		text = text[i:]
	}
	return out
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }

// plainGeneration lays canned text out as content tokens.
func plainGeneration(text string) generation {
	g := generation{finish: "stop"}
	var b strings.Builder
	for _, u := range splitUnits(text) {
		b.WriteString(u)
		g.ends = append(g.ends, b.Len())
	}
	g.text = b.String()
	g.tokens = len(g.ends)
	return g
}

// assemble lays out reasoning units, content and tool calls as one answer
// and cuts it at maxTokens, as an engine stops mid-way: a cut in the
// reasoning leaves no content, a cut in a call leaves its arguments
// unfinished, and the finish reason becomes "length".
func assemble(reasoning []string, content generation, calls []toolCall, maxTokens int, a *answer) generation {
	if len(reasoning) > 0 {
		a.reasoningEnds = append(a.reasoningEnds, 0) // <think>
		var b strings.Builder
		for _, u := range reasoning {
			b.WriteString(u)
			a.reasoningEnds = append(a.reasoningEnds, b.Len())
		}
		a.reasoningEnds = append(a.reasoningEnds, b.Len()) // </think>
		a.reasoning = b.String()
		a.reasoningTokens = len(reasoning)
	}
	for ci, c := range calls {
		head := toolCallOpenTokens + countTextTokens(`{"name": "`+c.name+`", "arguments": `)
		for range head - 1 {
			a.steps = append(a.steps, callStep{call: ci})
		}
		a.steps = append(a.steps, callStep{call: ci, head: true})
		off := 0
		for _, u := range splitUnits(c.args) {
			a.steps = append(a.steps, callStep{call: ci, from: off, to: off + len(u)})
			off += len(u)
		}
		for range toolCallCloseTokens {
			a.steps = append(a.steps, callStep{call: ci, from: off, to: off})
		}
	}
	a.calls = calls
	g := content
	g.ans = a
	r, c := len(a.reasoningEnds), len(g.ends)
	total := r + c + len(a.steps)
	switch {
	case total <= maxTokens:
		if len(calls) > 0 {
			g.finish, g.stopReason = "tool_calls", nil
		}
	case maxTokens <= r:
		a.reasoningEnds = a.reasoningEnds[:maxTokens]
		if maxTokens > 0 {
			a.reasoning = a.reasoning[:a.reasoningEnds[maxTokens-1]]
		}
		a.reasoningTokens = min(max(maxTokens-1, 0), a.reasoningTokens)
		g.text, g.ends, a.calls, a.steps = "", nil, nil, nil
		g.finish, g.stopReason = "length", nil
	case maxTokens <= r+c:
		g.ends = g.ends[:maxTokens-r]
		g.text = g.text[:min(len(g.text), g.ends[len(g.ends)-1])]
		a.calls, a.steps = nil, nil
		g.finish, g.stopReason = "length", nil
	default:
		a.steps = a.steps[:maxTokens-r-c]
		shown := make([]int, len(calls))
		seen := make([]bool, len(calls))
		for _, s := range a.steps {
			seen[s.call] = seen[s.call] || s.head
			shown[s.call] = max(shown[s.call], s.to)
		}
		kept := a.calls[:0:0]
		for i, call := range calls {
			if seen[i] {
				call.args = call.args[:shown[i]]
				kept = append(kept, call)
			}
		}
		// Calls are laid out in order, so only the last one can lose its
		// header; its remaining steps show nothing (see chatDelta).
		a.calls = kept
		g.finish, g.stopReason = "length", nil
	}
	g.tokens = len(a.reasoningEnds) + len(g.ends) + len(a.steps)
	return g
}

// chatDelta returns the delta token i shows in a stream, and false when
// the token shows nothing (think tags, tool-call framing, hidden
// reasoning).
func (g *generation) chatDelta(i int) (chatDelta, bool) {
	a := g.ans
	r := len(a.reasoningEnds)
	if i < r {
		if a.hideReasoning {
			return chatDelta{}, false
		}
		from := 0
		if i > 0 {
			from = a.reasoningEnds[i-1]
		}
		if a.reasoningEnds[i] == from {
			return chatDelta{}, false
		}
		s := a.reasoning[from:a.reasoningEnds[i]]
		return chatDelta{ReasoningContent: &s}, true
	}
	j := i - r
	if j < len(g.ends) {
		s := g.delta(j, j+1)
		return chatDelta{Content: &s}, true
	}
	st := a.steps[j-len(g.ends)]
	if st.call >= len(a.calls) {
		return chatDelta{}, false
	}
	c := a.calls[st.call]
	if st.head {
		return chatDelta{ToolCalls: []deltaToolCall{{ID: c.id, Type: "function", Index: st.call,
			Function: deltaFunction{Name: c.name}}}}, true
	}
	if st.to <= st.from {
		return chatDelta{}, false
	}
	args := c.args[st.from:st.to]
	return chatDelta{ToolCalls: []deltaToolCall{{Index: st.call, Function: deltaFunction{Arguments: &args}}}}, true
}

// message is the non-streaming assistant message.
func (g *generation) message() chatMessage {
	m := chatMessage{Role: "assistant", ToolCalls: []toolCallWire{}}
	a := g.ans
	text := g.text
	if a == nil {
		m.Content = &text
		return m
	}
	switch {
	case len(g.ends) > 0:
		m.Content = &text
	case len(a.calls) > 0 && a.forced:
		m.Content = new(string)
	case len(a.calls) == 0 && len(a.reasoningEnds) == 0:
		m.Content = &text
	}
	if len(a.reasoningEnds) > 0 && !a.hideReasoning {
		r := a.reasoning
		m.ReasoningContent = &r
	}
	for _, c := range a.calls {
		m.ToolCalls = append(m.ToolCalls, toolCallWire{ID: c.id, Type: "function",
			Function: functionWire{Name: c.name, Arguments: c.args}})
	}
	return m
}

// usage returns the usage of the generation for a prompt of n tokens.
func (g *generation) usage(promptTokens int) usageInfo {
	u := usageInfo{PromptTokens: promptTokens, CompletionTokens: g.tokens, TotalTokens: promptTokens + g.tokens}
	if g.ans != nil && g.ans.details {
		u.CompletionTokensDetails = &completionDetails{ReasoningTokens: g.ans.reasoningTokens}
	}
	return u
}
