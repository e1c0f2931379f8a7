package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/mail"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

// chatAnswer is what tests read from a non-streaming chat response.
type chatAnswer struct {
	Choices []struct {
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens            int `json:"prompt_tokens"`
		CompletionTokens        int `json:"completion_tokens"`
		TotalTokens             int `json:"total_tokens"`
		CompletionTokensDetails *struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	} `json:"usage"`
}

// quickConfig decodes a token every 20µs so tests that draw many long
// answers stay fast; the timing model is not what they check.
func quickConfig() Config {
	cfg := fastConfig()
	cfg.Models[0].DecodeBase = 20 * time.Microsecond
	cfg.Models[0].MeanOutputTokens = 8
	cfg.Models[0].MaxNumSeqs = 16
	return cfg
}

func chat(t *testing.T, url, body string) chatAnswer {
	t.Helper()
	code, _, b := post(t, url+"/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var a chatAnswer
	if err := json.Unmarshal(b, &a); err != nil || len(a.Choices) != 1 {
		t.Fatalf("bad answer %s: %v", b, err)
	}
	return a
}

// toolSchemas exercise the schema features tool definitions use.
var toolSchemas = map[string]string{
	"get_weather": `{"type":"object","properties":{"location":{"type":"string","minLength":3},
		"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},
		"required":["location","unit","days"],"additionalProperties":false}`,
	"create_event": `{"type":"object","required":["title","when","attendees","options"],"properties":{
		"title":{"type":"string","maxLength":12},
		"when":{"type":"string","format":"date-time"},
		"attendees":{"type":"array","minItems":2,"maxItems":4,"uniqueItems":true,
			"items":{"type":"object","required":["email","id"],"properties":{"email":{"type":"string","format":"email"},"id":{"type":"string","format":"uuid"}}}},
		"options":{"type":"object","required":["priority","ratio","tags","link"],"properties":{
			"priority":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":5,"multipleOf":2},
			"ratio":{"type":"number","minimum":0.5,"maximum":0.75},
			"tags":{"type":["array","null"],"items":{"$ref":"#/$defs/tag"}},
			"link":{"type":"string","format":"uri"},
			"host":{"type":"string","format":"ipv4"}}}},
		"$defs":{"tag":{"type":"string","enum":["red","green","blue"]}}}`,
	"bash": `{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"},"minItems":1},
		"timeout_ms":{"type":"integer"},"workdir":{"type":"string"}},"required":["command"]}`,
	"choose": `{"type":"object","required":["target"],"properties":{"target":{"anyOf":[{"type":"null"},
		{"type":"object","required":["kind","count"],"properties":{"kind":{"const":"file"},"count":{"type":"number","multipleOf":0.25,"minimum":1,"maximum":2}}}]},
		"mode":{"allOf":[{"type":"string"},{"enum":["fast","slow"]}]}},"minProperties":2}`,
	"noargs": `{"type":"object","properties":{}}`,
}

func toolsJSON(names ...string) string {
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf(`{"type":"function","function":{"name":%q,"description":"test tool","parameters":%s}}`, n, toolSchemas[n]))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// checkArguments validates arguments against the tool's schema with an
// independent validator, plus the string formats it does not check.
func checkArguments(t *testing.T, name, args string) {
	t.Helper()
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(toolSchemas[name]), &s); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		t.Fatalf("%s arguments are not JSON: %q", name, args)
	}
	if err := rs.Validate(v); err != nil {
		t.Errorf("%s arguments %s fail the schema: %v", name, args, err)
	}
	if name != "create_event" {
		return
	}
	m := v.(map[string]any)
	if _, err := time.Parse(time.RFC3339, m["when"].(string)); err != nil {
		t.Errorf("date-time %q: %v", m["when"], err)
	}
	for _, a := range m["attendees"].([]any) {
		at := a.(map[string]any)
		if _, err := mail.ParseAddress(at["email"].(string)); err != nil {
			t.Errorf("email %q: %v", at["email"], err)
		}
		if id := at["id"].(string); len(id) != 36 || id[14] != '4' {
			t.Errorf("uuid %q", id)
		}
	}
	opts := m["options"].(map[string]any)
	if u, err := url.Parse(opts["link"].(string)); err != nil || u.Scheme != "https" {
		t.Errorf("uri %q", opts["link"])
	}
	if h, ok := opts["host"]; ok {
		if _, err := netip.ParseAddr(h.(string)); err != nil {
			t.Errorf("ipv4 %q", h)
		}
	}
}

func TestTools_ForcedChoiceAnswersWithArgumentsValidAgainstTheSchema(t *testing.T) {
	_, url := startServer(t, quickConfig())
	all := toolsJSON("get_weather", "create_event", "bash", "choose", "noargs")
	seen := map[string]int{}
	for seed := range 12 {
		for _, choice := range []string{`"required"`, `{"type":"function","function":{"name":"create_event"}}`} {
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"plan my week"}],"tools":%s,"tool_choice":%s,"seed":%d}`, all, choice, seed)
			a := chat(t, url, body)
			c := a.Choices[0]
			if c.FinishReason != "tool_calls" || c.Message.Content == nil || *c.Message.Content != "" || len(c.Message.ToolCalls) != 1 {
				t.Fatalf("%s: finish %q content %v calls %d", choice, c.FinishReason, c.Message.Content, len(c.Message.ToolCalls))
			}
			tc := c.Message.ToolCalls[0]
			if !strings.HasPrefix(tc.ID, "chatcmpl-tool-") || len(tc.ID) != len("chatcmpl-tool-")+32 || tc.Type != "function" {
				t.Errorf("call id %q type %q", tc.ID, tc.Type)
			}
			if strings.HasPrefix(choice, "{") && tc.Function.Name != "create_event" {
				t.Errorf("named choice called %s", tc.Function.Name)
			}
			checkArguments(t, tc.Function.Name, tc.Function.Arguments)
			seen[tc.Function.Name]++
			if a.Usage.CompletionTokens <= countTextTokens(tc.Function.Arguments) ||
				a.Usage.TotalTokens != a.Usage.PromptTokens+a.Usage.CompletionTokens {
				t.Errorf("usage %+v does not count the call (%d argument bytes)", a.Usage, len(tc.Function.Arguments))
			}
		}
	}
	if len(seen) != 5 {
		t.Errorf("required choice called %v; want every tool drawn at some seed", seen)
	}
}

func TestTools_GeneratedArgumentsValidateForManyDraws(t *testing.T) {
	for name, schema := range toolSchemas {
		r := rand.New(rand.NewPCG(1, 2))
		for range 200 {
			checkArguments(t, name, genArguments(json.RawMessage(schema), r))
		}
	}
	// Python's json.dumps spacing, as vLLM's parsers write arguments.
	if got := pyJSON([]byte(`{"a":[1,"x, y: z"],"b":{"c":null}}`)); got != `{"a": [1, "x, y: z"], "b": {"c": null}}` {
		t.Errorf("pyJSON = %s", got)
	}
}

func TestTools_StreamedCallHasVLLMDeltas(t *testing.T) {
	_, url := startServer(t, quickConfig())
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":"weather?"}],"tools":%s,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"seed":3,"stream":true,"stream_options":{"include_usage":true}}`,
		toolsJSON("get_weather", "bash"))
	res := stream(t, url+"/v1/chat/completions", body)
	if !res.done || len(res.events) < 5 {
		t.Fatalf("%d events, done %v", len(res.events), res.done)
	}
	type delta struct {
		Role      string  `json:"role"`
		Content   *string `json:"content"`
		ToolCalls []struct {
			ID       *string `json:"id"`
			Type     *string `json:"type"`
			Index    *int    `json:"index"`
			Function struct {
				Name      *string `json:"name"`
				Arguments *string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	type chunk struct {
		Choices []struct {
			Delta        delta   `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	var chunks []chunk
	for _, ev := range res.events {
		var one chunk
		if err := json.Unmarshal(ev.data, &one); err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, one)
	}
	if d := chunks[0].Choices[0].Delta; d.Role != "assistant" || d.Content == nil || *d.Content != "" {
		t.Errorf("first chunk %s", res.events[0].data)
	}
	head := chunks[1].Choices[0].Delta
	if len(head.ToolCalls) != 1 || head.ToolCalls[0].ID == nil || !strings.HasPrefix(*head.ToolCalls[0].ID, "chatcmpl-tool-") ||
		head.ToolCalls[0].Type == nil || *head.ToolCalls[0].Type != "function" || head.ToolCalls[0].Index == nil ||
		head.ToolCalls[0].Function.Name == nil || *head.ToolCalls[0].Function.Name != "get_weather" || head.Content != nil {
		t.Errorf("first tool delta %s", res.events[1].data)
	}
	var args strings.Builder
	pieces := 0
	last := len(chunks) - 1 // the usage chunk
	for i, c := range chunks[2:last] {
		if len(c.Choices) != 1 {
			t.Fatalf("chunk %d has %d choices", i+2, len(c.Choices))
		}
		d := c.Choices[0].Delta
		if d.Content != nil || d.Role != "" {
			t.Errorf("chunk %d mixes content into a tool call: %s", i+2, res.events[i+2].data)
		}
		for _, tc := range d.ToolCalls {
			if tc.ID != nil || tc.Function.Name != nil || tc.Index == nil || *tc.Index != 0 {
				t.Errorf("later delta repeats the header: %s", res.events[i+2].data)
			}
			if tc.Function.Arguments != nil {
				args.WriteString(*tc.Function.Arguments)
				pieces++
			}
		}
	}
	if pieces < 2 {
		t.Errorf("arguments came in %d pieces, want several", pieces)
	}
	checkArguments(t, "get_weather", args.String())
	fin := chunks[last-1].Choices[0].FinishReason
	if fin == nil || *fin != "tool_calls" {
		t.Errorf("finish chunk %s", res.events[last-1].data)
	}
	// The same seeded request, not streamed, gives the same call and usage.
	a := chat(t, url, strings.Replace(body, `"stream":true,"stream_options":{"include_usage":true}`, `"stream":false`, 1))
	if got := a.Choices[0].Message.ToolCalls[0].Function.Arguments; got != args.String() {
		t.Errorf("streamed arguments %s, non-streamed %s", args.String(), got)
	}
	if u := chunks[last].Usage; u == nil || u.CompletionTokens != a.Usage.CompletionTokens {
		t.Errorf("stream usage %+v, non-stream %d", u, a.Usage.CompletionTokens)
	}
}

func TestTools_AutoCallsAtTheConfiguredRateDeterministically(t *testing.T) {
	cfg := quickConfig()
	cfg.ToolCallRate = 0.5
	_, url := startServer(t, cfg)
	calls := 0
	for i := range 40 {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"question %d"}],"tools":%s,"temperature":0,"max_tokens":300}`, i, toolsJSON("bash"))
		first := chat(t, url, body)
		again := chat(t, url, body)
		if len(first.Choices[0].Message.ToolCalls) != len(again.Choices[0].Message.ToolCalls) {
			t.Fatalf("greedy request %d decided differently on a second run", i)
		}
		if n := len(first.Choices[0].Message.ToolCalls); n > 0 {
			calls++
			c := first.Choices[0]
			if c.FinishReason != "tool_calls" || c.Message.Content != nil {
				t.Errorf("auto call: finish %q, content %v (vLLM sends null)", c.FinishReason, c.Message.Content)
			}
			checkArguments(t, "bash", c.Message.ToolCalls[0].Function.Arguments)
		} else if c := first.Choices[0]; c.FinishReason == "tool_calls" || c.Message.Content == nil {
			t.Errorf("text answer: finish %q content %v", c.FinishReason, c.Message.Content)
		}
	}
	if calls < 10 || calls > 30 {
		t.Errorf("%d of 40 requests called a tool at rate 0.5", calls)
	}

	// The default rate is 0: tools alone never trigger a call.
	_, plain := startServer(t, quickConfig())
	for i := range 10 {
		a := chat(t, plain, fmt.Sprintf(`{"messages":[{"role":"user","content":"q%d"}],"tools":%s,"max_tokens":20}`, i, toolsJSON("bash")))
		if len(a.Choices[0].Message.ToolCalls) != 0 {
			t.Fatal("rate 0 produced a tool call")
		}
	}
}

func TestTools_AnswerToAToolResultIsText(t *testing.T) {
	cfg := quickConfig()
	cfg.ToolCallRate = 1
	_, url := startServer(t, cfg)
	ask := fmt.Sprintf(`{"messages":[{"role":"user","content":"list files"}],"tools":%s,"seed":1}`, toolsJSON("bash"))
	if a := chat(t, url, ask); len(a.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("rate 1 did not call: %+v", a.Choices[0])
	}
	answer := fmt.Sprintf(`{"messages":[{"role":"user","content":"list files"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\": [\"ls\"]}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"a.txt b.txt"}],"tools":%s,"seed":1,"max_tokens":30}`, toolsJSON("bash"))
	a := chat(t, url, answer)
	if c := a.Choices[0]; len(c.Message.ToolCalls) != 0 || c.Message.Content == nil || *c.Message.Content == "" || c.FinishReason == "tool_calls" {
		t.Errorf("after a tool result: %+v", c)
	}
	// The call in the history counts as prompt tokens.
	withoutCalls := chat(t, url, strings.Replace(answer, `"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\": [\"ls\"]}"}}]`, `"tool_calls":[]`, 1))
	if a.Usage.PromptTokens <= withoutCalls.Usage.PromptTokens {
		t.Errorf("prompt tokens %d with the call in history, %d without", a.Usage.PromptTokens, withoutCalls.Usage.PromptTokens)
	}
}

func TestTools_ParallelCallsOnlyWhenConfiguredAndAllowed(t *testing.T) {
	cfg := quickConfig()
	cfg.MaxParallelToolCalls = 3
	_, url := startServer(t, cfg)
	multi := 0
	for seed := range 16 {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"do things"}],"tools":%s,"tool_choice":"required","seed":%d}`, toolsJSON("get_weather", "bash"), seed)
		a := chat(t, url, body)
		n := len(a.Choices[0].Message.ToolCalls)
		if n < 1 || n > 3 {
			t.Fatalf("%d calls with max 3", n)
		}
		ids := map[string]bool{}
		for _, c := range a.Choices[0].Message.ToolCalls {
			checkArguments(t, c.Function.Name, c.Function.Arguments)
			ids[c.ID] = true
		}
		if len(ids) != n {
			t.Errorf("call ids repeat: %v", ids)
		}
		if n > 1 {
			multi++
		}
		single := chat(t, url, strings.Replace(body, `"seed"`, `"parallel_tool_calls":false,"seed"`, 1))
		if len(single.Choices[0].Message.ToolCalls) != 1 {
			t.Errorf("parallel_tool_calls false gave %d calls", len(single.Choices[0].Message.ToolCalls))
		}
	}
	if multi == 0 {
		t.Error("no answer held parallel calls")
	}
	// Off by default.
	_, def := startServer(t, quickConfig())
	for seed := range 10 {
		a := chat(t, def, fmt.Sprintf(`{"messages":[{"role":"user","content":"x"}],"tools":%s,"tool_choice":"required","seed":%d}`, toolsJSON("bash"), seed))
		if len(a.Choices[0].Message.ToolCalls) != 1 {
			t.Fatal("parallel calls without MaxParallelToolCalls")
		}
	}
}

func TestTools_MaxTokensCutsAForcedCallMidway(t *testing.T) {
	_, url := startServer(t, quickConfig())
	a := chat(t, url, fmt.Sprintf(`{"messages":[{"role":"user","content":"x"}],"tools":%s,"tool_choice":"required","seed":2,"max_tokens":16}`, toolsJSON("create_event")))
	c := a.Choices[0]
	if c.FinishReason != "length" || len(c.Message.ToolCalls) != 1 || a.Usage.CompletionTokens != 16 {
		t.Fatalf("cut call: finish %q calls %d usage %+v", c.FinishReason, len(c.Message.ToolCalls), a.Usage)
	}
	if args := c.Message.ToolCalls[0].Function.Arguments; json.Valid([]byte(args)) || !strings.HasPrefix(args, "{") {
		t.Errorf("a call cut by max_tokens should hold the start of its arguments, got %q", args)
	}
}

func TestTools_InvalidToolChoiceIs400InVLLMWords(t *testing.T) {
	_, url := startServer(t, quickConfig())
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`:                                                                       "When using `tool_choice`, `tools` must be set.",
		`{"messages":[{"role":"user","content":"x"}],"tools":` + toolsJSON("bash") + `,"tool_choice":{"type":"function","function":{"name":"nope"}}}`: "does not match any of the specified `tools`",
		`{"messages":[{"role":"user","content":"x"}],"tools":` + toolsJSON("bash") + `,"tool_choice":"always"}`:                                       `Invalid value for ` + "`tool_choice`" + `: always!`,
		`{"messages":[{"role":"user","content":"x"}],"tools":` + toolsJSON("bash") + `,"tool_choice":{"type":"function"}}`:                            "Expected field `function` in `tool_choice`",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"description":"no name"}}]}`:                             "tools[0].function.name is required",
	} {
		code, _, b := post(t, url+"/v1/chat/completions", body)
		if e := decodeError(t, b); code != 400 || e.Type != "BadRequestError" || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %d %s, want %q", body, code, b, want)
		}
	}
	// tool_choice "none" drops the tools, as vLLM does: text even when forced elsewhere.
	cfg := quickConfig()
	cfg.ToolCallRate = 1
	_, always := startServer(t, cfg)
	a := chat(t, always, `{"messages":[{"role":"user","content":"x"}],"tools":`+toolsJSON("bash")+`,"tool_choice":"none","max_tokens":5}`)
	if len(a.Choices[0].Message.ToolCalls) != 0 {
		t.Error(`tool_choice "none" called a tool`)
	}
}

// Hostile schemas cannot make the simulator allocate without bound, spin,
// or panic: item counts, string lengths and the values of one draw are
// capped.
func TestGenArguments_HostileSchemasAreBounded(t *testing.T) {
	for _, schema := range []string{
		`{"type":"object","properties":{"a":{"type":"array","minItems":1e9,"items":{"type":"string"}}},"required":["a"]}`,
		`{"type":"object","properties":{"s":{"type":"string","maxLength":-1}},"required":["s"]}`,
		`{"type":"object","properties":{"s":{"type":"string","minLength":200000}},"required":["s"]}`,
		`{"$defs":{"n":{"type":"array","minItems":20,"items":{"$ref":"#/$defs/n"}}},"type":"object","properties":{"t":{"$ref":"#/$defs/n"}},"required":["t"]}`,
	} {
		start := time.Now()
		out := genArguments(json.RawMessage(schema), rand.New(rand.NewPCG(1, 2)))
		if d := time.Since(start); d > 5*time.Second || len(out) > 4<<20 {
			t.Errorf("schema %s: %d bytes of arguments in %v", schema, len(out), d)
		}
		if !json.Valid([]byte(out)) {
			t.Errorf("schema %s: arguments are not JSON: %.200s", schema, out)
		}
	}
}
