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
