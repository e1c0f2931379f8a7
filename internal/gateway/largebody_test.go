package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestLargeBodies_AreHeldToTheMemoryCapAcrossRequests: with
// max_large_body_memory at 2 MiB, a 1.5 MiB request being answered holds
// 1.5 MiB of it until it ends; another one, declared or chunked, waits
// body_read_timeout and gets a 503 large_bodies_busy in its protocol's
// envelope; once the first ended, the next is served. Small requests pass
// meanwhile.
func TestLargeBodies_AreHeldToTheMemoryCapAcrossRequests(t *testing.T) {
	up, arrived, free := holdingUpstream(t, "up")
	defer free() // a failure must not leave the upstream's handler waiting
	f := startFaultGW(t, fmt.Sprintf("max_large_body_memory: 2097152\nbody_read_timeout: 300ms\nbackends:\n  up: {url: %s/v1}\nmodels:\n  m: {backend: up}\n", up.URL))
	// 1.5 MiB, the same body in both dialects.
	bigBody := fmt.Sprintf(`{"model":"m","max_tokens":20,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("a", 1536<<10))
	big := func(string) string { return bigBody }
	send := func(path, body string, chunked bool) (int, string) {
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // no length known: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+f.g.Addr+path, rd)
		req.Header.Set("Authorization", "Bearer "+testMaster)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	first := make(chan string, 1)
	go func() {
		code, body := send("/v1/chat/completions", big("chat"), false)
		first <- fmt.Sprint(code, " ", body)
	}()
	<-arrived
	for _, c := range []struct {
		path    string
		chunked bool
	}{{"/v1/chat/completions", false}, {"/v1/chat/completions", true}, {"/v1/messages", false}} {
		code, body := send(c.path, big(strings.TrimPrefix(c.path, "/v1/")), c.chunked)
		var env struct {
			Type  string `json:"type"`
			Error struct {
				Code, Type, Message string
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &env)
		wantEnvelope := env.Error.Code == "large_bodies_busy"
		if c.path == "/v1/messages" {
			wantEnvelope = env.Type == "error" && env.Error.Type == "overloaded_error" && strings.Contains(env.Error.Message, "max_large_body_memory")
		}
		if code != http.StatusServiceUnavailable || !wantEnvelope {
			t.Fatalf("%s (chunked %v) while 1.5 of 2 MiB are held: %d %s; want a 503 large_bodies_busy in the protocol's envelope", c.path, c.chunked, code, body)
		}
	}
	if code, body := send("/v1/chat/completions", `{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`, false); code != http.StatusOK {
		t.Fatalf("a small request meanwhile: %d %s", code, body)
	}
	free()
	if got := <-first; !strings.HasPrefix(got, "200 ") {
		t.Fatalf("first large request: %s", got)
	}
	if code, body := send("/v1/chat/completions", big("chat"), true); code != http.StatusOK {
		t.Fatalf("a large request once the first ended: %d %s", code, body)
	}
}
