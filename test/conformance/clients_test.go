package conformance

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/respjson"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// These tests send requests shaped like the ones the coding agents send:
// Claude Code uses the beta Messages endpoint (?beta=true, anthropic-beta
// headers, thinking, cache_control on system blocks, streaming); Codex uses
// streaming stateless Responses with reasoning options and
// include: ["reasoning.encrypted_content"].

func TestAnthropicGoSDK_ClaudeCodeShapedBetaStreamWithToolRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.anthropicClient()
	tool := anthropic.BetaToolUnionParam{OfTool: &anthropic.BetaToolParam{
		Name:        "get_weather",
		Description: anthropic.String("Current weather for a city"),
		InputSchema: anthropic.BetaToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}},
	}}
	for _, b := range scriptedBackends {
		t.Run(b.prefix, func(t *testing.T) {
			params := anthropic.BetaMessageNewParams{
				Model:     anthropic.Model(b.model("tool")),
				MaxTokens: 4096,
				Betas:     []anthropic.AnthropicBeta{anthropic.AnthropicBetaInterleavedThinking2025_05_14, "fine-grained-tool-streaming-2025-05-14"},
				System: []anthropic.BetaTextBlockParam{{Text: "You are Claude Code.", CacheControl: anthropic.BetaCacheControlEphemeralParam{}},
					{Text: "Answer tersely."}},
				Thinking: anthropic.BetaThinkingConfigParamOfEnabled(1024),
				Tools:    []anthropic.BetaToolUnionParam{tool},
				Messages: []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("What is the weather in Paris?"))},
			}
			first := betaStream(t, c, params)
			if first.StopReason != anthropic.BetaStopReasonToolUse {
				t.Fatalf("stop_reason %q, want tool_use: %s", first.StopReason, first.RawJSON())
			}
			var use anthropic.BetaToolUseBlock
			for _, blk := range first.Content {
				if blk.Type == "tool_use" {
					use = blk.AsToolUse()
				}
			}
			var input struct{ City string }
			if err := json.Unmarshal([]byte(mustJSON(use.Input)), &input); err != nil || input.City != "Paris" {
				t.Fatalf("tool_use %+v input %s (%v)", use, use.Input, err)
			}
			params.Messages = append(params.Messages, first.ToParam(),
				anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock(use.ID, toolResult, false)))
			second := betaStream(t, c, params)
			var text string
			for _, blk := range second.Content {
				if blk.Type == "text" {
					text += blk.Text
				}
			}
			if text != toolAnswer || second.StopReason != anthropic.BetaStopReasonEndTurn {
				t.Errorf("second turn %q stop %q", text, second.StopReason)
			}
		})
	}
}

func betaStream(t *testing.T, c anthropic.Client, params anthropic.BetaMessageNewParams) anthropic.BetaMessage {
	t.Helper()
	s := c.Beta.Messages.NewStreaming(testCtx(t), params)
	defer s.Close()
	var msg anthropic.BetaMessage
	starts := 0
	for s.Next() {
		ev := s.Current()
		if ev.Type == "message_start" {
			starts++
			requireValid(t, "message_start usage", map[string]respjson.Field{"input_tokens": ev.Message.Usage.JSON.InputTokens,
				"output_tokens": ev.Message.Usage.JSON.OutputTokens})
		}
		if ev.Type == "message_delta" {
			requireValid(t, "message_delta", map[string]respjson.Field{"stop_reason": ev.Delta.JSON.StopReason, "output_tokens": ev.Usage.JSON.OutputTokens})
		}
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("BetaMessage.Accumulate(%s): %v", ev.Type, err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("beta stream: %v", err)
	}
	if starts != 1 {
		t.Errorf("%d message_start events", starts)
	}
	return msg
}

func TestOpenAIGoSDK_CodexShapedResponsesStreamWithFunctionCallRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range scriptedBackends {
		t.Run(b.prefix, func(t *testing.T) {
			params := responsesParams(b.model("tool"), "What is the weather in Paris?")
			params.MaxOutputTokens = param.Opt[int64]{} // Codex sends none
			params.Tools = []responses.ToolUnionParam{responsesWeatherTool}
			params.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)}
			params.ParallelToolCalls = openai.Bool(false)
			params.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffortMedium, Summary: shared.ReasoningSummaryAuto}
			params.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
			params.PromptCacheKey = openai.String("conversation-1")
			first, _ := responsesTurn(t, c, params, true)
			var call responses.ResponseFunctionToolCall
			for _, it := range first.Output {
				if it.Type == "function_call" {
					call = it.AsFunctionCall()
				}
			}
			if call.CallID == "" || call.Name != "get_weather" {
				t.Fatalf("no function_call in %s", first.RawJSON())
			}
			out := responses.ResponseInputItemParamOfFunctionCallOutput(toolResult)
			out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
			params.Input.OfInputItemList = append(params.Input.OfInputItemList,
				responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name), out)
			second, _ := responsesTurn(t, c, params, true)
			if second.OutputText() != toolAnswer {
				t.Errorf("second turn %q", second.OutputText())
			}
		})
	}
}

// Every dialect's requests reach the usage ledger with the backend's exact
// token counts (not estimates), streaming or not.
func TestLedger_RecordsBackendUsageForEveryClientDialect(t *testing.T) {
	e := newEnv(t)
	ac, oc := e.anthropicClient(), e.openaiClient()
	type call struct {
		name, model, endpoint string
		stream                bool
		run                   func(t *testing.T, model string, stream bool)
	}
	messages := func(t *testing.T, model string, stream bool) {
		anthropicTurn(t, ac, anthropicParams(model, "Hello"), stream)
	}
	chat := func(t *testing.T, model string, stream bool) { chatTurn(t, oc, chatParams(model, "Hello"), stream) }
	resp := func(t *testing.T, model string, stream bool) {
		responsesTurn(t, oc, responsesParams(model, "Hello"), stream)
	}
	var calls []call
	for _, stream := range []bool{false, true} {
		calls = append(calls,
			call{"messages/chat-backend", "oa-text", "messages", stream, messages},
			call{"messages/anthropic-backend", "an-text", "messages", stream, messages},
			call{"chat/anthropic-backend", "an-text", "chat", stream, chat},
			call{"responses/chat-backend", "oa-text", "responses", stream, resp},
			call{"responses/anthropic-backend", "an-text", "responses", stream, resp},
		)
	}
	for _, cl := range calls {
		name := cl.name + "/" + map[bool]string{false: "NonStreaming", true: "Streaming"}[cl.stream]
		t.Run(name, func(t *testing.T) {
			cl.run(t, cl.model, cl.stream)
			rec := e.waitRecord(t, cl.model, cl.endpoint, cl.stream)
			if rec.Status != 200 || rec.PromptTokens != fakePromptTokens || rec.CompletionTokens != fakeCompletionTokens || rec.Estimated {
				t.Errorf("ledger record status %d tokens %d+%d estimated %v, want 200 %d+%d exact",
					rec.Status, rec.PromptTokens, rec.CompletionTokens, rec.Estimated, fakePromptTokens, fakeCompletionTokens)
			}
		})
	}
}

// waitRecord waits for the ledger record of the one request with this
// model, endpoint and stream mode.
func (e *env) waitRecord(t *testing.T, model, endpoint string, stream bool) usage.Record {
	t.Helper()
	var rec usage.Record
	if _, ok := testenv.Poll(5*time.Second, func() bool {
		recs, err := e.gw.Store.Recent(context.Background(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Model == model && r.Endpoint == endpoint && r.Stream == stream {
				rec = r
				return true
			}
		}
		return false
	}); !ok {
		t.Fatalf("no ledger record for %s %s stream=%v", endpoint, model, stream)
	}
	return rec
}

// Images (base64 and URL) and the system prompt reach every backend
// dialect from the Anthropic and OpenAI chat SDKs; the scripted upstreams
// check their exact shape.
func TestAnthropicGoSDK_ImagesAndSystemPromptReachEveryBackend(t *testing.T) {
	e := newEnv(t)
	c := e.anthropicClient()
	for _, b := range scriptedBackends {
		t.Run(b.prefix, func(t *testing.T) {
			params := anthropicParams(b.model("image"), "")
			params.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(
				anthropic.NewTextBlock("What is in these images?"),
				anthropic.NewImageBlockBase64("image/png", imagePNG),
				anthropic.NewImageBlock(anthropic.URLImageSourceParam{URL: imageURL}),
			)}
			msg := anthropicTurn(t, c, params, false)
			if textOfMessage(msg) != imageAnswer {
				t.Errorf("answer %q", textOfMessage(msg))
			}
		})
	}
}

func TestOpenAIGoSDK_ChatImagesAndSystemPromptReachEveryBackend(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range scriptedBackends {
		t.Run(b.prefix, func(t *testing.T) {
			params := chatParams(b.model("image"), "")
			params.Messages = []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(systemPrompt),
				openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
					openai.TextContentPart("What is in these images?"),
					openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + imagePNG}),
					openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: imageURL}),
				})}
			resp, _ := chatTurn(t, c, params, true)
			if got := resp.Choices[0].Message.Content; got != imageAnswer {
				t.Errorf("answer %q", got)
			}
		})
	}
}
