package conformance

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/responses"
)

// Responses API tests use the openai-go Responses client the way Codex uses
// the API: stateless (store: false), instructions plus input items,
// function tools, the full conversation resent each turn.

func responsesParams(model, prompt string) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:           model,
		Instructions:    openai.String("You are a terse assistant."),
		Input:           responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(prompt, responses.EasyInputMessageRoleUser)}},
		Store:           openai.Bool(false),
		MaxOutputTokens: openai.Int(64),
	}
}

var responsesWeatherTool = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name:        "get_weather",
	Description: openai.String("Current weather for a city"),
	Parameters:  map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
	Strict:      openai.Bool(false),
}}

func requireResponse(t *testing.T, what string, r *responses.Response) {
	t.Helper()
	requireOpenAIValid(t, what, map[string]respjson.Field{"id": r.JSON.ID, "object": r.JSON.Object, "created_at": r.JSON.CreatedAt,
		"model": r.JSON.Model, "status": r.JSON.Status, "output": r.JSON.Output, "usage": r.JSON.Usage})
	requireOpenAIValid(t, what+".usage", map[string]respjson.Field{"input_tokens": r.Usage.JSON.InputTokens,
		"output_tokens": r.Usage.JSON.OutputTokens, "total_tokens": r.Usage.JSON.TotalTokens,
		"input_tokens_details": r.Usage.JSON.InputTokensDetails, "output_tokens_details": r.Usage.JSON.OutputTokensDetails})
}

// responsesTurn runs one Responses call. Streaming checks the event order
// Codex relies on (response.created first, deltas, response.completed last
// with the full output and usage) and that the streamed deltas add up to
// the final output_text; it returns the completed response.
func responsesTurn(t *testing.T, c openai.Client, params responses.ResponseNewParams, stream bool) (*responses.Response, string) {
	t.Helper()
	ctx := testCtx(t)
	if !stream {
		r, err := c.Responses.New(ctx, params)
		if err != nil {
			t.Fatalf("Responses.New: %v", apiErrorDetail(err))
		}
		requireResponse(t, "response", r)
		return r, ""
	}
	s := c.Responses.NewStreaming(ctx, params)
	defer s.Close()
	var types []string
	var text, reasoning strings.Builder
	args := map[string]string{} // by item id
	var final *responses.Response
	lastSeq := int64(-1)
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		if ev.SequenceNumber <= lastSeq {
			t.Errorf("sequence_number %d after %d", ev.SequenceNumber, lastSeq)
		}
		lastSeq = ev.SequenceNumber
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args[ev.ItemID] += ev.Delta
		case "response.reasoning_text.delta":
			reasoning.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			r := ev.Response
			final = &r
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v (events %v)", apiErrorDetail(err), types)
	}
	if len(types) < 3 || types[0] != "response.created" || (types[len(types)-1] != "response.completed" && types[len(types)-1] != "response.incomplete") {
		t.Fatalf("events %v: want response.created first and response.completed last", types)
	}
	requireResponse(t, "response.completed", final)
	if final.OutputText() != text.String() {
		t.Errorf("streamed text %q differs from the completed output_text %q", text.String(), final.OutputText())
	}
	for _, it := range final.Output {
		if it.Type == "function_call" && it.AsFunctionCall().Arguments != args[it.ID] {
			t.Errorf("streamed arguments %q of item %s differ from the completed %q", args[it.ID], it.ID, it.AsFunctionCall().Arguments)
		}
	}
	return final, reasoning.String()
}

func TestOpenAIGoSDK_ResponsesTextFromEveryBackend(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range allBackends {
		for _, m := range modes() {
			t.Run(b.prefix+"/"+m.name, func(t *testing.T) {
				r, _ := responsesTurn(t, c, responsesParams(b.model("text"), "Say hello"), m.stream)
				if !b.scripts {
					if r.OutputText() == "" || r.Usage.OutputTokens <= 0 || r.Usage.OutputTokens > 64 || r.Usage.InputTokens <= 0 {
						t.Fatalf("output_text %q usage %+v", r.OutputText(), r.Usage)
					}
					return
				}
				if r.OutputText() != textAnswer || r.Status != responses.ResponseStatusCompleted {
					t.Errorf("output_text %q status %q", r.OutputText(), r.Status)
				}
				if u := r.Usage; u.InputTokens != fakePromptTokens || u.OutputTokens != fakeCompletionTokens || u.TotalTokens != fakePromptTokens+fakeCompletionTokens {
					t.Errorf("usage %+v, want %d+%d", u, fakePromptTokens, fakeCompletionTokens)
				}
			})
		}
	}
}

func TestOpenAIGoSDK_ResponsesFunctionCallRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range scriptedBackends {
		for _, scenario := range toolScenarios {
			for _, m := range modes() {
				t.Run(b.prefix+"/"+scenario+"/"+m.name, func(t *testing.T) {
					params := responsesParams(b.model(scenario), "What is the weather in Paris and Tokyo?")
					params.Tools = []responses.ToolUnionParam{responsesWeatherTool}
					first, _ := responsesTurn(t, c, params, m.stream)
					params.Input.OfInputItemList = append(params.Input.OfInputItemList, functionCallOutputs(t, first, scenario)...)
					second, _ := responsesTurn(t, c, params, m.stream)
					if second.OutputText() != toolAnswers[scenario] {
						t.Errorf("second turn %q, want %q", second.OutputText(), toolAnswers[scenario])
					}
				})
			}
		}
	}
}

// functionCallOutputs checks a response's function_call items and returns
// the input items of the next turn, as Codex resends them: the calls in
// order, then their outputs.
func functionCallOutputs(t *testing.T, r *responses.Response, scenario string) []responses.ResponseInputItemUnionParam {
	t.Helper()
	var calls, outputs []responses.ResponseInputItemUnionParam
	var cities []string
	for _, it := range r.Output {
		if it.Type != "function_call" {
			continue
		}
		call := it.AsFunctionCall()
		var args struct{ City string }
		if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || call.Name != "get_weather" || call.CallID == "" {
			t.Fatalf("function_call %+v (%v) in output %s", call, err, r.RawJSON())
		}
		cities = append(cities, args.City)
		out := responses.ResponseInputItemParamOfFunctionCallOutput(weatherResult[args.City])
		out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		calls = append(calls, responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name))
		outputs = append(outputs, out)
	}
	items := append(calls, outputs...)
	if want := toolCities[scenario]; strings.Join(cities, ",") != want {
		t.Fatalf("function calls for %v, want %s", cities, want)
	}
	return items
}

func TestOpenAIGoSDK_ResponsesReasoning(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range scriptedBackends {
		for _, m := range modes() {
			t.Run(b.prefix+"/"+m.name, func(t *testing.T) {
				r, streamed := responsesTurn(t, c, responsesParams(b.model("reason"), "Hello"), m.stream)
				var items []string
				var reasoning string
				for _, it := range r.Output {
					items = append(items, it.Type)
					if it.Type == "reasoning" {
						for _, c := range it.AsReasoning().Content {
							reasoning += c.Text
						}
					}
				}
				if reasoning != thinkingText || r.OutputText() != textAnswer {
					t.Errorf("items %v reasoning %q text %q", items, reasoning, r.OutputText())
				}
				if m.stream && streamed != thinkingText {
					t.Errorf("streamed reasoning %q", streamed)
				}
			})
		}
	}
}

func TestOpenAIGoSDK_ResponsesMidStreamFailuresEndInResponseFailed(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range scriptedBackends {
		for _, scenario := range []string{"cut", "errmid"} {
			t.Run(b.prefix+"/"+scenario, func(t *testing.T) {
				s := c.Responses.NewStreaming(testCtx(t), responsesParams(b.model(scenario), "Hello"))
				defer s.Close()
				var types []string
				var errEv, failed responses.ResponseStreamEventUnion
				for s.Next() {
					ev := s.Current()
					types = append(types, ev.Type)
					switch ev.Type {
					case "error":
						errEv = ev
					case "response.failed":
						failed = ev
					}
				}
				if s.Err() != nil {
					t.Fatalf("stream: %v", s.Err())
				}
				if len(types) < 2 || types[len(types)-1] != "response.failed" || errEv.Message == "" {
					t.Fatalf("events %v: want an error event with a message, then response.failed last", types)
				}
				if failed.Response.Status != responses.ResponseStatusFailed || failed.Response.Error.Message == "" {
					t.Errorf("response.failed status %q error %+v", failed.Response.Status, failed.Response.Error)
				}
			})
		}
	}
}

// The official SDK continues a stored conversation with
// previous_response_id (streaming and not), reads a stored response back,
// deletes it, and gets OpenAI's error for an unknown id.
func TestOpenAIGoSDK_ResponsesPreviousResponseIDRetrieveDelete(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	params := responsesParams("oa-text", "My name is Ada.")
	params.Store = openai.Bool(true)
	first, err := c.Responses.New(testCtx(t), params)
	if err != nil {
		t.Fatal(apiErrorDetail(err))
	}
	next := responsesParams("oa-text", "What is my name?")
	next.Store = openai.Bool(true)
	next.PreviousResponseID = openai.String(first.ID)
	s := c.Responses.NewStreaming(testCtx(t), next)
	var second responses.Response
	for s.Next() {
		if ev := s.Current(); ev.Type == "response.completed" {
			second = ev.AsResponseCompleted().Response
		}
	}
	if s.Err() != nil {
		t.Fatal(apiErrorDetail(s.Err()))
	}
	if second.ID == "" || second.ID == first.ID || second.PreviousResponseID != first.ID {
		t.Fatalf("second response id %q previous %q (first %q)", second.ID, second.PreviousResponseID, first.ID)
	}
	got, err := c.Responses.Get(testCtx(t), second.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != second.ID || got.OutputText() != second.OutputText() || got.OutputText() == "" {
		t.Fatalf("Get: %v %+v", err, got)
	}
	if err := c.Responses.Delete(testCtx(t), first.ID); err != nil {
		t.Fatal(apiErrorDetail(err))
	}
	_, err = c.Responses.Get(testCtx(t), first.ID, responses.ResponseGetParams{})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusNotFound {
		t.Fatalf("Get after Delete: %v, want a 404 *openai.Error", err)
	}
	unknown := responsesParams("oa-text", "Hello")
	unknown.PreviousResponseID = openai.String("resp_123")
	_, err = c.Responses.New(testCtx(t), unknown)
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusBadRequest || oe.Code != "previous_response_not_found" || oe.Param != "previous_response_id" {
		t.Fatalf("unknown previous_response_id: %v, want a 400 *openai.Error with code previous_response_not_found", apiErrorDetail(err))
	}
}

// apiErrorDetail adds the body of an *openai.Error, whose Error() shows only
// the status when the body is not an OpenAI envelope it recognises.
func apiErrorDetail(err error) string {
	var oe *openai.Error
	if errors.As(err, &oe) {
		return err.Error() + " " + oe.RawJSON()
	}
	return err.Error()
}
