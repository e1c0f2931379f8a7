package h1server

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	fuzzOnce sync.Once
	fuzzAddr string
)

// fuzzServer is one server for every input: a bad input must not break it
// for the next one.
func fuzzServer(t testing.TB) string {
	fuzzOnce.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if r.URL.Query().Has("flush") {
				w.(http.Flusher).Flush()
			}
			w.Write(b)
		}), ReadHeaderTimeout: time.Second, IdleTimeout: time.Second, Logger: quiet}
		go s.Serve(ln)
		fuzzAddr = ln.Addr().String()
	})
	return fuzzAddr
}

// Whatever arrives on a connection, the server answers or closes it within
// its time-outs, never panics, and still serves a well-formed request.
func FuzzServeConnection(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /?flush HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
		"GET / HTTP/1.0\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"\r\n\r\n\r\n",
		"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n X: folded\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: x\r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		addr := fuzzServer(t)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			c.Write(in)
			c.(*net.TCPConn).CloseWrite()
		}()
		if _, err := io.Copy(io.Discard, c); err != nil && !isReset(err) {
			t.Fatalf("connection neither answered nor closed: %v", err)
		}
		// The server still works.
		ok, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer ok.Close()
		ok.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(ok, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nping")
		b, _ := io.ReadAll(ok)
		if !strings.HasSuffix(string(b), "\r\n\r\nping") {
			t.Fatalf("server broken after input %q: %q", in, b)
		}
	})
}
