package translate

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"llmgate/internal/apierror"
	"llmgate/internal/jsonscan"
)

// decodeChunk decodes one chat stream chunk: the common ones without
// reflection (decodeChunkFast), the rest with json.Unmarshal.
func decodeChunk(data []byte) (chatChunk, error) {
	var c chatChunk
	if decodeChunkFast(data, &c) {
		return c, nil
	}
	c = chatChunk{}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, upstreamStreamError(apierror.KindUpstream, "the backend sent a stream chunk that is not valid JSON")
	}
	return c, nil
}

// decodeChunkFast decodes the common chat stream chunk (an id, a model,
// choices with text or reasoning deltas and finish reasons) without
// reflection, into c as json.Unmarshal would. It reports false, leaving c
// to be reset and decoded by json.Unmarshal, for anything else: tool
// calls, usage, an error, invalid JSON, an escaped string or key, a key
// that matches a field only case-insensitively, a field given twice, a
// value of another type. FuzzDecodeChunkFast holds it to json.Unmarshal's
// result for every input it accepts.
func decodeChunkFast(data []byte, c *chatChunk) bool {
	if !jsonscan.Valid(data) {
		return false
	}
	var seen [4]bool // id, created, model, choices
	ok := true
	err := jsonscan.Members(data, func(key []byte, escaped bool, v jsonscan.Span) bool {
		if escaped {
			ok = false
			return false
		}
		val := data[v.Start:v.End]
		switch string(key) {
		case "id":
			ok = once(&seen[0]) && plainString(val, &c.ID)
		case "created":
			ok = once(&seen[1]) && int64Value(val, &c.Created)
		case "model":
			ok = once(&seen[2]) && plainString(val, &c.Model)
		case "choices":
			ok = once(&seen[3]) && decodeChoicesFast(val, c)
		default:
			ok = !foldsTo(key, "id", "created", "model", "choices", "usage", "error")
		}
		return ok
	})
	return ok && err == nil
}

func decodeChoicesFast(val []byte, c *chatChunk) bool {
	if isNull(val) {
		c.Choices = nil
		return true
	}
	if val[0] != '[' {
		return false
	}
	c.Choices = make([]chatChoice, 0, 1) // [] decodes as an empty slice, not nil
	ok := true
	err := jsonscan.Elements(val, func(_ int, s jsonscan.Span) bool {
		c.Choices = append(c.Choices, chatChoice{})
		ok = decodeChoiceFast(val[s.Start:s.End], &c.Choices[len(c.Choices)-1])
		return ok
	})
	return ok && err == nil
}

func decodeChoiceFast(doc []byte, ch *chatChoice) bool {
	if doc[0] != '{' {
		return false // null or another type: json.Unmarshal decides
	}
	var seen [5]bool // index, delta, finish_reason, stop_reason, matched_stop
	ok := true
	err := jsonscan.Members(doc, func(key []byte, escaped bool, v jsonscan.Span) bool {
		if escaped {
			ok = false
			return false
		}
		val := doc[v.Start:v.End]
		switch string(key) {
		case "index":
			var n int64
			ok = once(&seen[0]) && int64Value(val, &n) && n == int64(int(n))
			ch.Index = int(n)
		case "delta":
			ok = once(&seen[1]) && decodeDeltaFast(val, &ch.Delta)
		case "finish_reason":
			ok = once(&seen[2]) && plainStringPtr(val, &ch.FinishReason)
		case "stop_reason":
			ok = once(&seen[3])
			ch.StopReason = json.RawMessage(bytes.Clone(val))
		case "matched_stop":
			ok = once(&seen[4])
			ch.MatchedStop = json.RawMessage(bytes.Clone(val))
		default:
			ok = !foldsTo(key, "index", "delta", "finish_reason", "stop_reason", "matched_stop")
		}
		return ok
	})
	return ok && err == nil
}

func decodeDeltaFast(val []byte, d *chatDelta) bool {
	if isNull(val) {
		return true // json.Unmarshal leaves a struct as it was for null
	}
	if val[0] != '{' {
		return false
	}
	var seen [4]bool // role, content, reasoning_content, reasoning
	ok := true
	err := jsonscan.Members(val, func(key []byte, escaped bool, v jsonscan.Span) bool {
		if escaped {
			ok = false
			return false
		}
		s := val[v.Start:v.End]
		switch string(key) {
		case "role":
			ok = once(&seen[0]) && plainString(s, &d.Role)
		case "content":
			ok = once(&seen[1]) && plainStringPtr(s, &d.Content)
		case "reasoning_content":
			ok = once(&seen[2]) && plainStringPtr(s, &d.ReasoningContent)
		case "reasoning":
			ok = once(&seen[3]) && plainStringPtr(s, &d.Reasoning)
		default: // tool_calls among them: json.Unmarshal decodes those
			ok = !foldsTo(key, "role", "content", "reasoning_content", "reasoning", "tool_calls")
		}
		return ok
	})
	return ok && err == nil
}

// once marks a field seen, and reports false if it was already.
func once(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}

func isNull(val []byte) bool { return string(val) == "null" }

// plainString decodes a string without escapes, of valid UTF-8 (what
// json.Unmarshal would not alter), or null (which leaves dst as it was).
func plainString(val []byte, dst *string) bool {
	if isNull(val) {
		return true
	}
	if len(val) < 2 || val[0] != '"' {
		return false
	}
	raw := val[1 : len(val)-1]
	if bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw) {
		return false
	}
	*dst = string(raw)
	return true
}

// plainStringPtr is plainString for an optional field: null sets it nil.
func plainStringPtr(val []byte, dst **string) bool {
	if isNull(val) {
		*dst = nil
		return true
	}
	var s string
	if !plainString(val, &s) {
		return false
	}
	*dst = &s
	return true
}

// int64Value decodes an integer written as one (no fraction or exponent),
// or null (which leaves dst as it was).
func int64Value(val []byte, dst *int64) bool {
	if isNull(val) {
		return true
	}
	n, err := strconv.ParseInt(string(val), 10, 64)
	if err != nil {
		return false
	}
	*dst = n
	return true
}

// foldsTo reports whether key equals one of names ignoring case, as
// encoding/json matches keys to fields.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if strings.EqualFold(string(key), n) {
			return true
		}
	}
	return false
}
