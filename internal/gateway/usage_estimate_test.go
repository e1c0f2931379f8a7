package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// noUsageAnswer answers without usage, as some engines do, in compact JSON
// or spaced the way Python's json.dumps writes it.
func noUsageAnswer(spaced bool) func(*faultUpstream, http.ResponseWriter, *http.Request) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	q, _ := json.Marshal(text)
	enc := func(s string) string {
		if spaced {
			s = strings.NewReplacer(`":`, `": `, `,"`, `, "`).Replace(s)
		}
		return s
	}
	return func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		var body struct {
			Stream bool `json:"stream"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		if !body.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, enc(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":`+string(q)+`},"finish_reason":"stop"}]}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < len(text); i += 45 {
			part, _ := json.Marshal(text[i:min(i+45, len(text))])
			fmt.Fprintf(w, "data: %s\n\n", enc(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":`+string(part)+`}}]}`))
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// TestUsageEstimate_SpacedJSONCountsLikeCompact: a backend that sends no
// usage is billed from the text it generated; one that spaces its JSON was
// recorded with completion_tokens=0 and cost $0. The estimate from spaced
// JSON is within 10 % of the one from compact JSON, for chat and Messages,
// streamed or not.
func TestUsageEstimate_SpacedJSONCountsLikeCompact(t *testing.T) {
	t.Parallel()
	compact := newUpstream(t, "compact", noUsageAnswer(false))
	spaced := newUpstream(t, "spaced", noUsageAnswer(true))
	f := startFaultGW(t, fmt.Sprintf(`
backends:
  compact: {url: %s/v1}
  spaced: {url: %s/v1}
models:
  compact: {backend: compact, input_price: 1, output_price: 1000}
  spaced: {backend: spaced, input_price: 1, output_price: 1000}
`, compact.URL, spaced.URL))
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":%q,"stream":%v,"messages":[{"role":"user","content":"write"}]}`},
		{"/v1/messages", `{"model":%q,"stream":%v,"max_tokens":1000,"messages":[{"role":"user","content":"write"}]}`},
	} {
		for _, stream := range []bool{false, true} {
			got := map[string]int{}
			for _, model := range []string{"compact", "spaced"} {
				before, err := f.g.Store.Recent(context.Background(), 1000)
				if err != nil {
					t.Fatal(err)
				}
				n := len(before)
				status, _, body := f.request("POST", tc.path, fmt.Sprintf(tc.body, model, stream))
				if status != 200 {
					t.Fatalf("%s %s stream=%v: %d %s", tc.path, model, stream, status, body)
				}
				rec := f.ledger(n + 1)[0]
				if !rec.Estimated || rec.CostUSD <= 0 {
					t.Fatalf("%s %s stream=%v: record %+v, want an estimate with a cost", tc.path, model, stream, rec)
				}
				got[model] = rec.CompletionTokens
			}
			t.Logf("%s stream=%v: completion_tokens estimated %d from compact JSON, %d from spaced JSON", tc.path, stream, got["compact"], got["spaced"])
			if d := got["spaced"] - got["compact"]; got["compact"] == 0 || d*10 > got["compact"] || -d*10 > got["compact"] {
				t.Errorf("%s stream=%v: spaced %d vs compact %d completion tokens: more than 10 %% apart", tc.path, stream, got["spaced"], got["compact"])
			}
		}
	}
}
