package translate

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/jsonscan"
)

// deltaJSON is the JSON of a content_block_delta event at index, byte for
// byte what json.Marshal writes; a one-string delta (text, thinking,
// partial_json, the fields a stream sends for every token) is appended
// directly, its ASCII escaped as json.Marshal escapes it
// (jsonscan.AppendEscaped; a tool call's
// partial_json is full of quotes), unless it holds invalid UTF-8 or
// U+2028/U+2029. FuzzDeltaJSON holds it to json.Marshal.
func deltaJSON(index int, d anthropic.BlockDelta) []byte {
	var name string
	var val *string
	for _, f := range [...]struct {
		name string
		v    *string
	}{{"text", d.Text}, {"partial_json", d.PartialJSON}, {"thinking", d.Thinking}, {"signature", d.Signature}} {
		if f.v == nil {
			continue
		}
		if val != nil {
			val = nil // two: json.Marshal writes them
			break
		}
		name, val = f.name, f.v
	}
	if val == nil || !plainNonASCII(*val) || !unescapedJSON(d.Type) {
		return mustJSON(anthropic.ContentBlockDeltaEvent{Type: anthropic.EventContentBlockDelta, Index: index, Delta: d})
	}
	b := make([]byte, 0, 72+len(d.Type)+len(*val)+len(*val)/4)
	b = append(b, `{"type":"`+anthropic.EventContentBlockDelta+`","index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"delta":{"type":"`...)
	b = append(b, d.Type...)
	b = append(b, `","`...)
	b = append(b, name...)
	b = append(b, `":"`...)
	b = jsonscan.AppendEscaped(b, *val)
	return append(b, `"}}`...)
}

// plainNonASCII reports whether json.Marshal writes every non-ASCII
// character of s as it is: valid UTF-8 without U+2028 or U+2029.
func plainNonASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return utf8.ValidString(s[i:]) && !strings.ContainsRune(s[i:], '\u2028') && !strings.ContainsRune(s[i:], '\u2029')
		}
	}
	return true
}

// unescapedJSON reports whether json.Marshal writes s between quotes as it
// is: valid UTF-8 without control characters, quotes, backslashes, the
// HTML characters it escapes (<, >, &) or U+2028 and U+2029.
func unescapedJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if jsonscan.NeedsEscape(s[i]) {
			return false
		}
	}
	return plainNonASCII(s)
}

// textDeltaJSON is the JSON of a Responses API text delta event
// (response.output_text.delta, response.reasoning_text.delta), byte for
// byte what json.Marshal writes; the common one (a delta, no logprobs, a
// type and item id that need no escaping, a delta whose non-ASCII
// characters need none) is appended directly. FuzzTextDeltaJSON holds it
// to json.Marshal.
func textDeltaJSON(ev openai.ResponsesTextEvent) []byte {
	if ev.Delta == nil || ev.Text != nil || ev.Logprobs == nil || len(ev.Logprobs) > 0 ||
		!unescapedJSON(ev.Type) || !unescapedJSON(ev.ItemID) || !plainNonASCII(*ev.Delta) {
		return mustJSON(ev)
	}
	b := make([]byte, 0, 128+len(ev.Type)+len(ev.ItemID)+len(*ev.Delta)+len(*ev.Delta)/4)
	b = appendItemEventHead(b, ev.Type, ev.SequenceNumber, ev.ItemID, ev.OutputIndex)
	b = append(b, `,"content_index":`...)
	b = strconv.AppendInt(b, int64(ev.ContentIndex), 10)
	b = append(b, `,"delta":"`...)
	b = jsonscan.AppendEscaped(b, *ev.Delta)
	return append(b, `","logprobs":[]}`...)
}

// argsDeltaJSON is the JSON of a response.function_call_arguments.delta
// event, byte for byte what json.Marshal writes; the common one (a delta,
// no arguments, a type and item id that need no escaping) is appended
// directly. FuzzArgsDeltaJSON holds it to json.Marshal.
func argsDeltaJSON(ev openai.ResponsesArgumentsEvent) []byte {
	if ev.Delta == nil || ev.Arguments != nil || !unescapedJSON(ev.Type) || !unescapedJSON(ev.ItemID) || !plainNonASCII(*ev.Delta) {
		return mustJSON(ev)
	}
	b := make([]byte, 0, 96+len(ev.Type)+len(ev.ItemID)+len(*ev.Delta)+len(*ev.Delta)/4)
	b = appendItemEventHead(b, ev.Type, ev.SequenceNumber, ev.ItemID, ev.OutputIndex)
	b = append(b, `,"delta":"`...)
	b = jsonscan.AppendEscaped(b, *ev.Delta)
	return append(b, `"}`...)
}

// appendItemEventHead appends the opening members every Responses API
// item event starts with, typ and item needing no escaping.
func appendItemEventHead(b []byte, typ string, seq int, item string, outputIndex int) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"item_id":"`...)
	b = append(b, item...)
	b = append(b, `","output_index":`...)
	return strconv.AppendInt(b, int64(outputIndex), 10)
}
