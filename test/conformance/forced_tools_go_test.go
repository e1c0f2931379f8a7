package conformance

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// Forced tool calls, the round trip an agent makes: the client offers tools
// and forces a call (chat and Responses tool_choice "required" or a named
// function; Anthropic {"type":"any"} or {"type":"tool"}), the official SDK
// parses the call (its stream accumulator when streaming), the client sends
// the result back in its API's own way and the model answers in text. Each
// API runs on the simulator (OpenAI dialect: arguments drawn from the
// offered JSON schema, vLLM-style deltas) and on the scripted Anthropic
// upstream's "forced" scenario (tool_use blocks built from input_schema,
// input_json_delta streaming), streamed and not, so every translation
// direction carries a tool call both ways.

// forcedBackends are the upstreams of the forced-tool tests; forcedScenario
// is the scripted Anthropic upstream's model for them (see forcedTurn).
var forcedBackends = []backendKind{simBackend, anthropicBackend}

const forcedScenario = "forced"

// forcedMaxTokens leaves the simulator's text answer room to end by itself
// (finish_reason stop): its length is exponential with mean 12 tokens.
const forcedMaxTokens = 512

// The tools the forced tests offer. get_weather is always the one forced;
// get_time is offered before it when the test names the tool, so a named
// choice that degrades to "any tool" shows.
var (
	weatherFn = forcedTool{"get_weather", "Current weather for a city", map[string]any{"type": "object",
		"properties": map[string]any{
			"city": map[string]any{"type": "string", "minLength": 1, "description": "City name"},
			"unit": map[string]any{"type": "string", "enum": []any{"celsius", "fahrenheit"}},
		},
		"required": []any{"city", "unit"}, "additionalProperties": false}}
	timeFn = forcedTool{"get_time", "Local time in a city", map[string]any{"type": "object",
		"properties": map[string]any{"city": map[string]any{"type": "string", "minLength": 1}},
		"required":   []any{"city"}, "additionalProperties": false}}
	weatherSchema = mustResolve(weatherFn.schema)
)

// forcedTool is a function tool of the forced tests.
type forcedTool struct {
	name, description string
	schema            map[string]any
}

func mustResolve(schema map[string]any) *jsonschema.Resolved {
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(mustJSON(schema)), &s); err != nil {
		panic(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		panic(err)
	}
	return rs
}

// forcing is how a test forces the call.
type forcing struct {
	name     string
	named    bool // name get_weather (offered after get_time); otherwise require a call of the one tool
	parallel bool // allow parallel calls and expect several; otherwise exactly one
}

var forcings = []forcing{{"Required", false, false}, {"Named", true, false}, {"Parallel", false, true}}

func (f forcing) tools() []forcedTool {
	if f.named {
		return []forcedTool{timeFn, weatherFn}
	}
	return []forcedTool{weatherFn}
}

// forcedPromptVariants bounds the prompts a Parallel test tries on the
// simulator.
const forcedPromptVariants = 8

// forcedFirstTurn runs the first turn (run returns how many calls it got)
// and checks the number of calls: exactly one unless the forcing allows
// parallel calls; then two from the scripted upstream, and two to
// simMaxParallelToolCalls from the simulator. The simulator draws how many
// calls an answer holds from the prompt (the tests use temperature 0), so
// on it a Parallel test tries other wordings of the prompt until an answer
// holds several calls: deterministic for a given gateway, and robust to a
// change in how the gateway renders the prompt.
func forcedFirstTurn(t *testing.T, b backendKind, f forcing, run func(prompt string) int) {
	t.Helper()
	for i := range forcedPromptVariants {
		prompt := "What is the weather in Paris?"
		if i > 0 {
			prompt = fmt.Sprintf("What is the weather in Paris? (take %d)", i+1)
		}
		n := run(prompt)
		switch {
		case !f.parallel && n == 1:
			return
		case f.parallel && b.scripts && n == 2:
			return
		case f.parallel && !b.scripts && n >= 2 && n <= simMaxParallelToolCalls:
			return
		case f.parallel && !b.scripts && n == 1:
			continue
		}
		t.Fatalf("%d tool calls (forcing %s, backend %s), want %s", n, f.name, b.prefix,
			map[bool]string{false: "exactly 1", true: "several"}[f.parallel])
	}
	t.Fatalf("with parallel calls allowed, the simulator made a single call for %d prompts in a row", forcedPromptVariants)
}

// checkForcedCall checks one call as the SDK parsed it (get_weather, its
// arguments a JSON object valid against the offered schema: city present,
// unit one of the enum's values) and returns the tool's result, which names
// the arguments so the answer to it can be traced back.
func checkForcedCall(t *testing.T, name, args string) string {
	t.Helper()
	if name != weatherFn.name {
		t.Fatalf("tool call names %q, want %s", name, weatherFn.name)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		t.Fatalf("arguments %q are not a JSON object: %v", args, err)
	}
	if err := weatherSchema.Validate(v); err != nil {
		t.Fatalf("arguments %s are not valid against the offered schema: %v", args, err)
	}
	city, _ := v["city"].(string)
	unit, _ := v["unit"].(string)
	if city == "" || (unit != "celsius" && unit != "fahrenheit") {
		t.Fatalf("arguments %s: want a city and unit celsius or fahrenheit", args)
	}
	return mustJSON(map[string]any{"city": city, "unit": unit, "temperature": 18, "sky": "clear"})
}

// checkForcedAnswer checks the text answer to the tool results: the
// scripted upstream quotes them in order (forcedAnswer); the simulator's
// text is random but not empty.
func checkForcedAnswer(t *testing.T, b backendKind, got string, results []string) {
	t.Helper()
	if b.scripts && got != forcedAnswer(results) {
		t.Errorf("answer %q, want %q", got, forcedAnswer(results))
	}
	if got == "" {
		t.Errorf("empty text answer to the tool results")
	}
}

func chatForcedTools(f forcing) []openai.ChatCompletionToolUnionParam {
	var out []openai.ChatCompletionToolUnionParam
	for _, tl := range f.tools() {
		out = append(out, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: tl.name, Description: openai.String(tl.description), Parameters: shared.FunctionParameters(tl.schema)}))
	}
	return out
}

func checkChatUsage(t *testing.T, what string, u openai.CompletionUsage) {
	t.Helper()
	if u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("%s: usage %+v, want prompt and completion tokens and their total", what, u)
	}
}

func TestOpenAIGoSDK_ChatForcedToolCallRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range forcedBackends {
		for _, f := range forcings {
			for _, m := range modes() {
				t.Run(b.prefix+"/"+f.name+"/"+m.name, func(t *testing.T) {
					var params openai.ChatCompletionNewParams
					var first openai.ChatCompletion
					forcedFirstTurn(t, b, f, func(prompt string) int {
						params = chatParams(b.model(forcedScenario), prompt)
						params.MaxTokens = openai.Int(forcedMaxTokens)
						params.Temperature = openai.Float(0)
						params.Tools = chatForcedTools(f)
						params.ParallelToolCalls = openai.Bool(f.parallel)
						params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
						if f.named {
							params.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: weatherFn.name})
						}
						first, _ = chatTurn(t, c, params, m.stream)
						return len(first.Choices[0].Message.ToolCalls)
					})
					ch := first.Choices[0]
					if ch.FinishReason != "tool_calls" {
						t.Errorf("first turn finish_reason %q, want tool_calls", ch.FinishReason)
					}
					checkChatUsage(t, "first turn", first.Usage)
					params.Messages = append(params.Messages, ch.Message.ToParam())
					var results []string
					ids := map[string]bool{}
					for _, call := range ch.Message.ToolCalls {
						if call.ID == "" || ids[call.ID] || call.Type != "function" {
							t.Fatalf("tool call id %q type %q: want a unique id and type function", call.ID, call.Type)
						}
						ids[call.ID] = true
						out := checkForcedCall(t, call.Function.Name, call.Function.Arguments)
						results = append(results, out)
						params.Messages = append(params.Messages, openai.ToolMessage(out, call.ID))
					}
					params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
					second, _ := chatTurn(t, c, params, m.stream)
					ch = second.Choices[0]
					if ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 {
						t.Errorf("second turn finish_reason %q with %d tool calls, want stop and text", ch.FinishReason, len(ch.Message.ToolCalls))
					}
					checkForcedAnswer(t, b, ch.Message.Content, results)
					checkChatUsage(t, "second turn", second.Usage)
				})
			}
		}
	}
}

func responsesForcedTools(f forcing) []responses.ToolUnionParam {
	var out []responses.ToolUnionParam
	for _, tl := range f.tools() {
		out = append(out, responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
			Name: tl.name, Description: openai.String(tl.description), Parameters: tl.schema, Strict: openai.Bool(false)}})
	}
	return out
}

func checkResponsesUsage(t *testing.T, what string, r *responses.Response) {
	t.Helper()
	u := r.Usage
	if u.InputTokens <= 0 || u.OutputTokens <= 0 || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Errorf("%s: usage %+v, want input and output tokens and their total", what, u)
	}
	if r.Status != responses.ResponseStatusCompleted {
		t.Errorf("%s: status %q, want completed", what, r.Status)
	}
}

// The second turn goes back either as Codex sends it (store: false, the
// whole conversation resent: the input, the function_call items, their
// outputs) or by previous_response_id with only the outputs.
func TestOpenAIGoSDK_ResponsesForcedFunctionCallRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range forcedBackends {
		for _, f := range forcings {
			for _, stored := range []bool{false, true} {
				for _, m := range modes() {
					cont := map[bool]string{false: "FullInput", true: "PreviousResponseID"}[stored]
					t.Run(b.prefix+"/"+f.name+"/"+cont+"/"+m.name, func(t *testing.T) {
						var params responses.ResponseNewParams
						var first *responses.Response
						forcedFirstTurn(t, b, f, func(prompt string) int {
							params = responsesParams(b.model(forcedScenario), prompt)
							params.MaxOutputTokens = openai.Int(forcedMaxTokens)
							params.Temperature = openai.Float(0)
							params.Store = openai.Bool(stored)
							params.Tools = responsesForcedTools(f)
							params.ParallelToolCalls = openai.Bool(f.parallel)
							params.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)}
							if f.named {
								params.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: weatherFn.name}}
							}
							first, _ = responsesTurn(t, c, params, m.stream)
							n := 0
							for _, it := range first.Output {
								if it.Type == "function_call" {
									n++
								}
							}
							return n
						})
						checkResponsesUsage(t, "first turn", first)
						var calls, outputs []responses.ResponseInputItemUnionParam
						var results []string
						for _, it := range first.Output {
							if it.Type != "function_call" {
								continue
							}
							call := it.AsFunctionCall()
							if call.CallID == "" || call.Status != "completed" {
								t.Fatalf("function_call call_id %q status %q", call.CallID, call.Status)
							}
							res := checkForcedCall(t, call.Name, call.Arguments)
							results = append(results, res)
							calls = append(calls, responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name))
							out := responses.ResponseInputItemParamOfFunctionCallOutput(res)
							out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
							outputs = append(outputs, out)
						}
						next := params
						next.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)}
						if stored {
							next.PreviousResponseID = openai.String(first.ID)
							next.Input.OfInputItemList = outputs
						} else {
							var items responses.ResponseInputParam
							items = append(items, params.Input.OfInputItemList...)
							items = append(items, calls...)
							next.Input.OfInputItemList = append(items, outputs...)
						}
						second, _ := responsesTurn(t, c, next, m.stream)
						for _, it := range second.Output {
							if it.Type == "function_call" {
								t.Errorf("second turn called %s again, want a text answer", it.AsFunctionCall().Name)
							}
						}
						checkForcedAnswer(t, b, second.OutputText(), results)
						checkResponsesUsage(t, "second turn", second)
					})
				}
			}
		}
	}
}

func anthropicForcedTools(f forcing) []anthropic.ToolUnionParam {
	var out []anthropic.ToolUnionParam
	for _, tl := range f.tools() {
		var required []string
		for _, r := range tl.schema["required"].([]any) {
			required = append(required, r.(string))
		}
		out = append(out, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
			Name: tl.name, Description: anthropic.String(tl.description),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: tl.schema["properties"], Required: required,
				ExtraFields: map[string]any{"additionalProperties": false}},
		}})
	}
	return out
}

func checkAnthropicUsage(t *testing.T, what string, u anthropic.Usage) {
	t.Helper()
	if u.InputTokens <= 0 || u.OutputTokens <= 0 {
		t.Errorf("%s: usage input %d output %d, want both", what, u.InputTokens, u.OutputTokens)
	}
}

func TestAnthropicGoSDK_ForcedToolUseRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.anthropicClient()
	for _, b := range forcedBackends {
		for _, f := range forcings {
			for _, m := range modes() {
				t.Run(b.prefix+"/"+f.name+"/"+m.name, func(t *testing.T) {
					var params anthropic.MessageNewParams
					var first anthropic.Message
					forcedFirstTurn(t, b, f, func(prompt string) int {
						params = anthropicParams(b.model(forcedScenario), prompt)
						params.MaxTokens = forcedMaxTokens
						// This SDK version has no temperature field; the API takes it.
						params.SetExtraFields(map[string]any{"temperature": 0})
						params.Tools = anthropicForcedTools(f)
						params.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{DisableParallelToolUse: anthropic.Bool(!f.parallel)}}
						if f.named {
							params.ToolChoice = anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: weatherFn.name}}
						}
						first = anthropicTurn(t, c, params, m.stream)
						n := 0
						for _, blk := range first.Content {
							if blk.Type == "tool_use" {
								n++
							}
						}
						return n
					})
					if first.StopReason != anthropic.StopReasonToolUse {
						t.Errorf("first turn stop_reason %q, want tool_use", first.StopReason)
					}
					checkAnthropicUsage(t, "first turn", first.Usage)
					var results []string
					var blocks []anthropic.ContentBlockParamUnion
					for _, blk := range first.Content {
						if blk.Type != "tool_use" {
							continue
						}
						use := blk.AsToolUse()
						if use.ID == "" {
							t.Fatalf("tool_use without an id: %s", blk.RawJSON())
						}
						res := checkForcedCall(t, use.Name, string(use.Input))
						results = append(results, res)
						blocks = append(blocks, anthropic.NewToolResultBlock(use.ID, res, false))
					}
					params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(blocks...))
					params.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}}
					second := anthropicTurn(t, c, params, m.stream)
					if second.StopReason != anthropic.StopReasonEndTurn {
						t.Errorf("second turn stop_reason %q, want end_turn", second.StopReason)
					}
					for _, blk := range second.Content {
						if blk.Type == "tool_use" {
							t.Errorf("second turn called %s again, want a text answer", blk.Name)
						}
					}
					checkForcedAnswer(t, b, textOfMessage(second), results)
					checkAnthropicUsage(t, "second turn", second.Usage)
				})
			}
		}
	}
}
