package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"llmgate/internal/jsonscan"
)

// DecodeStringOrList decodes the union the LLM APIs use for content and
// input: a JSON string (into *text), an array (into *list, never nil after
// an array, even an empty one), or null (both left unset). what names the
// accepted forms in the error.
func DecodeStringOrList[T any](b []byte, text **string, list *[]T, what string) error {
	b = bytes.TrimSpace(b)
	*text, *list = nil, nil
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		s, err := decodeString(b)
		if err != nil {
			return err
		}
		*text = &s
		return nil
	case len(b) > 0 && b[0] == '[':
		*list = Presized[T](b)
		return json.Unmarshal(b, list)
	default:
		return errors.New(what)
	}
}

// decodeString decodes the JSON string b. A string without escapes, of
// valid UTF-8 and without control characters, is its bytes between the
// quotes: one copy, without a decoder's state (a request of many short
// messages decodes one such string per message).
func decodeString(b []byte) (string, error) {
	if len(b) >= 2 && b[len(b)-1] == '"' {
		inner := b[1 : len(b)-1]
		plain := utf8.Valid(inner)
		for _, c := range inner {
			if c < 0x20 || c == '\\' || c == '"' {
				plain = false
				break
			}
		}
		if plain {
			return string(inner), nil
		}
	}
	var s string
	err := json.Unmarshal(b, &s)
	return s, err
}

// Presized returns an empty slice with room for the elements of the JSON
// array arr, for encoding/json to decode it into (it appends to the
// capacity it finds): the slice is made once at its size, not grown by
// doubling then by a quarter, which for an array of many small elements
// allocated several times the final slice. Not an array: a nil slice.
func Presized[T any](arr []byte) []T {
	n, err := jsonscan.Len(arr)
	if err != nil {
		return nil
	}
	return make([]T, 0, n)
}
