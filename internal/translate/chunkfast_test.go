package translate

import (
	"encoding/json"
	"reflect"
	"testing"
)

var chunkSeeds = []string{
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
	`{"id":"c1","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"hm","content":null},"finish_reason":null}]}`,
	`{"id":"c1","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning":"hm"}}]}`,
	`{"id":"c1","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":"</s>"}]}`,
	`{"id":"c1","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop","matched_stop":151645}]}`,
	`{"id":"c1","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
	`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{}"}}]}}]}`,
	`{"error":{"message":"boom","type":"server_error"}}`,
	`{"ID":"c1","choices":[{"Index":1,"delta":{"Content":"x"}}]}`,
	`{"id":"c1","id":"c2","choices":[{"index":0,"index":1}]}`,
	`{"id":"caf\u00e9","choices":[{"delta":{"content":"a\nb"}}]}`,
	`{"id":"c1","created":1.5,"choices":null}`,
	`{"id":null,"model":null,"created":null,"choices":[{"index":null,"delta":null,"finish_reason":null}]}`,
	`{"choices":[null,{"index":0}]}`,
	`{"choices":[{"index":0,"delta":{"content":"é"}}],"choiceſ":[]}`,
	`[1,2]`, `null`, `{"id":"c1"} trailing`, `{"created":99999999999999999999}`,
	`{"choices":[{"index":4294967296}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x"},"stop_reason":null,"matched_stop":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": \"/tmp/a\\nb\t\/c"}}]},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"Read","arguments":""}},{"index":1,"function":null}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":null,"id":null,"function":{"name":null,"arguments":"\u00e9"}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"Index":0,"function":{"Arguments":"x"}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"index":1}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[null,{"index":2.5}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[],"tool_calls":null}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"a\\\"b\\","extra":1},"x":[1]}]}}]}`,
	`{"id":"c1","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"\tfmt.Println(\"hi\")\n"},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"reasoning_content":"a\/b\r\n","content":"\u0041"}}]}`,
}

// decodeChunkFast agrees with json.Unmarshal wherever it decodes: the same
// chunk, and never a chunk where json.Unmarshal fails.
func FuzzDecodeChunkFast(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, std chatChunk
		if !decodeChunkFast(data, &fast) {
			return
		}
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("fast decoding accepted %q, which json.Unmarshal refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("%q: fast %+v, json.Unmarshal %+v", data, fast, std)
		}
	})
}

// The fast path takes the common chunks (text, reasoning, finish) and
// leaves the rest to json.Unmarshal.
func TestDecodeChunkFast_TakesTheCommonChunks(t *testing.T) {
	wants := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true, 6: false, 7: true, 8: false, 9: false, 10: false, 11: false,
		22: true, 23: true, 24: false, 25: false, 26: false, 27: false, 28: false, 29: true, 30: true, 31: false}
	for i, want := range wants {
		var c chatChunk
		if got := decodeChunkFast([]byte(chunkSeeds[i]), &c); got != want {
			t.Errorf("%s: fast path %v, want %v", chunkSeeds[i], got, want)
		}
	}
}

// BenchmarkDecodeChunk compares the fast path with json.Unmarshal on a
// text delta, the most common chunk of a stream.
func BenchmarkDecodeChunk(b *testing.B) {
	bench := func(b *testing.B, data []byte) {
		b.Run("fast", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var c chatChunk
				if !decodeChunkFast(data, &c) {
					b.Fatal("not taken")
				}
			}
		})
		b.Run("json.Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var c chatChunk
				if err := json.Unmarshal(data, &c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("text", func(b *testing.B) { bench(b, []byte(chunkSeeds[1])) })
	b.Run("tool-arguments", func(b *testing.B) { bench(b, []byte(chunkSeeds[22])) })
}
