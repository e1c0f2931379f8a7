package provider

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
)

// countConns starts srv counting the TCP connections it accepts.
func countConns(h http.Handler) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	return srv, &n
}

func testBackend(t *testing.T, url string, firstByte time.Duration) *Backend {
	t.Helper()
	b := NewBackend(&config.Backend{Name: "up", BaseURL: url, FirstByte: config.Duration(firstByte)})
	t.Cleanup(b.Close)
	return b
}

func post(t *testing.T, b *Backend, ctx context.Context, path, body string) (*http.Response, error) {
	t.Helper()
	req, err := b.NewRequest(ctx, path, []byte(body), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	return b.Do(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBackend_SendsTheRequestAndReusesTheConnection(t *testing.T) {
	srv, conns := countConns(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" || r.Header.Get("Content-Type") != "application/json" ||
			r.Header.Get("X-Request-Id") != "req-1" || r.ContentLength != int64(len(body)) {
			http.Error(w, fmt.Sprintf("bad request: %s %s %v", r.Method, r.URL, r.Header), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"echo":%s}`, body)
	}))
	defer srv.Close()
	b := testBackend(t, srv.URL+"/v1", 0)
	for i := 0; i < 5; i++ {
		resp, err := post(t, b, context.Background(), "/chat/completions", fmt.Sprintf(`{"n":%d}`, i))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := readAll(t, resp), fmt.Sprintf(`{"echo":{"n":%d}}`, i); resp.StatusCode != 200 || got != want {
			t.Fatalf("request %d: %d %q, want %q", i, resp.StatusCode, got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("5 sequential requests used %d connections, want 1 (keep-alive)", n)
	}
}

func TestBackend_StreamsEachEventAsItArrives(t *testing.T) {
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select { // the next event only after the client has seen this one
			case <-next:
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Second):
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	b := testBackend(t, srv.URL, 0)
	resp, err := post(t, b, context.Background(), "/v1/chat/completions", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Transfer-Encoding") != "" || len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("want a chunked answer, got %v", resp.TransferEncoding)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		next <- struct{}{}
	}
	rest, _ := io.ReadAll(br)
	if string(rest) != "data: [DONE]\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

// rawServer answers each request on a connection with a fixed keep-alive
// response, then closes the connection after serving `per` requests: the
// way a backend with a short idle time-out drops a pooled connection.
func rawServer(t *testing.T, per int) (string, *atomic.Int32, *[]string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	var mu sync.Mutex
	bodies := &[]string{}
	closed := make(chan struct{}, 64) // one send per connection the server closed
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer func() {
					c.Close()
					select {
					case closed <- struct{}{}:
					default:
					}
				}()
				br := bufio.NewReader(c)
				for i := 0; i < per; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					b, _ := io.ReadAll(req.Body)
					mu.Lock()
					*bodies = append(*bodies, string(b))
					mu.Unlock()
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns, bodies, closed
}

// A keep-alive connection the engine drops as a request goes out on it
// (read, never answered: an idle time-out racing the request) costs the
// client nothing: the request is sent again on a fresh connection, once.
func TestBackend_RetriesARequestDroppedUnansweredOnAReusedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			first := conns.Add(1) == 1
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.ReadAll(req.Body)
					if first && i == 1 {
						return // the second request on the first connection: dropped
					}
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
				}
			}()
		}
	}()
	b := testBackend(t, "http://"+ln.Addr().String(), 0)
	for i := 0; i < 2; i++ {
		resp, err := post(t, b, context.Background(), "/v1/chat/completions", `{}`)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := readAll(t, resp); got != "{}" {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("server saw %d connections, want 2 (the retry on a fresh one)", n)
	}
}

// A plain-http backend (a local engine) is spoken to in HTTP/1.1 even when
// it offers HTTP/2 without TLS (h2c).
func TestBackend_PlainHTTPEngineGetsHTTP1(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d", r.ProtoMajor)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	b := testBackend(t, srv.URL, 0)
	resp, err := post(t, b, context.Background(), "/v1/x", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "1" || resp.ProtoMajor != 1 {
		t.Fatalf("the engine saw HTTP/%s, answered in %s; want HTTP/1.1", got, resp.Proto)
	}
}

func TestBackend_RetriesOnAFreshConnectionWhenThePooledOneWasClosed(t *testing.T) {
	url, conns, bodies, closed := rawServer(t, 1)
	b := testBackend(t, url, 0)
	for i := 0; i < 3; i++ {
		resp, err := post(t, b, context.Background(), "/v1/chat/completions", fmt.Sprintf(`{"i":%d}`, i))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := readAll(t, resp); got != "{}" {
			t.Fatalf("request %d: %q", i, got)
		}
		select { // the server closed the pooled connection
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d: the server did not close its connection", i)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("server saw %d connections, want 3 (one per request)", n)
	}
	if got := strings.Join(*bodies, ","); got != `{"i":0},{"i":1},{"i":2}` {
		t.Fatalf("bodies received %s: each must arrive once and whole", got)
	}
}

func TestBackend_CancellingTheRequestReachesTheUpstream(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	b := testBackend(t, srv.URL, 0)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := post(t, b, ctx, "/v1/chat/completions", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := resp.Body.Read(buf); err != nil || string(buf[:n]) != "data: 1\n\n" {
		t.Fatalf("first event %q %v", buf[:n], err)
	}
	readErr := make(chan error, 1)
	go func() { _, err := resp.Body.Read(buf); readErr <- err }()
	cancel()
	select {
	case err := <-readErr:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("blocked read ended with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not unblock the body read")
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream did not see the request end")
	}
	resp.Body.Close()
}

func TestBackend_FirstByteTimeoutIsA504NamingTheBackend(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	b := testBackend(t, srv.URL, 50*time.Millisecond)
	_, err := post(t, b, context.Background(), "/v1/chat/completions", `{}`)
	// The headers came late, not the first stream event: the message
	// names the setting all the same, as a late first event's does.
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusGatewayTimeout || ae.Code != "backend_timeout" || !strings.Contains(ae.Message, `backend "up"`) ||
		!strings.Contains(ae.Message, "no response headers within first_byte_timeout (50ms)") ||
		!strings.Contains(ae.Message, "raise backends.up.first_byte_timeout") {
		t.Fatalf("got %v, want a 504 naming the backend and first_byte_timeout", err)
	}
}

func TestBackend_ClosingABodyEarlyDropsTheConnectionWithoutDraining(t *testing.T) {
	srv, conns := countConns(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("endless") == "" {
			io.WriteString(w, "ok")
			return
		}
		for r.Context().Err() == nil { // never ends on its own
			if _, err := io.WriteString(w, strings.Repeat("x", 4096)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	b := testBackend(t, srv.URL, 0)
	resp, err := post(t, b, context.Background(), "/v1/x?endless=1", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 100))
	closed := make(chan struct{})
	go func() { resp.Body.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked (drained an endless body?)")
	}
	resp, err = post(t, b, context.Background(), "/v1/x", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" {
		t.Fatalf("next request got %q", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: a half-read connection must not be reused", n)
	}
}

func TestBackend_ConnectionCloseAnswerIsNotPooled(t *testing.T) {
	srv, conns := countConns(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	}))
	defer srv.Close()
	b := testBackend(t, srv.URL, 0)
	for i := 0; i < 2; i++ {
		resp, err := post(t, b, context.Background(), "/v1/x", `{}`)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "bye" {
			t.Fatal(got)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestBackend_ConcurrentRequestsGetTheirOwnAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(b)%2 == 0 { // mix chunked and Content-Length answers
			w.(http.Flusher).Flush()
		}
		w.Write(b)
	}))
	defer srv.Close()
	b := testBackend(t, srv.URL, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				body := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)
				req, _ := b.NewRequest(context.Background(), "/v1/x", []byte(body), "")
				resp, err := b.Do(req)
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(got) != body {
					errs <- fmt.Errorf("sent %s, got %s (%v)", body, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestBackend_RefusedConnectionIs502NamingTheBackend(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	b := testBackend(t, "http://"+addr+"/v1", 0)
	_, err := post(t, b, context.Background(), "/chat/completions", `{}`)
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || !strings.Contains(ae.Message, "refused") {
		t.Fatalf("got %v, want 502 connection refused", err)
	}
}

func TestBackend_IdleConnectionsAreClosedAfterTheIdleTimeout(t *testing.T) {
	closed := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	b := testBackend(t, srv.URL, 0)
	b.client.Transport.(*http.Transport).IdleConnTimeout = 50 * time.Millisecond
	resp, err := post(t, b, context.Background(), "/v1/x", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" {
		t.Fatal(got)
	}
	select { // nobody uses the backend again: the pool must close it
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle pooled connection was never closed")
	}
}

// A backend that refuses a large body before reading it (413) and closes:
// the client gets the backend's answer, not "broken pipe".
func TestBackend_EarlyAnswerToALargeBodyIsReturned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		for { // the headers only
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\nContent-Length: 26\r\nConnection: close\r\n\r\n{\"error\":\"body too large\"}")
		// The subject: a backend that closes soon after answering, with the
		// body unread. Closing at once could reset the answer away before
		// the client reads it.
		time.Sleep(50 * time.Millisecond)
		c.Close()
	}()
	b := testBackend(t, "http://"+ln.Addr().String(), 0)
	big := strings.Repeat("x", 16<<20)
	resp, err := post(t, b, context.Background(), "/v1/chat/completions", big)
	if err != nil {
		t.Fatalf("got %v, want the backend's 413", err)
	}
	if got := readAll(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || got != `{"error":"body too large"}` {
		t.Fatalf("got %d %q", resp.StatusCode, got)
	}
}

func TestShortErr_KeepsTheInnermostNetworkError(t *testing.T) {
	inner := &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	outer := &net.OpError{Op: "readfrom", Net: "tcp", Err: inner}
	if got := shortErr(fmt.Errorf("wrapped: %w", outer)); got != "write: connection reset by peer" {
		t.Fatalf("shortErr = %q", got)
	}
}

// A backend whose headers never end is cut off at net/http's Transport
// limit (10 MiB) rather than filling the gateway's memory.
func TestBackend_EndlessResponseHeadersAreRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for i := 0; i < 20<<10; i++ { // 20 MB of header fields
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	}()
	b := testBackend(t, "http://"+ln.Addr().String()+"/v1", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = post(t, b, ctx, "/chat/completions", `{}`)
	if err == nil || !strings.Contains(err.Error(), "headers exceeded") {
		t.Fatalf("err = %v, want the header limit", err)
	}
}
