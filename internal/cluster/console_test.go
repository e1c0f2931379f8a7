package cluster_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"llmgate/internal/testenv"
)

// browser is one console user: its session cookie and CSRF token, sent to
// whichever replica the load balancer picks.
type browser struct {
	t            *testing.T
	cookie, csrf string
}

func (b *browser) post(base, path, body string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", base)
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "llmgate_session", Value: b.cookie})
		req.Header.Set("X-CSRF-Token", b.csrf)
	}
	return b.send(req)
}

func (b *browser) get(base, path string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.AddCookie(&http.Cookie{Name: "llmgate_session", Value: b.cookie})
	return b.send(req)
}

func (b *browser) send(req *http.Request) (int, string) {
	b.t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	for _, ck := range resp.Cookies() {
		if ck.Name == "llmgate_session" && ck.MaxAge >= 0 {
			b.cookie = ck.Value
		}
	}
	var m struct{ CSRF string }
	if json.Unmarshal(out, &m) == nil && m.CSRF != "" {
		b.csrf = m.CSRF
	}
	return resp.StatusCode, string(out)
}

func TestReplicas_ConsoleSessionsAreSharedThroughTheDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two gateway processes")
	}
	pg := testenv.Postgres(t)
	up := newUpstream(t, 0, 5)
	bin := buildBinary(t)
	cfg := fmt.Sprintf("database: %q\nbackends:\n  up: {url: %q}\nmodels:\n  m: {backend: up}\n", pg, up.URL+"/v1")
	a := startReplica(t, bin, "A", cfg, "LLMGATE_CONSOLE=on")
	b := startReplica(t, bin, "B", cfg, "LLMGATE_CONSOLE=on")

	admin := &browser{t: t}
	if st, body := admin.post(a.base, "/ui/api/login", `{"key":"`+master+`"}`); st != 200 {
		t.Fatalf("sign-in on A: %d %s", st, body)
	}
	// B accepts A's cookie and CSRF token: no sticky sessions needed.
	st, body := admin.post(b.base, "/ui/api/keys", `{"name":"console-user"}`)
	var created struct {
		Key    struct{ ID string }
		Secret string
	}
	if err := json.Unmarshal([]byte(body), &created); st != http.StatusCreated || err != nil {
		t.Fatalf("create a key on B with A's session: %d %s", st, body)
	}
	user := &browser{t: t}
	if st, body := user.post(b.base, "/ui/api/login", `{"key":"`+created.Secret+`"}`); st != 200 {
		t.Fatalf("user sign-in on B: %d %s", st, body)
	}
	// The playground on A runs as the user's key, although neither
	// replica holds its secret.
	if st, body := user.post(a.base, "/ui/api/chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`); st != 200 {
		t.Fatalf("playground on A with B's session: %d %s", st, body)
	}
	// Revoking on A ends the user's session on B at once.
	if st, body := admin.post(a.base, "/ui/api/keys/"+created.Key.ID+"/revoke", ""); st != 200 {
		t.Fatalf("revoke on A: %d %s", st, body)
	}
	if st, body := user.get(b.base, "/ui/api/me"); st != http.StatusUnauthorized {
		t.Fatalf("revoked key's session on B: %d %s, want 401", st, body)
	}
	// Signing out on B ends the admin's session on A.
	if st, body := admin.get(a.base, "/ui/api/me"); st != 200 {
		t.Fatalf("admin on A: %d %s", st, body)
	}
	if st, body := admin.post(b.base, "/ui/api/logout", ""); st != 200 {
		t.Fatalf("sign-out on B: %d %s", st, body)
	}
	// No cache: the very next request on A is refused.
	if st, body := admin.get(a.base, "/ui/api/me"); st != http.StatusUnauthorized {
		t.Fatalf("admin on A after signing out on B: %d %s, want 401", st, body)
	}
}
