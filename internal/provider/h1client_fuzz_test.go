package provider

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
)

// FuzzH1ClientResponse has a backend answer with arbitrary bytes (then
// close its side) and fails when the builtin HTTP/1.1 client and
// net/http's Transport, each behind a Backend as the gateway builds it,
// hand the gateway different answers: status, headers, framing
// (Content-Length, Transfer-Encoding, Close), body bytes and whether the
// body ended in an error, trailers, or an error instead of an answer.
// Requests are the gateway's: a POST with a JSON body or a GET.
//
// It also checks what only the builtin client decides, its connection
// pool: a second request must get the same answer as the first (a
// pooled connection the backend has closed is retried on a new one; bytes
// past the end of the first answer are never read as the second).
func FuzzH1ClientResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi!",
		"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nhi\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=1\r\nhi\r\n0\r\nX-Usage: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n16\r\ndata: {\"choices\":[]}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nuntil the close",
		"HTTP/1.0 200 OK\r\n\r\nuntil the close",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
		"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nraw bytes",
		"HTTP/1.1 101 Switching Protocols\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
		"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
		"http/1.1 200 ok\r\nContent-Length: 0\r\n\r\n",
		"ICY 200 OK\r\n\r\nx",
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi",
		"HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nNo colon\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nhi",
		"",
		"HTTP/1.1 200 OK\r\nContent-Len",
	} {
		f.Add(true, []byte(s))
		f.Add(false, []byte(s))
	}
	// net/http's Transport logs bytes past an answer's end to the
	// standard logger: expected here.
	log.SetOutput(io.Discard)
	f.Cleanup(func() { log.SetOutput(os.Stderr) })
	f.Fuzz(func(t *testing.T, post bool, raw []byte) {
		url := serveRawAnswer(t, raw)
		builtin := NewBackend(&config.Backend{Name: "up", BaseURL: url + "/v1"})
		standard := NewBackend(&config.Backend{Name: "up", BaseURL: url + "/v1", UpstreamClient: config.UpstreamClientStdlib})
		defer builtin.Close()
		defer standard.Close()
		if builtin.h1 == nil || standard.h1 != nil {
			t.Fatal("the backends do not use the clients under test")
		}
		got, want := answerOf(t, builtin, post), answerOf(t, standard, post)
		if got != want {
			t.Fatalf("the clients differ on the answer %q (POST %v)\nbuiltin:   %s\nTransport: %s", raw, post, got, want)
		}
		if again := answerOf(t, builtin, post); again != got {
			t.Fatalf("the builtin client's second request got another answer from %q (POST %v)\nfirst:  %s\nsecond: %s", raw, post, got, again)
		}
	})
}

// answerOf sends one request through b and describes what came back.
func answerOf(t *testing.T, b *Backend, post bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var body []byte
	if post {
		body = []byte(`{"model":"m"}`)
	}
	req, err := b.NewRequest(ctx, "/chat/completions", body, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.Do(req)
	if err != nil {
		var ae *apierror.Error
		if errors.As(err, &ae) && ae.Code == "backend_timeout" {
			t.Fatalf("a request to a backend that answered and closed timed out: %v", err)
		}
		return "error" // both failing is agreement: the texts differ by client
	}
	defer resp.Body.Close()
	var s strings.Builder
	fmt.Fprintf(&s, "%d %s close=%v cl=%d te=%q", resp.StatusCode, resp.Proto, resp.Close, resp.ContentLength, resp.TransferEncoding)
	for _, k := range slices.Sorted(maps.Keys(resp.Header)) {
		fmt.Fprintf(&s, " | %s: %q", k, resp.Header[k])
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Fprintf(&s, " | body %q, error %v", data, err != nil)
	for _, k := range slices.Sorted(maps.Keys(resp.Trailer)) {
		fmt.Fprintf(&s, " | trailer %s: %q", k, resp.Trailer[k])
	}
	return s.String()
}

var (
	rawOnce sync.Once
	rawURL  string
	rawMu   sync.Mutex
	rawNext []byte
)

// serveRawAnswer has the fuzz target's backend answer raw from now on.
// The backend is started once (a listener per input would exhaust the
// loopback ports): it reads one request per connection, writes the
// current raw, closes its write side and waits for the client to close.
func serveRawAnswer(t *testing.T, raw []byte) string {
	rawMu.Lock()
	rawNext = raw
	rawMu.Unlock()
	rawOnce.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rawURL = "http://" + ln.Addr().String()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(10 * time.Second))
					br := bufio.NewReader(c)
					if req, err := http.ReadRequest(br); err == nil {
						io.Copy(io.Discard, req.Body)
					}
					rawMu.Lock()
					raw := rawNext
					rawMu.Unlock()
					c.Write(raw)
					c.(*net.TCPConn).CloseWrite()
					io.Copy(io.Discard, br)
				}()
			}
		}()
	})
	return rawURL
}
