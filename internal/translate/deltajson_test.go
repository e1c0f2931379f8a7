package translate

import (
	"bytes"
	"encoding/json"
	"testing"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
)

// deltaJSON writes what json.Marshal writes, for every string and every
// combination of fields.
func FuzzDeltaJSON(f *testing.F) {
	for _, s := range []string{"Hello", " there", "", "a<b", "x & y", `say "hi"`, `back\slash`, "tab\tnew\nline", "é漢字🙂",
		"\u2028", "\xff\xfe", "ok\x7f", "</script>", "\u00a0"} {
		f.Add(s, uint8(0), 3)
		f.Add(s, uint8(5), 0)
	}
	f.Fuzz(func(t *testing.T, s string, fields uint8, index int) {
		d := anthropic.BlockDelta{Type: anthropic.DeltaText}
		if fields&1 != 0 || fields == 0 {
			d.Text = &s
		}
		if fields&2 != 0 {
			d.Type, d.PartialJSON = anthropic.DeltaInputJSON, &s
		}
		if fields&4 != 0 {
			d.Type, d.Thinking = anthropic.DeltaThinking, &s
		}
		if fields&8 != 0 {
			d.Signature = &s
		}
		if fields&16 != 0 {
			d.Type = s
		}
		want := mustJSON(anthropic.ContentBlockDeltaEvent{Type: anthropic.EventContentBlockDelta, Index: index, Delta: d})
		if got := deltaJSON(index, d); !bytes.Equal(got, want) {
			t.Fatalf("deltaJSON %s\njson.Marshal %s", got, want)
		}
	})
}

func BenchmarkDeltaJSON(b *testing.B) {
	s := " world"
	d := anthropic.BlockDelta{Type: anthropic.DeltaText, Text: &s}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			deltaJSON(0, d)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			mustJSON(anthropic.ContentBlockDeltaEvent{Type: anthropic.EventContentBlockDelta, Index: 0, Delta: d})
		}
	})
}

// textDeltaJSON writes what json.Marshal writes.
func FuzzTextDeltaJSON(f *testing.F) {
	for _, s := range []string{"Hello", "", "a<b", `q"`, "é🙂", "\u2029", "\xff", "\x01", "line\n\tx", `{"path": "a\\b"}`} {
		f.Add("response.output_text.delta", "msg_abc_0", s, 7, 0, uint8(0))
		f.Add(s, s, "ok", 0, 2, uint8(3))
	}
	f.Fuzz(func(t *testing.T, typ, item, delta string, seq, idx int, flags uint8) {
		ev := openai.ResponsesTextEvent{Type: typ, SequenceNumber: seq, ItemID: item, OutputIndex: idx, ContentIndex: idx / 2,
			Delta: &delta, Logprobs: []json.RawMessage{}}
		if flags&1 != 0 {
			ev.Delta = nil
		}
		if flags&2 != 0 {
			ev.Text = &delta
		}
		if flags&4 != 0 {
			ev.Logprobs = nil
		}
		if flags&8 != 0 {
			ev.Logprobs = []json.RawMessage{json.RawMessage(`{"token":"a"}`)}
		}
		if got, want := textDeltaJSON(ev), mustJSON(ev); !bytes.Equal(got, want) {
			t.Fatalf("textDeltaJSON %s\njson.Marshal   %s", got, want)
		}
	})
}

// argsDeltaJSON writes what json.Marshal writes, for every string and
// every combination of fields.
func FuzzArgsDeltaJSON(f *testing.F) {
	for _, s := range []string{`{"path": "`, "", "a<b&c>", `q"\`, "é🙂", "\u2028", "\xff", "\x01\x7f", "line\n\tx\r\b\f"} {
		f.Add("response.function_call_arguments.delta", "fc_abc", s, 7, 0, uint8(0))
		f.Add(s, s, "ok", 0, 2, uint8(3))
	}
	f.Fuzz(func(t *testing.T, typ, item, delta string, seq, idx int, flags uint8) {
		ev := openai.ResponsesArgumentsEvent{Type: typ, SequenceNumber: seq, ItemID: item, OutputIndex: idx, Delta: &delta}
		if flags&1 != 0 {
			ev.Delta = nil
		}
		if flags&2 != 0 {
			ev.Arguments = &delta
		}
		if got, want := argsDeltaJSON(ev), mustJSON(ev); !bytes.Equal(got, want) {
			t.Fatalf("argsDeltaJSON %s\njson.Marshal  %s", got, want)
		}
	})
}
