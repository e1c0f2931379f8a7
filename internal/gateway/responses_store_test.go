package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/keys"
)

type respObj struct {
	ID                 string  `json:"id"`
	Store              bool    `json:"store"`
	Status             string  `json:"status"`
	PreviousResponseID *string `json:"previous_response_id"`
	Output             []struct {
		Type    string `json:"type"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
}

func (r respObj) text() string {
	var b strings.Builder
	for _, it := range r.Output {
		for _, c := range it.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// upstreamMessages returns the role: content lines of the chat request the
// backend got last.
func (e *env) upstreamMessages() []string {
	e.t.Helper()
	body := e.up.lastBody()
	msgs, _ := body["messages"].([]any)
	var out []string
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		out = append(out, fmt.Sprintf("%v: %v", mm["role"], mm["content"]))
	}
	return out
}

// previous_response_id continues a stored conversation, streaming or not:
// the backend gets the earlier turns (inputs and answers) before the new
// input, and GET/DELETE /v1/responses/{id} work for the key that made them.
func TestResponses_PreviousResponseIDContinuesTheStoredConversation(t *testing.T) {
	e := startEnv(t)
	post := func(key, body string) respObj {
		t.Helper()
		r := e.do("POST", "/v1/responses", key, body)
		var out respObj
		if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil {
			t.Fatalf("POST /v1/responses %s: %d %s", body, r.status, r.body)
		}
		return out
	}
	first := post(testMaster, `{"model":"qwen","input":"My name is Ada."}`)
	if !strings.HasPrefix(first.ID, "resp_") || !first.Store || first.text() != "Hello there" {
		t.Fatalf("first response: %+v", first)
	}

	// The second turn streams; the backend sees turn one before it.
	r := e.do("POST", "/v1/responses", testMaster, `{"model":"qwen","stream":true,"previous_response_id":"`+first.ID+`","input":[{"role":"user","content":"What is my name?"}]}`)
	if r.status != 200 {
		t.Fatalf("stream: %d %s", r.status, r.body)
	}
	var second respObj
	sc := bufio.NewScanner(strings.NewReader(r.body))
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, `"type":"response.completed"`) {
			var ev struct {
				Response respObj `json:"response"`
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			second = ev.Response
		}
	}
	want := []string{"user: My name is Ada.", "assistant: Hello there", "user: What is my name?"}
	if got := e.upstreamMessages(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("backend got %q, want %q", got, want)
	}
	if second.ID == "" || second.ID == first.ID || !second.Store || second.PreviousResponseID == nil || *second.PreviousResponseID != first.ID {
		t.Fatalf("second response (both upstream answers have the same chat id): %+v", second)
	}

	// A third turn (not streamed) continues the streamed one.
	third := post(testMaster, `{"model":"qwen","previous_response_id":"`+second.ID+`","input":"Thanks."}`)
	want = append(want, "assistant: "+second.text(), "user: Thanks.")
	if got := e.upstreamMessages(); fmt.Sprint(got) != fmt.Sprint(want) || second.text() == "" {
		t.Fatalf("backend got %q, want %q", got, want)
	}

	// Read back: the response as the client got it.
	r = e.do("GET", "/v1/responses/"+second.ID, testMaster, "")
	var got respObj
	if r.status != 200 || json.Unmarshal([]byte(r.body), &got) != nil || got.ID != second.ID || got.text() != second.text() {
		t.Fatalf("GET stored response: %d %s", r.status, r.body)
	}

	// Another key sees none of it.
	_, other, err := CreateKey(context.Background(), e.g.Store, keys.Key{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.g.Verifier.Reload(context.Background())
	if r = e.do("GET", "/v1/responses/"+second.ID, other, ""); r.status != 404 || !strings.Contains(r.body, "response_not_found") {
		t.Fatalf("another key's GET: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/v1/responses", other, `{"model":"qwen","previous_response_id":"`+second.ID+`","input":"hi"}`)
	if r.status != 400 || !strings.Contains(r.body, `"code":"previous_response_not_found"`) || !strings.Contains(r.body, `"param":"previous_response_id"`) {
		t.Fatalf("another key continuing: %d %s", r.status, r.body)
	}

	// store: false keeps nothing.
	unstored := post(testMaster, `{"model":"qwen","store":false,"input":"Forget this."}`)
	if unstored.Store {
		t.Fatalf("store:false response says store true: %+v", unstored)
	}
	if r = e.do("GET", "/v1/responses/"+unstored.ID, testMaster, ""); r.status != 404 {
		t.Fatalf("GET of a store:false response: %d %s", r.status, r.body)
	}

	// Deleting the first turn breaks the chain of the later ones, with an
	// error that says what to do.
	if r = e.do("DELETE", "/v1/responses/"+first.ID, testMaster, ""); r.status != 200 || !strings.Contains(r.body, `"deleted":true`) {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if r = e.do("DELETE", "/v1/responses/"+first.ID, testMaster, ""); r.status != 404 {
		t.Fatalf("second DELETE: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/v1/responses", testMaster, `{"model":"qwen","previous_response_id":"`+third.ID+`","input":"And now?"}`)
	if r.status != 400 || !strings.Contains(r.body, "previous_response_not_found") || !strings.Contains(r.body, "full conversation") {
		t.Fatalf("continuing a broken chain: %d %s", r.status, r.body)
	}
}

// With store_responses: false the Responses API is stateless, and says so.
func TestResponses_StorageOff(t *testing.T) {
	off := false
	e := startEnv(t, func(c *config.Config) { c.StoreResponses = &off })
	r := e.do("POST", "/v1/responses", testMaster, `{"model":"qwen","input":"hi"}`)
	var out respObj
	if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil || out.Store {
		t.Fatalf("response: %d %s", r.status, r.body)
	}
	if r = e.do("GET", "/v1/responses/"+out.ID, testMaster, ""); r.status != 404 || !strings.Contains(r.body, "store_responses: false") {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/v1/responses", testMaster, `{"model":"qwen","previous_response_id":"`+out.ID+`","input":"again"}`)
	if r.status != 400 || !strings.Contains(r.body, "store_responses: false") {
		t.Fatalf("previous_response_id with storage off: %d %s", r.status, r.body)
	}
}
