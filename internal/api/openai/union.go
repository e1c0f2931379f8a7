package openai

import (
	"bytes"
	"encoding/json"
	"errors"
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
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*text = &s
		return nil
	case len(b) > 0 && b[0] == '[':
		*list = []T{}
		return json.Unmarshal(b, list)
	default:
		return errors.New(what)
	}
}
