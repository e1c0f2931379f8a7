package cluster_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"llmgate/internal/testenv"
)

// A Responses API conversation started on one replica continues on the
// other (previous_response_id), and a response deleted on one is gone on
// the other: stored responses live in the shared PostgreSQL database.
func TestReplicas_StoredResponsesAreSharedThroughTheDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two gateway processes")
	}
	pg := testenv.Postgres(t)
	var mu sync.Mutex
	var lastMessages []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Role, Content string }
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		lastMessages = lastMessages[:0]
		for _, m := range req.Messages {
			lastMessages = append(lastMessages, m.Role+": "+m.Content)
		}
		n := len(lastMessages)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"answer %d"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`, n)
	}))
	t.Cleanup(up.Close)
	bin := buildBinary(t)
	cfg := fmt.Sprintf("database: %q\nbackends:\n  up: {url: %q}\nmodels:\n  m: {backend: up}\n", pg, up.URL+"/v1")
	a := startReplica(t, bin, "A", cfg)
	b := startReplica(t, bin, "B", cfg)

	do := func(method, base, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+master)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	id := func(body string) string {
		var r struct{ ID string }
		_ = json.Unmarshal([]byte(body), &r)
		return r.ID
	}
	st, body := do("POST", a.base, "/v1/responses", `{"model":"m","input":"first question"}`)
	first := id(body)
	if st != 200 || first == "" {
		t.Fatalf("first turn on A: %d %s", st, body)
	}
	st, body = do("POST", b.base, "/v1/responses", `{"model":"m","previous_response_id":"`+first+`","input":"second question"}`)
	if st != 200 || id(body) == "" {
		t.Fatalf("second turn on B: %d %s", st, body)
	}
	mu.Lock()
	got := fmt.Sprint(lastMessages)
	mu.Unlock()
	if want := "[user: first question assistant: answer 1 user: second question]"; got != want {
		t.Fatalf("the backend got %s from B, want %s", got, want)
	}
	if st, body = do("GET", b.base, "/v1/responses/"+first, ""); st != 200 || id(body) != first {
		t.Fatalf("GET on B of A's response: %d %s", st, body)
	}
	if st, body = do("DELETE", a.base, "/v1/responses/"+first, ""); st != 200 {
		t.Fatalf("DELETE on A: %d %s", st, body)
	}
	if st, body = do("GET", b.base, "/v1/responses/"+first, ""); st != 404 {
		t.Fatalf("GET on B after DELETE on A: %d %s, want 404", st, body)
	}
}
