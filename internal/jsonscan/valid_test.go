package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

var validCorpus = []string{
	`{"a":1}`, `[1,2,"x"]`, `"\u00e9"`, `01`, `1e5`, "{\"a\":\"\x01\"}", " {}\n", `{"a":1,}`, `"\ud800"`,
	"\"\xff\"", `-0`, `1.`, `[]`, `{"a":[{"b":null}]}`, `nul`, `truex`, "{\n  \"pretty\": true\n}",
	"\"tab\there\"", `{"a":"\q"}`, `{"a":1}{"b":2}`, ``, ` `, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
}

// Valid must agree with encoding/json.Valid on everything.
func TestValid_AgreesWithEncodingJSON(t *testing.T) {
	for _, s := range validCorpus {
		if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", s, got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range validCorpus {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

func BenchmarkValid_LargeChatRequest(b *testing.B) {
	doc := []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat(`Context: lorem ipsum dolor sit amet, \"quoted\" and \u00e9 é. `, 2000) + `"},{"role":"user","content":"hi"}]}`)
	b.Run("jsonscan.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for i := 0; i < b.N; i++ {
			Valid(doc)
		}
	})
	b.Run("encoding/json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for i := 0; i < b.N; i++ {
			json.Valid(doc)
		}
	})
}
