package jsonscan

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestFind_TopLevelOnly(t *testing.T) {
	doc := []byte(`{"messages":[{"role":"user","content":"{\"model\":\"fake\"}"}],"nested":{"model":"no"},"model":"qwen\u002d7b","stream":true}`)
	sp, err := Find(doc, "model", "stream", "stream_options")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := String(doc, sp[0]); !ok || m != "qwen-7b" {
		t.Fatalf("model = %q %v", m, ok)
	}
	if !Bool(doc, sp[1]) {
		t.Fatal("stream should be true")
	}
	if sp[2].Valid() {
		t.Fatal("stream_options should be absent")
	}
}

func TestReplaceAndInsert_KeepValidJSON(t *testing.T) {
	doc := []byte(`{ "model" : "a", "stream": true }`)
	sp, _ := Find(doc, "model")
	out := Replace(doc, sp[0], []byte(`"b"`))
	out = Insert(out, "stream_options", []byte(`{"include_usage":true}`))
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("invalid: %s: %v", out, err)
	}
	if v["model"] != "b" || v["stream_options"].(map[string]any)["include_usage"] != true {
		t.Fatalf("got %s", out)
	}
}

func TestFields_RejectsNonObject(t *testing.T) {
	if err := Fields([]byte(`[1,2]`), func([]byte, Span) bool { return true }); err != ErrNotObject {
		t.Fatalf("err = %v", err)
	}
}

func TestSyntaxOffset_PointsAtError(t *testing.T) {
	off, msg := SyntaxOffset([]byte(`{"model": "a",, }`))
	if off != 15 || msg == "" {
		t.Fatalf("offset %d msg %q", off, msg)
	}
}

func FuzzFind(f *testing.F) {
	f.Add([]byte(`{"model":"x","stream":false}`))
	f.Add([]byte(`{"a":[{"b":"}"}],"model":"\"q\""}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		if !json.Valid(doc) {
			return
		}
		var want map[string]json.RawMessage
		isObj := json.Unmarshal(doc, &want) == nil
		sp, err := Find(doc, "model")
		if !isObj {
			return
		}
		if err != nil {
			t.Fatalf("valid object rejected: %s: %v", doc, err)
		}
		if raw, ok := want["model"]; ok && sp[0].Valid() {
			if got := doc[sp[0].Start:sp[0].End]; string(got) != string(raw) {
				// Duplicate keys: encoding/json keeps the last, Find the first.
				var n int
				_ = Fields(doc, func(k []byte, _ Span) bool {
					if string(k) == "model" {
						n++
					}
					return true
				})
				if n < 2 {
					t.Fatalf("model span %q, want %q", got, raw)
				}
			}
		}
	})
}

func TestElements_SpansEachElement(t *testing.T) {
	doc := []byte(` [ {"a":[1,"]"]}, "x,y" ,3,[] ] `)
	var got []string
	if err := Elements(doc, func(i int, s Span) bool {
		got = append(got, string(doc[s.Start:s.End]))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{`{"a":[1,"]"]}`, `"x,y"`, `3`, `[]`}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("element %d = %q, want %q", i, got[i], want[i])
		}
	}
	if err := Elements([]byte(`{"a":1}`), func(int, Span) bool { return true }); err != ErrNotArray {
		t.Errorf("object: err = %v", err)
	}
}

func TestFields_StringsWithEscapedQuotesAndBackslashes(t *testing.T) {
	doc := []byte(`{"a":"x\"y\\","b":"\\\"","c":"\\\\","d":1}`)
	var keys []string
	var vals []string
	if err := Fields(doc, func(key []byte, val Span) bool {
		keys = append(keys, string(key))
		vals = append(vals, string(doc[val.Start:val.End]))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys, ","); got != "a,b,c,d" {
		t.Fatalf("keys %s (values %q)", got, vals)
	}
	if vals[0] != `"x\"y\\"` || vals[1] != `"\\\""` || vals[2] != `"\\\\"` {
		t.Fatalf("values %q", vals)
	}
	if err := Fields([]byte(`{"a":"x\"}`), func([]byte, Span) bool { return true }); err == nil {
		t.Fatal("a string whose last quote is escaped was taken as closed")
	}
}

func TestLen_CountsTopLevelElementsOnly(t *testing.T) {
	for doc, want := range map[string]int{`[]`: 0, ` [ 1 ] `: 1, `[1,[2,3],{"a":[4]},"x,y"]`: 4} {
		if n, err := Len([]byte(doc)); err != nil || n != want {
			t.Errorf("Len(%s) = %d, %v; want %d", doc, n, err, want)
		}
	}
	if _, err := Len([]byte(`{"a":1}`)); !errors.Is(err, ErrNotArray) {
		t.Errorf("Len of an object: %v, want ErrNotArray", err)
	}
}
