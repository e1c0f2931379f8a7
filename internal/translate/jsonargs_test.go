package translate

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

var argsSamples = []string{
	`{}`, `{"a":1}`, ` {"path":"a/b.go","content":"x := \"}\" // {"} `, `{"a":[1,{"b":"]"}],"c":"\\"}`,
	`[1,2]`, `"str"`, `12`, `true`, `null`, ``, ` `, `{`, `{"a":`, `{"a":}`, `{} x`, `{}{}`, `}`, `]{}`,
	`{"a":"\u00e9\\\"}"}`, `{"a":1}  ` + "\n", `{"a":1} }`, `12 3`, `{"k":"v"`, `"unterminated`, `{"a":tru}`,
}

// argsBuf.Complete agrees with json.Valid of everything written so far,
// after every fragment, however the text is cut.
func TestArgsBuf_CompleteIsJSONValidOfTheWholeAfterEveryFragment(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, s := range argsSamples {
		for range 20 {
			var a argsBuf
			for i := 0; i < len(s); {
				n := 1 + rng.IntN(4)
				if i+n > len(s) {
					n = len(s) - i
				}
				a.WriteString(s[i : i+n])
				i += n
				if got, want := a.Complete(), json.Valid([]byte(s[:i])); got != want {
					t.Fatalf("%q after %q: Complete = %v, json.Valid = %v", s, s[:i], got, want)
				}
			}
			if got, want := a.Complete(), json.Valid([]byte(s)); got != want {
				t.Fatalf("%q: Complete = %v, json.Valid = %v", s, got, want)
			}
			if a.String() != s {
				t.Fatalf("String = %q, want %q", a.String(), s)
			}
		}
	}
}

func FuzzArgsBuf(f *testing.F) {
	for _, s := range argsSamples {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, s string, cut uint8) {
		step := int(cut%8) + 1
		var a argsBuf
		for i := 0; i < len(s); i += step {
			j := min(i+step, len(s))
			a.WriteString(s[i:j])
			if got, want := a.Complete(), json.Valid([]byte(s[:j])); got != want {
				t.Fatalf("%q after %q: Complete = %v, json.Valid = %v", s, s[:j], got, want)
			}
		}
	})
}

// Streaming a long argument in many fragments costs time linear in it: a
// 200 KB argument in 5-byte fragments is scanned once, not once per
// fragment (that was 8 GB of copying and validating).
func BenchmarkArgsBuf_LongArgumentInSmallFragments(b *testing.B) {
	arg := `{"content":"` + strings.Repeat("x", 200<<10) + `"}`
	for b.Loop() {
		var a argsBuf
		for i := 0; i < len(arg); i += 5 {
			a.WriteString(arg[i:min(i+5, len(arg))])
			_ = a.Complete()
		}
	}
}

// BenchmarkStreams_WaitingParallelCall streams a call whose arguments come
// in n fragments of 16 bytes while a second call waits (an engine
// interleaving parallel calls): the time per op grows with n, not n².
// Measured: 7 ms and 77 ms for 1,000 and 8,000 fragments; checking
// json.Valid of all the arguments at every fragment took 34 ms and 2.3 s.
func BenchmarkStreams_WaitingParallelCall(b *testing.B) {
	first := [][]byte{
		chunkJSON(`{"tool_calls":[{"index":0,"id":"a","function":{"name":"write","arguments":"{\"content\":\""}}]}`, ""),
		chunkJSON(`{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{\"y\""}}]}`, ""),
	}
	frag := chunkJSON(`{"tool_calls":[{"index":0,"function":{"arguments":"xxxxxxxxxxxxxxxx"}}]}`, "")
	for _, n := range []int{1000, 8000} {
		for name, mk := range map[string]func() func([]byte) error{
			"anthropic": func() func([]byte) error {
				tr := NewChatToAnthropicStream("m", 1)
				return func(b []byte) error { _, err := tr.Feed(b); return err }
			},
			"responses": func() func([]byte) error {
				tr := NewChatToResponsesStream(nil)
				return func(b []byte) error { _, err := tr.Feed(b); return err }
			},
		} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				for b.Loop() {
					feed := mk()
					for _, c := range first {
						if err := feed(c); err != nil {
							b.Fatal(err)
						}
					}
					for range n {
						if err := feed(frag); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
