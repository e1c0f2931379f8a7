package h1server

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// FuzzDifferential feeds the same bytes to this server and to net/http's,
// each on a loopback connection the client half-closes after writing, and
// fails when the requests their handlers are given differ: method, target,
// protocol, Host, headers, framing (Content-Length, Transfer-Encoding,
// Close), body bytes and body read error, trailers, and the sequence of
// requests on the connection (pipelining, keep-alive, a request one server
// serves and the other refuses). The answers' bytes are not compared:
// Date, header order and the servers' own error texts differ by design.
//
// The handler's behaviour depends on the target's first path byte, so
// the fuzzer reaches the paths where a handler leaves the body unread
// ("/n...") or sends its answer before reading the body ("/f...").
//
// The seed corpus (testdata/fuzz/FuzzDifferential) holds request-smuggling
// shapes; plain `go test` runs every seed.
func FuzzDifferential(f *testing.F) {
	// Seeds too large to keep as files, for plain `go test` only: while
	// fuzzing, each run of them waits out the servers' half-second linger
	// before a close, and the mutator would spend its time minimizing them.
	if fl := flag.Lookup("test.fuzz"); fl == nil || fl.Value.String() == "" {
		addLargeSeeds(f)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		d := diffServers(t)
		var got [2][]string
		var wg sync.WaitGroup
		for i, addr := range []string{d.h1, d.std} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = d.logs[i].exchange(t, addr, in)
			}()
		}
		wg.Wait()
		if !slices.Equal(got[0], got[1]) {
			t.Fatalf("the servers handed different requests to the handler\ninput: %q\nh1server (%d requests):\n%s\nnet/http (%d requests):\n%s",
				in, len(got[0]), strings.Join(got[0], "\n"), len(got[1]), strings.Join(got[1], "\n"))
		}
	})
}

func addLargeSeeds(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 600<<10) + "\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte(fmt.Sprintf("POST /n HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%sGET /after HTTP/1.1\r\nHost: x\r\n\r\n", 300<<10, strings.Repeat("b", 300<<10))))
	f.Add([]byte(fmt.Sprintf("POST /n HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%sGET /after HTTP/1.1\r\nHost: x\r\n\r\n", 200<<10, strings.Repeat("b", 200<<10))))
	f.Add([]byte("POST /n HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("4000\r\n"+strings.Repeat("c", 0x4000)+"\r\n", 20) + "0\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n"))
}

type diffPair struct {
	h1, std string
	logs    [2]*requestLog
}

var (
	diffOnce sync.Once
	diff     diffPair
)

// diffServers starts the two servers once for every input, with the same
// limits and the recording handler.
func diffServers(t testing.TB) *diffPair {
	diffOnce.Do(func() {
		listen := func() net.Listener {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return ln
		}
		diff.logs = [2]*requestLog{{byConn: map[string][]string{}}, {byConn: map[string][]string{}}}
		// WatchAfter is long so that no background read starts: the
		// comparison must not depend on timing.
		h1 := &Server{Handler: diff.logs[0], ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, WatchAfter: time.Hour, Logger: quiet}
		std := &http.Server{Handler: diff.logs[1], ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
		ln1, ln2 := listen(), listen()
		go h1.Serve(ln1)
		go std.Serve(ln2)
		diff.h1, diff.std = ln1.Addr().String(), ln2.Addr().String()
	})
	return &diff
}

// requestLog is the recording handler: it keeps, per client connection,
// a description of each request it was handed.
type requestLog struct {
	mu     sync.Mutex
	byConn map[string][]string
}

func (l *requestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q %s host=%q close=%v cl=%d te=%q", r.Method, r.RequestURI, r.Proto, r.Host, r.Close, r.ContentLength, r.TransferEncoding)
	for _, k := range slices.Sorted(maps.Keys(r.Header)) {
		fmt.Fprintf(&b, "\n  %s: %q", k, r.Header[k])
	}
	mode := byte(0)
	if p := r.URL.Path; len(p) > 1 {
		mode = p[1]
	}
	if mode == 'f' {
		// The answer first: the server decides what becomes of the body
		// before the handler reads it.
		io.WriteString(w, "ok")
		w.(http.Flusher).Flush()
	}
	if mode != 'n' {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		fmt.Fprintf(&b, "\n  body %q err=%v", body, err)
		for _, k := range slices.Sorted(maps.Keys(r.Trailer)) {
			fmt.Fprintf(&b, "\n  trailer %s: %q", k, r.Trailer[k])
		}
	}
	l.mu.Lock()
	l.byConn[r.RemoteAddr] = append(l.byConn[r.RemoteAddr], b.String())
	l.mu.Unlock()
	if mode != 'f' {
		io.WriteString(w, "ok")
	}
}

// exchange sends in on a new connection to addr, half-closes, reads until
// the server closes, and returns what the handler was handed on that
// connection. Every handler run has ended once the server closed.
func (l *requestLog) exchange(t *testing.T, addr string, in []byte) []string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		c.Write(in)
		c.(*net.TCPConn).CloseWrite()
	}()
	if _, err := io.Copy(io.Discard, c); err != nil && !isReset(err) {
		t.Fatalf("server at %s neither answered nor closed the connection: %v\ninput: %q", addr, err, truncate(in))
	}
	key := c.LocalAddr().String()
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.byConn[key]
	delete(l.byConn, key)
	return got
}

func truncate(b []byte) []byte {
	if len(b) > 2048 {
		return append(bytes.Clone(b[:2048]), "..."...)
	}
	return b
}
