package translate

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"llmgate/internal/api/openai"
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
// choices with text or reasoning deltas and finish reasons, their simple
// escapes undone: code is full of quotes and newlines) without
// reflection, into c as json.Unmarshal would; tool-call deltas too (a
// coding agent's tool arguments stream one chunk per token, with the
// simple escapes of JSON inside a JSON string). It reports false, leaving
// c to be reset and decoded by json.Unmarshal, for anything else: usage,
// an error, invalid JSON, a \u escape or an escaped key, a key
// that matches a field only case-insensitively, a field given twice, a
// value of another type. FuzzDecodeChunkFast holds it to json.Unmarshal's
// result for every input it accepts.
func decodeChunkFast(data []byte, c *chatChunk) bool {
	if !jsonscan.Valid(data) {
		return false
	}
	var seen [4]bool // id, created, model, choices
	return plainMembers(data, func(key, val []byte) bool {
		ok := false
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
	return plainMembers(doc, func(key, val []byte) bool {
		ok := false
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
}

func decodeDeltaFast(val []byte, d *chatDelta) bool {
	if isNull(val) {
		return true // json.Unmarshal leaves a struct as it was for null
	}
	if val[0] != '{' {
		return false
	}
	var seen [5]bool // role, content, reasoning_content, reasoning, tool_calls
	return plainMembers(val, func(key, s []byte) bool {
		ok := false
		switch string(key) {
		case "role":
			ok = once(&seen[0]) && plainString(s, &d.Role)
		case "content":
			ok = once(&seen[1]) && jsonStringPtr(s, &d.Content)
		case "reasoning_content":
			ok = once(&seen[2]) && jsonStringPtr(s, &d.ReasoningContent)
		case "reasoning":
			ok = once(&seen[3]) && jsonStringPtr(s, &d.Reasoning)
		case "tool_calls":
			ok = once(&seen[4]) && decodeToolCallsFast(s, &d.ToolCalls)
		default:
			ok = !foldsTo(key, "role", "content", "reasoning_content", "reasoning", "tool_calls")
		}
		return ok
	})
}

func decodeToolCallsFast(val []byte, dst *[]openai.ToolCall) bool {
	if isNull(val) {
		*dst = nil
		return true
	}
	if val[0] != '[' {
		return false
	}
	*dst = make([]openai.ToolCall, 0, 1)
	ok := true
	err := jsonscan.Elements(val, func(_ int, s jsonscan.Span) bool {
		*dst = append(*dst, openai.ToolCall{})
		ok = decodeToolCallFast(val[s.Start:s.End], &(*dst)[len(*dst)-1])
		return ok
	})
	return ok && err == nil
}

func decodeToolCallFast(doc []byte, tc *openai.ToolCall) bool {
	if doc[0] != '{' {
		return false
	}
	var seen [4]bool // index, id, type, function
	return plainMembers(doc, func(key, val []byte) bool {
		ok := false
		switch string(key) {
		case "index":
			ok = once(&seen[0]) && intPtr(val, &tc.Index)
		case "id":
			ok = once(&seen[1]) && jsonString(val, &tc.ID)
		case "type":
			ok = once(&seen[2]) && jsonString(val, &tc.Type)
		case "function":
			ok = once(&seen[3]) && decodeFunctionFast(val, &tc.Function)
		default:
			ok = !foldsTo(key, "index", "id", "type", "function")
		}
		return ok
	})
}

func decodeFunctionFast(val []byte, f *openai.FunctionCall) bool {
	if isNull(val) {
		return true
	}
	if val[0] != '{' {
		return false
	}
	var seen [2]bool // name, arguments
	return plainMembers(val, func(key, s []byte) bool {
		ok := false
		switch string(key) {
		case "name":
			ok = once(&seen[0]) && jsonString(s, &f.Name)
		case "arguments":
			ok = once(&seen[1]) && jsonString(s, &f.Arguments)
		default:
			ok = !foldsTo(key, "name", "arguments")
		}
		return ok
	})
}

// intPtr decodes an int written as one, into a new int; null sets dst nil.
func intPtr(val []byte, dst **int) bool {
	if isNull(val) {
		*dst = nil
		return true
	}
	var n int64
	if !int64Value(val, &n) || n != int64(int(n)) {
		return false
	}
	i := int(n)
	*dst = &i
	return true
}

// jsonString is plainString that also undoes the one-character escapes
// (\" \\ \/ \b \f \n \r \t); a \u escape is left to json.Unmarshal.
func jsonString(val []byte, dst *string) bool {
	if isNull(val) {
		return true
	}
	if len(val) < 2 || val[0] != '"' {
		return false
	}
	raw := val[1 : len(val)-1]
	i := bytes.IndexByte(raw, '\\')
	if i < 0 {
		return plainString(val, dst)
	}
	if !utf8.Valid(raw) {
		return false
	}
	out := make([]byte, 0, len(raw))
	for i >= 0 {
		out = append(out, raw[:i]...)
		if i+1 >= len(raw) {
			return false
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			out = append(out, raw[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default:
			return false
		}
		raw = raw[i+2:]
		i = bytes.IndexByte(raw, '\\')
	}
	out = append(out, raw...)
	*dst = string(out)
	return true
}

// plainMembers calls f with each member of the object doc (its key and
// value), stopping at the first false; it reports false for that, for an
// escaped key (json.Unmarshal would match the key unescaped) and for a
// document jsonscan refuses.
func plainMembers(doc []byte, f func(key, val []byte) bool) bool {
	ok := true
	err := jsonscan.Members(doc, func(key []byte, escaped bool, v jsonscan.Span) bool {
		ok = !escaped && f(key, doc[v.Start:v.End])
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

// jsonStringPtr is jsonString for an optional field: null sets it nil.
func jsonStringPtr(val []byte, dst **string) bool {
	if isNull(val) {
		*dst = nil
		return true
	}
	var s string
	if !jsonString(val, &s) {
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
