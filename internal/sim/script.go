package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Script is a list of canned assistant turns for chat requests (see
// "Scripted mode" in the package documentation). It is safe for concurrent
// use and may be shared by several servers: its sequential turns are
// handed out once each, in order, across all of them.
type Script struct {
	name        string
	onUnmatched string
	turns       []*Turn // every turn, in file order
	keyed       []*Turn // turns with match:, tried first, reusable
	sequential  []*Turn // turns without match:, handed out once each

	mu   sync.Mutex
	next int // index into sequential
}

// Turn is one canned assistant answer and the conditions under which it is
// given.
type Turn struct {
	// Match is a substring of the text of the user and tool messages after
	// the last assistant message; empty makes the turn sequential.
	Match string
	// WhenTool names tools the request must offer.
	WhenTool []string
	// Model limits the turn to one served model name.
	Model string
	// AfterTool, when set, requires (true) or forbids (false) a tool result
	// among the messages after the last assistant message.
	AfterTool *bool
	// Reasoning is sent as reasoning_content before the answer.
	Reasoning string
	// Text is the answer's content.
	Text string
	// ToolCalls are the calls the answer makes.
	ToolCalls []ScriptCall
	line      int
}

// ScriptCall is a canned tool call.
type ScriptCall struct {
	// ID is the call id; empty draws "chatcmpl-tool-<32 hex>" as vLLM does.
	ID string
	// Name is the function called.
	Name string
	// Arguments is the arguments JSON object, as sent.
	Arguments string
}

// Unmatched-request policies of a script.
const (
	UnmatchedGenerate = "generate"
	UnmatchedError    = "error"
)

// LoadScript reads a script file (YAML or JSON).
func LoadScript(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read script: %w", err)
	}
	return ParseScript(b, path)
}

// ParseScript reads a script; name appears in error messages.
func ParseScript(data []byte, name string) (*Script, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("script %s is empty: give a list of turns (see llmgate sim --help)", name)
		}
		return nil, fmt.Errorf("script %s: %w", name, err)
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	var f scriptFile
	var err error
	switch doc.Kind {
	case yaml.SequenceNode: // a bare list of turns
		err = doc.Decode(&f.Turns)
	case yaml.MappingNode:
		if err = checkKeys(doc, "the script", "on_unmatched", "turns"); err == nil {
			err = doc.Decode(&f)
		}
	default:
		err = fmt.Errorf("line %d: a script is a list of turns, or a mapping with turns: and on_unmatched:", doc.Line)
	}
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", name, err)
	}
	sc := &Script{name: name, onUnmatched: f.OnUnmatched}
	switch sc.onUnmatched {
	case "":
		sc.onUnmatched = UnmatchedGenerate
	case UnmatchedGenerate, UnmatchedError:
	default:
		return nil, fmt.Errorf("script %s: on_unmatched must be %q or %q, got %q", name, UnmatchedGenerate, UnmatchedError, f.OnUnmatched)
	}
	if len(f.Turns) == 0 {
		return nil, fmt.Errorf("script %s has no turns", name)
	}
	for i, tf := range f.Turns {
		t, err := tf.turn()
		if err != nil {
			return nil, fmt.Errorf("script %s: turn %d (line %d): %w", name, i+1, tf.line, err)
		}
		sc.turns = append(sc.turns, t)
		if t.Match != "" {
			sc.keyed = append(sc.keyed, t)
		} else {
			sc.sequential = append(sc.sequential, t)
		}
	}
	return sc, nil
}

// Turns returns the script's turns in file order.
func (sc *Script) Turns() []Turn {
	out := make([]Turn, len(sc.turns))
	for i, t := range sc.turns {
		out[i] = *t
	}
	return out
}

// OnUnmatched is UnmatchedGenerate or UnmatchedError.
func (sc *Script) OnUnmatched() string { return sc.onUnmatched }

func (sc *Script) errorUnmatched() bool { return sc.onUnmatched == UnmatchedError }

// match returns the turn that answers a request: the first turn with a
// match: found in the request's trailing text whose conditions hold, else
// the next sequential turn if its conditions hold (it is then used up).
func (sc *Script) match(p *chatPlan, model string) (*Turn, bool) {
	for _, t := range sc.keyed {
		if strings.Contains(p.trailing, t.Match) && t.fits(p, model) {
			return t, true
		}
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.next < len(sc.sequential) {
		if t := sc.sequential[sc.next]; t.fits(p, model) {
			sc.next++
			return t, true
		}
	}
	return nil, false
}

// fits checks a turn's conditions other than match:. A turn that calls
// tools fits only requests offering them, so one script can hold the same
// step for clients whose tools differ (Claude Code's Read, opencode's read).
func (t *Turn) fits(p *chatPlan, model string) bool {
	if t.Model != "" && t.Model != model {
		return false
	}
	if t.AfterTool != nil && *t.AfterTool != p.afterTool {
		return false
	}
	for _, name := range t.WhenTool {
		if !p.offers(name) {
			return false
		}
	}
	for _, c := range t.ToolCalls {
		if !p.offers(c.Name) {
			return false
		}
	}
	return true
}

// generation lays the turn out as an answer, cut at maxTokens. Reasoning
// is left out when the request turned thinking off.
func (t *Turn) generation(p *chatPlan, mc ModelConfig, maxTokens int) generation {
	a := &answer{hideReasoning: p.hideReasoning, details: mc.Reasoning,
		forced: p.choice == choiceRequired || p.choice == choiceNamed}
	var reasoning []string
	if !p.thinkingOff {
		reasoning = splitUnits(t.Reasoning)
	}
	content := generation{finish: "stop"}
	if t.Text != "" {
		content = plainGeneration(t.Text)
	}
	var calls []toolCall
	for _, c := range t.ToolCalls {
		id := c.ID
		if id == "" {
			id = "chatcmpl-tool-" + randomHex()
		}
		calls = append(calls, toolCall{id: id, name: c.Name, args: c.Arguments})
	}
	return assemble(reasoning, content, calls, maxTokens, a)
}

// The file format. Unknown keys are refused with their line, so a misspelt
// key is an error rather than a turn that silently never matches.

type scriptFile struct {
	OnUnmatched string     `yaml:"on_unmatched"`
	Turns       []turnFile `yaml:"turns"`
}

type turnFile struct {
	Match     string     `yaml:"match"`
	WhenTool  names      `yaml:"when_tool"`
	Model     string     `yaml:"model"`
	AfterTool *bool      `yaml:"after_tool"`
	Reasoning string     `yaml:"reasoning"`
	Text      string     `yaml:"text"`
	ToolCalls []callFile `yaml:"tool_calls"`
	line      int
}

func (t *turnFile) UnmarshalYAML(n *yaml.Node) error {
	if err := checkKeys(n, "a turn", "match", "when_tool", "model", "after_tool", "reasoning", "text", "tool_calls"); err != nil {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "tool_calls" || n.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, c := range n.Content[i+1].Content {
			if err := checkKeys(c, "a tool call", "id", "name", "arguments"); err != nil {
				return err
			}
		}
	}
	type plain turnFile
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*t = turnFile(p)
	t.line = n.Line
	return nil
}

type callFile struct {
	ID        string    `yaml:"id"`
	Name      string    `yaml:"name"`
	Arguments yaml.Node `yaml:"arguments"`
}

// names is one name or a list of names.
type names []string

func (ns *names) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*ns = names{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return fmt.Errorf("line %d: when_tool is a tool name or a list of names", n.Line)
	}
	*ns = list
	return nil
}

// checkKeys refuses mapping keys outside allowed, naming the key's line.
func checkKeys(n *yaml.Node, what string, allowed ...string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s must be a mapping", n.Line, what)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		ok := false
		for _, a := range allowed {
			ok = ok || k.Value == a
		}
		if !ok {
			return fmt.Errorf("line %d: unknown key %q in %s (known: %s)", k.Line, k.Value, what, strings.Join(allowed, ", "))
		}
	}
	return nil
}

func (tf turnFile) turn() (*Turn, error) {
	t := &Turn{Match: tf.Match, WhenTool: tf.WhenTool, Model: tf.Model, AfterTool: tf.AfterTool,
		Reasoning: tf.Reasoning, Text: tf.Text, line: tf.line}
	if t.Text == "" && t.Reasoning == "" && len(tf.ToolCalls) == 0 {
		return nil, errors.New("a turn needs text:, reasoning: or tool_calls:")
	}
	for i, c := range tf.ToolCalls {
		if strings.TrimSpace(c.Name) == "" {
			return nil, fmt.Errorf("tool_calls[%d] has no name", i)
		}
		args, err := argumentsJSON(&c.Arguments)
		if err != nil {
			return nil, fmt.Errorf("tool_calls[%d] (%s): %w", i, c.Name, err)
		}
		t.ToolCalls = append(t.ToolCalls, ScriptCall{ID: c.ID, Name: c.Name, Arguments: args})
	}
	return t, nil
}

// argumentsJSON turns a call's arguments into the JSON text sent: a mapping
// keeps its key order and gets Python json.dumps spacing, as vLLM's tool
// parsers write it; a string must already be a JSON object and is sent as
// written; no arguments are {}.
func argumentsJSON(n *yaml.Node) (string, error) {
	switch n.Kind {
	case 0:
		return "{}", nil
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "{}", nil
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(n.Value), &obj); err != nil || obj == nil {
			return "", fmt.Errorf("line %d: arguments must be a mapping or a string holding a JSON object", n.Line)
		}
		return n.Value, nil
	case yaml.MappingNode:
		var b bytes.Buffer
		if err := nodeJSON(&b, n); err != nil {
			return "", err
		}
		return pyJSON(b.Bytes()), nil
	}
	return "", fmt.Errorf("line %d: arguments must be a mapping or a string holding a JSON object", n.Line)
}

// nodeJSON writes a YAML node as compact JSON, keeping mapping order.
func nodeJSON(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.AliasNode:
		return nodeJSON(b, n.Alias)
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k, err := marshal(n.Content[i].Value)
			if err != nil {
				return err
			}
			b.Write(k)
			b.WriteByte(':')
			if err := nodeJSON(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := nodeJSON(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any = n.Value
		switch n.Tag {
		case "!!int", "!!float", "!!bool", "!!null":
			if err := n.Decode(&v); err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
		}
		out, err := marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		b.Write(out)
	default:
		return fmt.Errorf("line %d: unexpected YAML in arguments", n.Line)
	}
	return nil
}
