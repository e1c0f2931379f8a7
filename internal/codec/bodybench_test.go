package codec

import "testing"

// BenchmarkDecoderBody_ChatAnswer is the check every non-streamed answer
// gets (one parse: result, usage, error, llama.cpp's timings).
func BenchmarkDecoderBody_ChatAnswer(b *testing.B) {
	r, err := Decode(Chat, []byte(`{"model":"m","messages":[{"role":"user","content":"Say hello to the benchmark"}],"max_tokens":16}`))
	if err != nil {
		b.Fatal(err)
	}
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, this is a fixed answer."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"total_tokens":20,"completion_tokens":9}}`)
	d := NewDecoder(r, Target{Backend: "b"}, false)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Body(answer); err != nil {
			b.Fatal(err)
		}
	}
}
