package codec

import (
	"bytes"
	"testing"

	"llmgate/internal/translate"
)

// TestOpenAIIdentity_AnswersWithThePublicModelName: a chat or completions
// answer names the model the client asked for, as /v1/messages does, not
// the backend's upstream_model; an answer that already does is passed on
// without a copy.
func TestOpenAIIdentity_AnswersWithThePublicModelName(t *testing.T) {
	for _, d := range []Dialect{Chat, Completions} {
		enc := NewEncoder(&Request{Dialect: d, Model: "qwen-7b", Stream: true, WantsUsage: true}, FormOpenAI, EncodeOptions{})
		chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"Qwen/Qwen2.5-7B-Instruct","choices":[{"index":0,"delta":{"content":"hi"}}]}`)
		out, err := enc.Event(nil, Event{Data: chunk, Content: true})
		if err != nil || len(out) != 1 {
			t.Fatalf("%v: %v %v", d, out, err)
		}
		want := `{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"qwen-7b","choices":[{"index":0,"delta":{"content":"hi"}}]}`
		if string(out[0].Data) != want {
			t.Errorf("%v chunk:\n got %s\nwant %s", d, out[0].Data, want)
		}
		spaced := []byte(`{"id": "x", "model": "Qwen/Qwen2.5-7B-Instruct", "choices": []}`)
		body, err := enc.Body(Event{Data: spaced, End: true})
		if err != nil || string(body) != `{"id": "x", "model": "qwen-7b", "choices": []}` {
			t.Errorf("%v body: %s %v", d, body, err)
		}
		same := []byte(`{"id":"y","model":"qwen-7b","choices":[]}`)
		out, _ = enc.Event(nil, Event{Data: same})
		if &out[0].Data[0] != &same[0] {
			t.Errorf("%v: an answer already naming the public model was copied", d)
		}
		none := []byte(`{"id":"z","choices":[]}`)
		if out, _ = enc.Event(nil, Event{Data: none}); !bytes.Equal(out[0].Data, none) {
			t.Errorf("%v: an answer without a model changed: %s", d, out[0].Data)
		}
	}
	if got := publicModel(translate.Done, "m"); !bytes.Equal(got, translate.Done) {
		t.Errorf("[DONE] changed: %s", got)
	}
}

func BenchmarkPublicModel_SameName(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen2.5-7b-instruct","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = publicModel(chunk, "qwen2.5-7b-instruct")
	}
}

// TestAnthropicIdentity_AnswersWithThePublicModelName: an Anthropic
// backend's answer to an Anthropic client names the model the client asked
// for, in a body and in message_start's message, as the translated pairs
// do; other events pass unchanged.
func TestAnthropicIdentity_AnswersWithThePublicModelName(t *testing.T) {
	enc := NewEncoder(&Request{Dialect: Messages, Model: "sonnet", Stream: true}, FormAnthropic, EncodeOptions{})
	start := []byte(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":12,"output_tokens":1}}}`)
	out, err := enc.Event(nil, Event{Name: "message_start", Data: start})
	if err != nil || len(out) != 1 {
		t.Fatalf("%v %v", out, err)
	}
	want := `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"sonnet","content":[],"usage":{"input_tokens":12,"output_tokens":1}}}`
	if string(out[0].Data) != want || out[0].Name != "message_start" {
		t.Errorf("message_start:\n got %s %s\nwant %s", out[0].Name, out[0].Data, want)
	}
	// A delta that mentions "model" in its text is not touched.
	delta := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\"model\":\"x\""}}`)
	if out, _ = enc.Event(nil, Event{Name: "content_block_delta", Data: delta}); &out[0].Data[0] != &delta[0] {
		t.Errorf("a delta was copied or changed: %s", out[0].Data)
	}
	body, err := enc.Body(Event{Data: []byte(`{"id":"msg_2","type":"message","model": "claude-sonnet-4-5","content":[]}`), End: true})
	if err != nil || string(body) != `{"id":"msg_2","type":"message","model": "sonnet","content":[]}` {
		t.Errorf("body: %s %v", body, err)
	}
	// count_tokens answers have no model and pass as they are.
	count := []byte(`{"input_tokens":7}`)
	if body, _ = enc.Body(Event{Data: count}); !bytes.Equal(body, count) {
		t.Errorf("count changed: %s", body)
	}
}
