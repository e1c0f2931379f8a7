package h1server

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The tests in this file pin down where the server used to differ from
// net/http in ways a client could feel or abuse (issue 19). Each runs
// against both servers: net/http is the reference.

// startStdWith is startStd with a server the test configures.
func startStdWith(t *testing.T, s *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ErrorLog = log.New(io.Discard, "", 0)
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

// bothWithHeaderTimeout runs fn against both servers with the given
// ReadHeaderTimeout.
func bothWithHeaderTimeout(t *testing.T, rht time.Duration, h http.Handler, fn func(t *testing.T, addr string)) {
	t.Run("h1server", func(t *testing.T) {
		addr, _ := startH1With(t, &Server{Handler: h, ReadHeaderTimeout: rht, IdleTimeout: 5 * time.Second, Logger: quiet})
		fn(t, addr)
	})
	t.Run("net-http", func(t *testing.T) {
		fn(t, startStdWith(t, &http.Server{Handler: h, ReadHeaderTimeout: rht, IdleTimeout: 5 * time.Second}))
	})
}

// A handler that refuses a declared body as too large without reading it
// (as the gateway does) answers with Connection: close, and the server
// closes the connection: the unread body must not be taken for the next
// request, nor the next request for the rest of the body.
func TestTooLargeAnswer_ClosesConnection(t *testing.T) {
	const limit = 1 << 20
	both(t, func(t *testing.T, start startFunc) {
		served := make(chan string, 4)
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served <- r.URL.Path
			if r.ContentLength > limit {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "ok")
		}))
		c := dial(t, addr)
		// 32 MiB declared, 30 bytes sent: the client then waits for the answer.
		c.send("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n" + strings.Repeat("a", 30))
		resp, _ := c.read("POST")
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", resp.StatusCode)
		}
		if !resp.Close {
			t.Fatalf("413 without Connection: close (header %q): the client will send its next request on a connection the server still reads as a body", resp.Header.Get("Connection"))
		}
		// A client that sends anyway gets the connection closed, not its
		// request swallowed.
		io.WriteString(c.c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
		if !c.closed() {
			t.Fatal("connection left open after the 413")
		}
		select {
		case p := <-served:
			if p != "/big" {
				t.Fatalf("first request served as %q", p)
			}
		default:
			t.Fatal("handler never ran")
		}
		select {
		case p := <-served:
			t.Fatalf("a request %q was read from the body's bytes", p)
		default:
		}
	})
}

// The same with a small unread body that the client did send: the 413
// still ends the connection on the builtin server (it cannot tell a
// refused body from one the handler merely skipped other than by the
// status) and the next request is never read from the body's bytes.
func TestTooLargeAnswer_SmallBodyNotReadAsRequest(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		paths := make(chan string, 4)
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			paths <- r.URL.Path
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		}))
		c := dial(t, addr)
		// The body is itself a request: it must never be served as one.
		inner := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
		c.send(fmt.Sprintf("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(inner), inner))
		if resp, _ := c.read("POST"); resp.StatusCode != 413 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		c.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		c.br.ReadByte() // whatever follows (nothing, or the close)
		close(paths)
		for p := range paths {
			if p == "/smuggled" {
				t.Fatal("the refused request's body was served as a request")
			}
		}
	})
}

// The whole header must arrive within ReadHeaderTimeout of the accept:
// one early byte does not restart the clock.
func TestHeaderTimeout_CountsFromAcceptNotFirstByte(t *testing.T) {
	const rht = time.Second
	bothWithHeaderTimeout(t, rht, echo(), func(t *testing.T, addr string) {
		c := dial(t, addr)
		t0 := time.Now()
		time.Sleep(rht * 8 / 10)
		c.send("G") // then nothing more
		// The server gives up on the request (net/http answers 400 to the
		// partial line it read) and closes the connection.
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c.br); err != nil && !isReset(err) {
			t.Fatalf("connection not closed: %v", err)
		}
		// Restarting the clock at the first byte would close it no
		// earlier than 0.8s + 1s after the dial; counted from the
		// accept it closes at about 1s.
		if el := time.Since(t0); el >= rht*8/10+rht {
			t.Fatalf("closed %v after the dial: the header clock restarted at the first byte", el.Round(time.Millisecond))
		}
	})
}

// On a keep-alive connection the clock starts when the next request's
// first bytes arrive (the idle time before it is IdleTimeout's).
func TestHeaderTimeout_KeepAliveCountsFromNextRequest(t *testing.T) {
	const rht = 300 * time.Millisecond
	bothWithHeaderTimeout(t, rht, echo(), func(t *testing.T, addr string) {
		c := dial(t, addr)
		c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		c.read("GET")
		time.Sleep(2 * rht) // idle, longer than the header time-out
		c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, _ := c.read("GET"); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

// Host rules as net/http's: an HTTP/1.1 request needs a Host header even
// in absolute form (whose host then wins), and the header must be valid.
func TestHost_AbsoluteFormNeedsValidHostHeader(t *testing.T) {
	cases := []struct {
		name, raw string
		want      int
		host      string
	}{
		{"absolute form, no Host header", "GET http://a.test/p HTTP/1.1\r\n\r\n", 400, ""},
		{"absolute form, malformed Host header", "GET http://a.test/p HTTP/1.1\r\nHost: b c\r\n\r\n", 400, ""},
		{"absolute form, valid Host header", "GET http://a.test/p HTTP/1.1\r\nHost: b.test\r\n\r\n", 200, "a.test"},
		{"absolute form, empty Host header", "GET http://a.test/p HTTP/1.1\r\nHost:\r\n\r\n", 200, "a.test"},
		{"origin form, empty Host header", "GET /p HTTP/1.1\r\nHost:\r\n\r\n", 200, ""},
		{"HTTP/1.0 absolute form, no Host header", "GET http://a.test/p HTTP/1.0\r\n\r\n", 200, "a.test"},
	}
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "host="+r.Host)
		}))
		for _, tc := range cases {
			c := dial(t, addr)
			c.send(tc.raw)
			resp, body := c.read("GET")
			if resp.StatusCode != tc.want {
				t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
				continue
			}
			if tc.want == 200 && body != "host="+tc.host {
				t.Errorf("%s: handler saw %q, want host=%s", tc.name, body, tc.host)
			}
		}
	})
}

// The server's own 400 answers say what is wrong in general terms and
// never echo bytes of the request: a malformed header line may be the
// Authorization header, key included.
func TestBadRequest_NeverEchoesRequestBytes(t *testing.T) {
	const secret = "sk-lg-SECRET0123456789"
	raws := []string{
		"GET / HTTP/1.1\r\nHost: x\r\nAuthorization Bearer " + secret + "\r\n\r\n",          // no colon
		"GET / HTTP/1.1\r\nHost: x\r\nAuthorization : Bearer " + secret + "\r\n\r\n",        // space before the colon
		"GET / HTTP/1.1\r\nHost: x\r\n Authorization: Bearer " + secret + "\r\n\r\n",        // leading space on the first field
		"GET /" + secret + "%zz HTTP/1.1\r\nHost: x\r\n\r\n",                                // bad escape in the target
		"GET /" + secret + " HTTP/1.1 extra\r\nHost: x\r\n\r\n",                             // malformed request line
		"G\x01T /" + secret + " HTTP/1.1\r\nHost: x\r\n\r\n",                                // invalid method
		"GET /" + secret + " HTTP/1.x\r\nHost: x\r\n\r\n",                                   // malformed version
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + secret + "\r\n\r\n",              // bad Content-Length
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + secret + "\r\n\r\n",           // unsupported coding (501)
		"GET / HTTP/1.1\r\nHost: x\r\nExpect: " + secret + "\r\nContent-Length: 1\r\n\r\nx", // unsupported expectation (417)
		"GET / HTTP/1.1\r\nHost: x\r\nX-Key: " + secret + "\x01\r\n\r\n",                    // control character in a value
		"GET / HTTP/1.1\r\nHost: " + secret + "/\r\n\r\n",                                   // malformed Host
	}
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, echo())
		for _, raw := range raws {
			c := dial(t, addr)
			go io.WriteString(c.c, raw)
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Errorf("%q: no answer: %v", raw, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode < 400 {
				t.Errorf("%q: status %d, want an error", raw, resp.StatusCode)
			}
			if strings.Contains(string(body), "SECRET") || strings.Contains(fmt.Sprint(resp.Header), "SECRET") {
				t.Errorf("%q: the answer echoes request bytes: %q", raw, body)
			}
		}
	})
}

// A control character in the request target is a 400 answer, not a
// silent close.
func TestBadRequest_ControlCharacterInTargetIsAnswered(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, echo())
		for _, ch := range []string{"\x00", "\x01", "\x1f", "\x7f"} {
			c := dial(t, addr)
			c.send("GET /a" + ch + "b HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Errorf("%q in the target: no answer (%v)", ch, err)
				continue
			}
			io.ReadAll(resp.Body)
			if resp.StatusCode != 400 {
				t.Errorf("%q in the target: status %d, want 400", ch, resp.StatusCode)
			}
			if !c.closed() {
				t.Errorf("%q in the target: connection left open", ch)
			}
		}
	})
}

// Expect as net/http reads it: a list that holds 100-continue is honoured,
// HTTP/1.0 ignores the header, and the handler sees the header as sent.
func TestExpect_MatchesNetHTTP(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "expect=%q body=%s", r.Header.Get("Expect"), b)
		}))
		c := dial(t, addr)
		c.send("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi")
		if resp, body := c.read("POST"); resp.StatusCode != 200 || body != `expect="100-continue" body=hi` {
			t.Errorf("HTTP/1.0 with Expect: %d %q", resp.StatusCode, body)
		}
		c = dial(t, addr)
		c.send("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n")
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil || resp.StatusCode != 100 {
			t.Fatalf("Expect: 100-Continue: %v %v", resp, err)
		}
		c.send("hi")
		if resp, body := c.read("POST"); resp.StatusCode != 200 || body != `expect="100-Continue" body=hi` {
			t.Errorf("after 100 Continue: %d %q", resp.StatusCode, body)
		}
	})
}

// After a POST, net/http skips a CRLF an old client may send after the
// body (RFC 9112 section 2.2).
func TestLeadingCRLFAfterPostIsSkipped(t *testing.T) {
	both(t, func(t *testing.T, start startFunc) {
		addr, _ := start(t, echo())
		c := dial(t, addr)
		c.send("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := c.read("POST"); body != "POST /a hi" {
			t.Fatalf("first: %q", body)
		}
		if resp, body := c.read("GET"); resp.StatusCode != 200 || body != "GET /b " {
			t.Fatalf("after the stray CRLF: %d %q", resp.StatusCode, body)
		}
	})
}
