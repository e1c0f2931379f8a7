package codec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// goView is what a Go backend (encoding/json: case-insensitive names, the
// last of several matching members wins) reads of the decision fields.
type goView struct {
	Model               *string  `json:"model"`
	Stream              *bool    `json:"stream"`
	MaxTokens           *float64 `json:"max_tokens"`
	MaxCompletionTokens *float64 `json:"max_completion_tokens"`
	N                   *float64 `json:"n"`
}

// pythonView reads the decision fields as Python's json module does: exact
// names, the last member wins.
func pythonView(body []byte) (map[string]json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out[tok.(string)] = v
	}
	return out, true
}

// FuzzDecode_AgreesWithEveryDecoder: whenever Decode accepts a body, the
// model, stream flag and output limit it read are what a Go backend and a
// Python backend read too — so a check made on them cannot be bypassed by a
// body the backend reads another way.
func FuzzDecode_AgreesWithEveryDecoder(f *testing.F) {
	for _, seed := range []string{
		`{"model":"a","max_tokens":5,"stream":true}`,
		`{"model":"a","model":"b"}`,
		`{"Model":"b","model":"a"}`,
		`{"mod\u0065l":"b"}`,
		`{"model":"a","max_completion_tokens":2000,"max_tokens":1}`,
		`{"model":"a","ſtream":true}`,
		`{"model":"a","max_to\u212aens":9}`,
		`{"model":"a","n":2.0,"max_tokens":1e3}`,
		`{"model":"a","stream":null,"max_tokens":null}`,
		`{"model":"a","MAX_TOKENS":7}`,
		`{"model":"\u0061"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Decode(Chat, body)
		if err != nil {
			return
		}
		var g goView
		if err := json.Unmarshal(body, &g); err != nil {
			return // a body Go would refuse: no Go backend reads it otherwise
		}
		if g.Model != nil && *g.Model != r.Model {
			t.Fatalf("model: gateway %q, Go backend %q: %s", r.Model, *g.Model, body)
		}
		if g.Stream != nil && *g.Stream != r.Stream {
			t.Fatalf("stream: gateway %v, Go backend %v: %s", r.Stream, *g.Stream, body)
		}
		for _, v := range []*float64{g.MaxTokens, g.MaxCompletionTokens} {
			if v != nil && *v > float64(r.OutputLimit) {
				t.Fatalf("output limit: gateway %d, Go backend %v: %s", r.OutputLimit, *v, body)
			}
		}
		p, ok := pythonView(body)
		if !ok {
			return
		}
		if raw, has := p["model"]; has {
			var m string
			if json.Unmarshal(raw, &m) == nil && m != r.Model {
				t.Fatalf("model: gateway %q, Python backend %q: %s", r.Model, m, body)
			}
		}
		for _, k := range []string{"max_tokens", "max_completion_tokens", "max_new_tokens", "n_predict"} {
			var v float64
			if raw, has := p[k]; has && json.Unmarshal(raw, &v) == nil && v > float64(r.OutputLimit) {
				t.Fatalf("%s: gateway limit %d, Python backend %v: %s", k, r.OutputLimit, v, body)
			}
		}
		if raw, has := p["stream"]; has && strings.TrimSpace(string(raw)) == "true" && !r.Stream {
			t.Fatalf("stream: the gateway reads no stream, Python does: %s", body)
		}
	})
}
