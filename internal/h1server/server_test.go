package h1server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Most tests run against this server and against net/http's, and expect
// the same observable behaviour: net/http is the reference.

type startFunc func(t *testing.T, h http.Handler) (addr string, shutdown func(context.Context) error)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func startH1(t *testing.T, h http.Handler) (string, func(context.Context) error) {
	return startH1With(t, &Server{Handler: h, ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second, WatchAfter: 5 * time.Millisecond, Logger: quiet})
}

func startH1With(t *testing.T, s *Server) (string, func(context.Context) error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ln.Addr().String(), s.Shutdown
}

func startStd(t *testing.T, h http.Handler) (string, func(context.Context) error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String(), s.Shutdown
}

func both(t *testing.T, fn func(t *testing.T, start startFunc)) {
	t.Run("h1server", func(t *testing.T) { fn(t, startH1) })
	t.Run("net-http", func(t *testing.T) { fn(t, startStd) })
}

// client is a raw HTTP/1.1 connection.
type client struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *client) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) read(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	return resp, string(b)
}

// closed reports whether the server closed the connection (EOF) within 5s.
func (c *client) closed() bool {
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.br.ReadByte()
	return err == io.EOF || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

func echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	})
}

func TestKeepAlivePipeliningAndBodies(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, echo())
		c := dial(t, addr)
		// Two requests in one write: answered in order on the same connection.
		c.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n" +
			"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
		if resp, body := c.read("GET"); resp.StatusCode != 200 || body != "GET /a " {
			t.Fatalf("first: %d %q", resp.StatusCode, body)
		}
		resp, body := c.read("POST")
		if body != "POST /b hello" {
			t.Fatalf("second: %q", body)
		}
		if resp.ContentLength != int64(len(body)) || resp.Header.Get("Date") == "" {
			t.Fatalf("a short answer must carry Content-Length and Date: %v", resp.Header)
		}
		// A chunked request body, on the same connection.
		c.send("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
		if _, body := c.read("POST"); body != "POST /c abcde" {
			t.Fatalf("chunked: %q", body)
		}
	})
}

func TestLongAnswerIsChunkedAndDeclaredLengthKept(t *testing.T) {
	big := strings.Repeat("x", 10000)
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/cl" {
				w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			}
			io.WriteString(w, big)
		}))
		c := dial(t, addr)
		c.send("GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := c.read("GET")
		if body != big || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
			t.Fatalf("no Content-Length, long body: TE %v, %d bytes", resp.TransferEncoding, len(body))
		}
		c.send("GET /cl HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body = c.read("GET")
		if body != big || resp.ContentLength != int64(len(big)) || resp.TransferEncoding != nil {
			t.Fatalf("declared length: CL %d TE %v, %d bytes", resp.ContentLength, resp.TransferEncoding, len(body))
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("Content-Type not sniffed: %q", resp.Header.Get("Content-Type"))
		}
	})
}

func TestHTTP10AndHEADAndNoContent(t *testing.T) {
	big := strings.Repeat("y", 10000)
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/big":
				io.WriteString(w, big)
			case "/204":
				w.WriteHeader(204)
			default:
				io.WriteString(w, "small")
			}
		}))
		// HTTP/1.0 without keep-alive: answer, then close; a long body ends at the close.
		c := dial(t, addr)
		c.send("GET /big HTTP/1.0\r\n\r\n")
		resp, body := c.read("GET")
		if body != big || resp.ProtoMinor != 0 {
			t.Fatalf("HTTP/1.0: proto %s, %d bytes", resp.Proto, len(body))
		}
		if !c.closed() {
			t.Fatal("HTTP/1.0 connection without keep-alive left open")
		}
		// HTTP/1.0 with keep-alive and a short body: kept.
		c = dial(t, addr)
		c.send("GET /small HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
		resp, body = c.read("GET")
		if body != "small" || !strings.EqualFold(resp.Header.Get("Connection"), "keep-alive") {
			t.Fatalf("HTTP/1.0 keep-alive: %q, Connection %q", body, resp.Header.Get("Connection"))
		}
		c.send("HEAD /small HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
		resp, body = c.read("HEAD")
		if body != "" || resp.StatusCode != 200 {
			t.Fatalf("HEAD: %d %q", resp.StatusCode, body)
		}
		c = dial(t, addr)
		c.send("GET /204 HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, body := c.read("GET"); resp.StatusCode != 204 || body != "" {
			t.Fatalf("204: %d %q", resp.StatusCode, body)
		}
		if _, body := c.read("GET"); body != "small" {
			t.Fatalf("after 204: %q", body)
		}
	})
}

// A streamed answer reaches the client at each Flush, before the handler
// returns.
func TestFlushStreams(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		release := make(chan struct{})
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			<-release
			io.WriteString(w, "data: two\n\n")
		}))
		c := dial(t, addr)
		c.send("GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "data: one\n" {
			t.Fatalf("first event before the handler returned: %q, %v", line, err)
		}
		close(release)
	})
}

func TestExpectContinue(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, echo())
		c := dial(t, addr)
		c.send("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
		line, err := c.br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
			t.Fatalf("interim answer: %q, %v", line, err)
		}
		if blank, _ := c.br.ReadString('\n'); blank != "\r\n" {
			t.Fatalf("100 Continue not followed by a blank line: %q", blank)
		}
		c.send("hello")
		if _, body := c.read("POST"); body != "POST /e hello" {
			t.Fatalf("after 100 Continue: %q", body)
		}
		c.send("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: teapot\r\n\r\n")
		if resp, _ := c.read("POST"); resp.StatusCode != http.StatusExpectationFailed {
			t.Fatalf("unknown expectation: %d, want 417", resp.StatusCode)
		}
	})
}

func TestBadRequests(t *testing.T) {
	// std is net/http's status where it differs (nowhere now). The HTTP/2
	// preface is an HTTP/1 request with method PRI to both, as in net/http;
	// any other HTTP/2.0 request line is refused.
	cases := []struct {
		name, raw string
		want, std int
	}{
		{"garbage", "HELLO\r\n\r\n", 400, 0},
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400, 0},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, 0},
		{"bad header name", "GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400, 0},
		{"unsupported transfer encoding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501, 0},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 200, 0},
		{"HTTP/2.0 request line", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, 0},
		{"HTTP/0.9 request line", "GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505, 0},
		{"huge header", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 1<<20+8192) + "\r\n\r\n", 431, 0},
	}
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, echo())
		for _, tc := range cases {
			if tc.std != 0 && strings.HasSuffix(t.Name(), "net-http") {
				tc.want = tc.std
			}
			c := dial(t, addr)
			go io.WriteString(c.c, tc.raw) // the server may answer before reading all of it
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Fatalf("%s: no answer: %v", tc.name, err)
			}
			io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want {
				t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
			}
			if (tc.want >= 400 || tc.name == "HTTP/2 preface") && !c.closed() {
				t.Errorf("%s: connection left open after a bad request", tc.name)
			}
		}
	})
}

// The server's own errors use the ErrorBody the gateway gives it (its
// OpenAI-style JSON envelope).
func TestErrorBodyHook(t *testing.T) {
	addr, _ := startH1With(t, &Server{Handler: echo(), Logger: quiet, ErrorBody: func(status int, msg string) (string, []byte) {
		return "application/json", []byte(fmt.Sprintf(`{"error":{"message":%q,"code":%d}}`, msg, status))
	}})
	c := dial(t, addr)
	c.send("GET / HTTP/1.1\r\n\r\n")
	resp, body := c.read("GET")
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, "missing required Host header") {
		t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// A client that goes away while its request runs cancels the request's
// context: at once with net/http, after WatchAfter here.
func TestClientGoneCancelsRequest(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		canceled := make(chan struct{})
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			select {
			case <-r.Context().Done():
				close(canceled)
			case <-time.After(10 * time.Second):
				t.Error("request context not canceled 10s after the client left")
			}
		}))
		c := dial(t, addr)
		c.send("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
		time.Sleep(30 * time.Millisecond)
		c.c.Close()
		select {
		case <-canceled:
		case <-time.After(10 * time.Second):
			t.Fatal("handler never saw the client leave")
		}
	})
}

// The same while an answer streams: the write error or the watch cancels it.
func TestClientGoneDuringStream(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		stopped := make(chan struct{})
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(stopped)
			for i := 0; i < 2000; i++ {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			t.Error("stream ran to its end after the client left")
		}))
		c := dial(t, addr)
		c.send("GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := http.ReadResponse(c.br, nil); err != nil {
			t.Fatal(err)
		}
		c.c.Close()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("stream not stopped after the client left")
		}
	})
}

func TestUnreadBody(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ignored your body")
		}))
		// A small unread body is drained: the connection serves the next request.
		c := dial(t, addr)
		c.send("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789")
		c.read("POST")
		c.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := c.read("GET"); body != "ignored your body" {
			t.Fatalf("after a small unread body: %q", body)
		}
		// A large one is not: the connection is closed after the answer.
		c = dial(t, addr)
		size := 2 << 20
		c.send(fmt.Sprintf("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size))
		go c.c.Write(make([]byte, size))
		c.read("POST")
		if !c.closed() {
			t.Fatal("connection kept after a 2 MiB unread body")
		}
	})
}

func TestShortWriteOfDeclaredLengthClosesConnection(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "12345")
		}))
		c := dial(t, addr)
		c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(resp.Body); err == nil {
			t.Fatal("a body 5 bytes short read without error: the connection was not closed")
		}
	})
}

func TestPanicClosesConnectionServerSurvives(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/panic" {
				panic("boom")
			}
			io.WriteString(w, "fine")
		}))
		c := dial(t, addr)
		c.send("GET /panic HTTP/1.1\r\nHost: x\r\n\r\n")
		if !c.closed() {
			t.Fatal("connection open after a handler panic")
		}
		c = dial(t, addr)
		c.send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := c.read("GET"); body != "fine" {
			t.Fatalf("after a panic: %q", body)
		}
	})
}

// Shutdown closes idle connections at once, lets a request in flight
// finish (its answer says Connection: close), then returns.
func TestShutdownIsGraceful(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		entered, release := make(chan struct{}), make(chan struct{})
		addr, shutdown := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				close(entered)
				<-release
			}
			io.WriteString(w, "done")
		}))
		idle := dial(t, addr)
		idle.send("GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
		idle.read("GET")
		busy := dial(t, addr)
		busy.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
		var returned atomic.Bool
		shut := make(chan error, 1)
		go func() { err := shutdown(context.Background()); returned.Store(true); shut <- err }()
		if !idle.closed() {
			t.Fatal("idle connection not closed by Shutdown")
		}
		if returned.Load() {
			t.Fatal("Shutdown returned while a request was in flight")
		}
		close(release)
		resp, body := busy.read("GET")
		if body != "done" || !resp.Close {
			t.Fatalf("in-flight answer: %q, Connection: close = %v", body, resp.Close)
		}
		select {
		case err := <-shut:
			if err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Shutdown did not return after the request finished")
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatal("still accepting after Shutdown")
		}
	})
}

func TestIdleTimeoutClosesConnection(t *testing.T) {
	addr, _ := startH1With(t, &Server{Handler: echo(), Logger: quiet, IdleTimeout: 50 * time.Millisecond})
	c := dial(t, addr)
	start := time.Now() // the server starts the idle clock after this
	c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	c.read("GET")
	if !c.closed() {
		t.Fatal("idle connection not closed")
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("closed before the idle timeout")
	}
}

// A connection that never sends a request is closed after
// ReadHeaderTimeout; so is one that stops halfway through its headers.
func TestHeaderTimeout(t *testing.T) {
	addr, _ := startH1With(t, &Server{Handler: echo(), Logger: quiet, ReadHeaderTimeout: 50 * time.Millisecond})
	c := dial(t, addr)
	if !c.closed() {
		t.Fatal("silent connection not closed")
	}
	c = dial(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: x\r\n")
	if !c.closed() {
		t.Fatal("connection with half its headers not closed")
	}
}

// The request sees what handlers expect of net/http: remote address, the
// Host in r.Host (not in the header map), a context that ends after the
// handler, a body that errors after Close.
func TestRequestFields(t *testing.T) {
	got := make(chan string, 1)
	var reqCtx context.Context
	addr, _ := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqCtx = r.Context()
		r.Body.Close()
		_, err := r.Body.Read(make([]byte, 1))
		got <- fmt.Sprintf("%s|%s|%v|%v|%v", r.Host, r.Header.Get("Host"), r.RemoteAddr != "", r.RequestURI, err)
	}))
	c := dial(t, addr)
	c.send("POST /p?q=1 HTTP/1.1\r\nHost: example.test\r\nContent-Length: 3\r\n\r\nabc")
	c.read("POST")
	if s := <-got; s != "example.test||true|/p?q=1|"+http.ErrBodyReadAfterClose.Error() {
		t.Fatalf("request fields: %s", s)
	}
	// The client can read the answer a moment before the server cancels
	// the context behind it: wait for that, boundedly.
	select {
	case <-reqCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("request context still live 5s after the handler returned")
	}
}

// A header value with CR/LF cannot inject a header field, and a field
// with an invalid name is dropped, as with net/http.
func TestHeaderValuesCannotInjectFields(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["X-Note"] = []string{"a\r\nX-Injected: 1"}
			w.Header()["Bad Name"] = []string{"x"}
			io.WriteString(w, "ok")
		}))
		c := dial(t, addr)
		c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := c.read("GET")
		if body != "ok" || resp.Header.Get("X-Injected") != "" || resp.Header.Get("Bad Name") != "" || resp.Header.Get("X-Note") != "a  X-Injected: 1" {
			t.Fatalf("headers %v, body %q", resp.Header, body)
		}
	})
}
