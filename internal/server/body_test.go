package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"llmgate/internal/admit"
	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/relay"
	"llmgate/internal/router"
	"llmgate/internal/server"
)

// bodyServer is an edge in front of a backend that answers any chat; the
// key "narrow" may use only model "a".
func bodyServer(t *testing.T, opt server.Options) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"a","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(up.Close)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  up: {url: %s}\nmodels:\n  a: {backend: up}\n  b: {backend: up}\n", up.URL)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The narrow key may use model a, once a minute.
	st := &memStore{keys: []*keys.Key{{ID: "key_narrow", Name: "narrow", Hash: keys.Hash(good), Models: []string{"a"}, RPM: 1}}}
	v, err := keys.NewVerifier(context.Background(), st, keys.HashBytes(master), nil)
	if err != nil {
		t.Fatal(err)
	}
	opt.Tables, opt.Verifier, opt.Logger = router.NewCurrent(router.New(cfg)), v, slog.New(slog.NewTextHandler(io.Discard, nil))
	if opt.Relay == nil {
		opt.Relay = relay.New(relay.Options{Logger: opt.Logger})
	}
	srv := httptest.NewServer(server.New(opt))
	t.Cleanup(srv.Close)
	return srv
}

// rawRequest sends the request line and headers of a POST declaring
// length bytes, then body, and returns the connection and a reader of the
// answer.
func rawRequest(t *testing.T, srv *httptest.Server, key string, length int, body string) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, length, body)
	return c, bufio.NewReader(c)
}

func status(t *testing.T, rd *bufio.Reader) (int, string) {
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBody_DeclaredSizeIsNotAllocated: 40 requests that declare 32 MB and
// send 30 bytes used to make the gateway allocate 32 MB each before
// reading. The buffer now grows as bytes arrive.
func TestBody_DeclaredSizeIsNotAllocated(t *testing.T) {
	srv := bodyServer(t, server.Options{BodyReadTimeout: 5 * time.Second, MaxBodyReadsPerKey: 100})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 40; i++ {
		rawRequest(t, srv, master, 32<<20, `{"model":"a","messages":[{"r`)
	}
	time.Sleep(200 * time.Millisecond) // the handlers are waiting for the rest
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Fatalf("heap grew %d MB for 40 declared-32MB bodies of 30 bytes", grew>>20)
	}
}

// TestBody_TooManyBodiesAtOnceFromOneKey: a key may be sending only so
// many bodies at once; the next gets a 429 before anything is read, while
// another key is served.
func TestBody_TooManyBodiesAtOnceFromOneKey(t *testing.T) {
	srv := bodyServer(t, server.Options{BodyReadTimeout: 5 * time.Second, MaxBodyReadsPerKey: 3})
	for i := 0; i < 3; i++ {
		rawRequest(t, srv, master, 1000, `{"model":"a"`) // trickling
	}
	time.Sleep(100 * time.Millisecond)
	_, rd := rawRequest(t, srv, master, 1000, `{"model":"a"`)
	if code, body := status(t, rd); code != 429 || !strings.Contains(body, "max_body_reads_per_key") {
		t.Fatalf("fourth body from one key: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"a","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+good)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another key meanwhile: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestBody_ReadTimeout: a body that does not arrive in time is a 408.
func TestBody_ReadTimeout(t *testing.T) {
	srv := bodyServer(t, server.Options{BodyReadTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, rd := rawRequest(t, srv, master, 1000, `{"model":"a"`)
	code, body := status(t, rd)
	if code != 408 || !strings.Contains(body, "body_read_timeout") {
		t.Fatalf("trickled body: %d %s", code, body)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("answered after %v", waited)
	}
}

// TestBody_ModelOutsideTheAllowListIsRefusedFromTheFirstBytes: a key
// allowed only model a gets its 403 for model b before it sends the rest
// of a large body.
func TestBody_ModelOutsideTheAllowListIsRefusedFromTheFirstBytes(t *testing.T) {
	srv := bodyServer(t, server.Options{BodyReadTimeout: 10 * time.Second})
	prefix := `{"model":"b","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000)
	_, rd := rawRequest(t, srv, good, 1<<20, prefix) // the rest never comes
	if code, body := status(t, rd); code != 403 || !strings.Contains(body, `may not use model \"b\"`) {
		t.Fatalf("%d %s", code, body)
	}
}

// TestBody_AKeyJustRefusedIsRefusedBeforeItsBodyIsRead: a key over its
// request rate gets its next 429 before the gateway reads a body, so
// repeating requests with large bodies costs the gateway nothing.
func TestBody_AKeyJustRefusedIsRefusedBeforeItsBodyIsRead(t *testing.T) {
	adm := admit.New(admit.Options{Limiter: limit.NewMemory()})
	srv := bodyServer(t, server.Options{Precheck: adm, Relay: relay.New(relay.Options{Admission: adm}), BodyReadTimeout: 10 * time.Second})
	send := func() int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"a","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+good)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if first, second := send(), send(); first != 200 || second != 429 {
		t.Fatalf("first %d, second %d: want 200 then 429 (rpm 1)", first, second)
	}
	// The third declares a large body and sends only its start: the 429
	// comes without the gateway waiting for the rest.
	_, rd := rawRequest(t, srv, good, 8<<20, `{"model":"a","messages":[`)
	if code, body := status(t, rd); code != 429 || !strings.Contains(body, "rate_limit_requests") {
		t.Fatalf("third, body not sent: %d %s", code, body)
	}
}
