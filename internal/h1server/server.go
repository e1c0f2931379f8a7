// Package h1server is the HTTP/1.1 server on llmgate's listener: a lean
// replacement for net/http's Server that runs any http.Handler.
//
// Why it exists: at a moderate request rate a gateway process is idle
// between requests, and on a VM every goroutine hand-off that wakes a thread
// costs tens of microseconds. net/http's server hands each request to a
// background-read goroutine (to notice a client that goes away) and takes it
// back when the handler returns; together with the runtime's spinning
// threads that is about five extra thread wake-ups per request, measured as
// 0.1 ms of added median latency on the project's 2-core benchmark machine.
// Here one goroutine per connection reads, handles and writes. A request
// still running after WatchAfter (10 ms) gets the same background read as in
// net/http, so a client that disconnects from a long generation still
// cancels the request's context — within WatchAfter plus one sweep instead
// of at once (up to a quarter second after an idle spell), which no LLM
// request notices.
//
// Parsing is the standard library's (http.ReadRequest: request line,
// headers, Content-Length and chunked bodies, smuggling checks), plus the
// checks net/http's server adds (Host header, header field syntax, header
// size, Expect), with its rules for what happens to a body the handler did
// not read. A differential fuzz target (difffuzz_test.go) feeds the same
// bytes to this server and to net/http's and fails on any difference in
// the requests their handlers are given. Errors the server answers itself
// never quote the request. Supported: keep-alive and pipelining, HTTP/1.0, chunked and
// Content-Length request bodies, Expect: 100-continue, streaming with
// http.Flusher / http.ResponseController, Content-Length for answers that
// fit the buffer and chunked encoding for the rest, HEAD, idle and header
// time-outs, graceful Shutdown. Not supported: HTTP/2, TLS, Hijack, trailers
// — the gateway's listener needs none of them.
package h1server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"llmgate/internal/rawio"
)

// Server serves HTTP/1.1 on the listeners given to Serve.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's headers, as in net/http:
	// a new connection's first request header must be complete this long
	// after the accept, a later one's this long after its first bytes
	// arrived. Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends nothing for
	// this long between requests. Default 120s.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers. Default 1 MiB.
	MaxHeaderBytes int
	// WatchAfter is how long a request may run before its connection is
	// watched for the client going away. Default 10ms.
	WatchAfter time.Duration
	// ErrorBody renders the body of the errors the server answers itself
	// (malformed request, headers too large). Default: plain text.
	ErrorBody func(status int, msg string) (contentType string, body []byte)
	// Logger receives handler panics and accept errors. Default slog.Default().
	Logger *slog.Logger
	// TLSConfig, when set, makes every accepted connection TLS (requests
	// then carry req.TLS). It should offer only "http/1.1" in NextProtos:
	// this server does not speak HTTP/2.
	TLSConfig *tls.Config

	mu        sync.Mutex
	listeners map[*net.Listener]struct{}
	conns     map[*conn]struct{}
	sweeping  bool
	shutdown  atomic.Bool
	done      chan struct{}
	doneOnce  sync.Once
}

const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// maxDrain is how much of a request body the handler left unread the
// server reads to keep the connection (net/http uses the same figure).
const maxDrain = 256 << 10

// bufferBeforeCommit: an answer shorter than this that the handler finishes
// without flushing goes out with a Content-Length.
const bufferBeforeCommit = 4096

func (s *Server) readHeaderTimeout() time.Duration {
	if s.ReadHeaderTimeout > 0 {
		return s.ReadHeaderTimeout
	}
	return 10 * time.Second
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return 120 * time.Second
}

func (s *Server) maxHeaderBytes() int64 {
	n := s.MaxHeaderBytes
	if n <= 0 {
		n = 1 << 20
	}
	return int64(n) + 4096 // slack for body bytes read with the headers, as net/http
}

func (s *Server) watchAfter() time.Duration {
	if s.WatchAfter > 0 {
		return s.WatchAfter
	}
	return 10 * time.Millisecond
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) doneCh() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

// Serve accepts connections on ln until Shutdown or Close, and then returns
// http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	done := s.doneCh()
	s.mu.Lock()
	if s.shutdown.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = map[*net.Listener]struct{}{}
	}
	s.listeners[&ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, &ln)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		rw, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: wait and retry, as net/http.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logger().Warn("http: accept error; retrying", "err", err, "in", delay)
			select {
			case <-time.After(delay):
			case <-done:
				return http.ErrServerClosed
			}
			continue
		}
		delay = 0
		rw = rawio.Wrap(rw) // reads and writes without waking the runtime's monitor thread
		if s.TLSConfig != nil {
			// TLS on top of the raw socket; the handshake runs on the
			// connection's first read, under ReadHeaderTimeout.
			rw = tls.Server(rw, s.TLSConfig)
		}
		c := &conn{s: s, rwc: rw, remote: rw.RemoteAddr().String()}
		c.r = &connReader{c: c}
		c.r.cond = sync.NewCond(&c.r.mu)
		if !s.track(c) {
			rw.Close()
			return http.ErrServerClosed
		}
		go c.serve(ln.Addr())
	}
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	if !s.sweeping {
		s.sweeping = true
		go s.sweep(s.done)
	}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// sweep starts the client-gone watch of requests that have run longer than
// WatchAfter. It runs while the server has connections, every WatchAfter
// while a request is in flight and every idleSweep otherwise, so that idle
// keep-alive connections do not wake the process 100 times a second.
func (s *Server) sweep(done chan struct{}) {
	wa := s.watchAfter()
	t := time.NewTimer(wa)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-done:
			return
		}
		now := time.Now().UnixNano()
		busy := false
		s.mu.Lock()
		if len(s.conns) == 0 {
			s.sweeping = false
			s.mu.Unlock()
			return
		}
		for c := range s.conns {
			if c.state.Load() == stateActive {
				busy = true
			}
			if st := c.reqStart.Load(); st != 0 && now-st >= int64(wa) {
				if c.r.startWatch() {
					c.reqStart.CompareAndSwap(st, 0)
				}
			}
		}
		s.mu.Unlock()
		if busy {
			t.Reset(wa)
		} else {
			t.Reset(max(wa, idleSweep))
		}
	}
}

// idleSweep is the sweep interval while no request is in flight: a request
// that starts meanwhile is watched at most this much later.
const idleSweep = 250 * time.Millisecond

// Shutdown stops accepting connections, closes idle ones, and waits for
// requests in flight to finish (their connections are closed after the
// answer) or for ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginShutdown()
	wait := time.Millisecond
	for {
		if s.closeIdle() {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.beginShutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.state.Store(stateClosed)
		c.rwc.Close()
	}
	return nil
}

func (s *Server) beginShutdown() {
	done := s.doneCh()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown.Store(true)
	for ln := range s.listeners {
		(*ln).Close()
	}
	s.doneOnce.Do(func() { close(done) })
}

// closeIdle closes idle connections and reports whether none is active.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	quiet := true
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.rwc.Close()
		} else if c.state.Load() == stateActive {
			quiet = false
		}
	}
	return quiet
}

type conn struct {
	s *Server
	// linger: the client may still be sending when the connection ends
	// (a refused body, headers too large), so the close waits a moment
	// after shutting the write side.
	linger bool
	rwc    net.Conn
	remote string
	r      *connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	state  atomic.Int32
	// reqStart is the start (unix ns) of a request in flight that is not
	// yet watched for the client going away; 0 otherwise.
	reqStart atomic.Int64
}

func (c *conn) serve(local net.Addr) {
	defer func() {
		if c.linger {
			c.closeWriteAndWait()
		}
		c.rwc.Close()
		c.s.untrack(c)
	}()
	c.br = bufio.NewReaderSize(c.r, 4096)
	c.bw = bufio.NewWriterSize(c.rwc, 4096)
	base := context.WithValue(context.Background(), http.LocalAddrContextKey, local)
	// A new connection must send its whole first request header within
	// ReadHeaderTimeout of the accept; its first bytes do not restart the
	// clock (the TLS handshake, when there is one, runs in this time too).
	c.rwc.SetReadDeadline(time.Now().Add(c.s.readHeaderTimeout()))
	c.r.remain = c.s.maxHeaderBytes()
	if _, err := c.br.Peek(1); err != nil {
		c.plainToTLS(err)
		return
	}
	lastMethod := ""
	for {
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // closed by Shutdown
		}
		if lastMethod == http.MethodPost {
			// Old clients send a CRLF after a POST body (RFC 9112 section
			// 2.2); net/http skips up to four such bytes, and so do we.
			peek, _ := c.br.Peek(4)
			c.br.Discard(leadingCRorLF(peek))
		}
		req, hostHeaders, err := c.readRequest()
		if c.s.shutdown.Load() {
			return // as net/http: a request read during Shutdown is not served
		}
		if err != nil {
			c.requestError(err)
			return
		}
		lastMethod = req.Method
		c.r.remain = math.MaxInt64
		c.rwc.SetReadDeadline(time.Time{})
		if !c.serveRequest(base, req, hostHeaders) {
			return
		}
		if !c.state.CompareAndSwap(stateActive, stateIdle) || c.s.shutdown.Load() {
			return
		}
		// Wait for the next request under IdleTimeout, then give its
		// header ReadHeaderTimeout from the arrival of its first bytes
		// (net/http peeks four).
		c.rwc.SetReadDeadline(time.Now().Add(c.s.idleTimeout()))
		if _, err := c.br.Peek(4); err != nil {
			return
		}
		c.rwc.SetReadDeadline(time.Now().Add(c.s.readHeaderTimeout()))
		c.r.remain = c.s.maxHeaderBytes()
	}
}

// leadingCRorLF is the number of CR and LF bytes p starts with.
func leadingCRorLF(p []byte) int {
	n := 0
	for n < len(p) && (p[n] == '\r' || p[n] == '\n') {
		n++
	}
	return n
}

// readRequest reads a request line and header with net/http's parser. It
// also returns the request's Host header fields, which http.ReadRequest
// removes (it moves the value to req.Host, where the host of an
// absolute-form target wins), but which the server's Host checks need as
// sent: the header block is kept as it is read and parsed again with
// net/textproto, net/http's own header reader, in the rare cases where
// req.Host does not tell (absolute form, or no host at all).
func (c *conn) readRequest() (*http.Request, []string, error) {
	cr := c.r
	cr.tap = append(cr.tap[:0], peekBuffered(c.br)...)
	cr.tapping = true
	req, err := http.ReadRequest(c.br)
	cr.tapping = false
	if err != nil {
		return nil, nil, err
	}
	var hosts []string
	switch {
	case req.URL.Host == "" && req.Host != "":
		hosts = []string{req.Host} // the header's value, as it was sent
	case req.URL.Host != "" || req.ProtoAtLeast(1, 1):
		hosts = hostHeaders(cr.tap[:len(cr.tap)-c.br.Buffered()])
	}
	if cap(cr.tap) > 64<<10 {
		cr.tap = nil // do not keep a huge header's buffer for the connection's life
	}
	return req, hosts, nil
}

func peekBuffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// hostHeaders returns the Host header fields of a request header block
// that http.ReadRequest has accepted.
func hostHeaders(block []byte) []string {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(block)))
	if _, err := tp.ReadLine(); err != nil {
		return nil
	}
	h, _ := tp.ReadMIMEHeader()
	return h["Host"]
}

// closeWriteAndWait ends a connection whose client may still be sending
// (a body the server refused, headers too large): it shuts the write side
// and waits a moment before the close, so the client reads the answer
// rather than a reset, as net/http does.
func (c *conn) closeWriteAndWait() {
	c.bw.Flush()
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	time.Sleep(rstAvoidanceDelay)
}

// rstAvoidanceDelay is net/http's figure.
const rstAvoidanceDelay = 500 * time.Millisecond

// PlainHTTPToTLS is the message (passed to ErrorBody) of the answer to a
// plain-HTTP request on a TLS listener.
const PlainHTTPToTLS = "this port serves HTTPS: the client sent plain HTTP; use https:// in the URL"

// plainToTLS answers a plain-HTTP request sent to a TLS listener (the
// TLS handshake read it as a record header) in plain HTTP, saying to use
// https, as net/http does; other errors get no answer.
func (c *conn) plainToTLS(err error) {
	var rhe tls.RecordHeaderError
	if !errors.As(err, &rhe) || rhe.Conn == nil || !bytes.ContainsAny(rhe.RecordHeader[:1], "GPHDOCT") {
		return
	}
	ct, body := "text/plain; charset=utf-8", []byte("400 Bad Request: "+PlainHTTPToTLS)
	if c.s.ErrorBody != nil {
		ct, body = c.s.ErrorBody(http.StatusBadRequest, PlainHTTPToTLS)
	}
	rhe.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(rhe.Conn, "HTTP/1.0 400 Bad Request\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", ct, len(body), body)
}

// requestError answers a request that could not be read, then the
// connection is closed. The answer says what is wrong in general terms
// and never quotes the request: a malformed header line may be the
// Authorization header.
func (c *conn) requestError(err error) {
	if c.r.remain <= 0 {
		c.linger = true // the client may still be sending its header
		c.writeError(http.StatusRequestHeaderFieldsTooLarge, "request headers too large: the request line and headers must fit in "+strconv.FormatInt(c.s.maxHeaderBytes()-4096, 10)+" bytes")
		return
	}
	if isCommonNetReadError(err) {
		return // the client left, or was too slow: nobody to answer
	}
	if msg := err.Error(); strings.HasPrefix(msg, "unsupported transfer encoding") || strings.HasPrefix(msg, "too many transfer encodings") {
		// net/http's unsupportedTEError, known only by its text.
		c.writeError(http.StatusNotImplemented, "unsupported Transfer-Encoding: only chunked is supported")
		return
	}
	c.writeError(http.StatusBadRequest, malformedReason(err))
}

// isCommonNetReadError is net/http's test for a read error that gets no
// answer. Anything else (a truncated header, a malformed target) is
// answered with 400.
func isCommonNetReadError(err error) bool {
	if err == io.EOF {
		return true
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return true
	}
	if oe, ok := err.(*net.OpError); ok && oe.Op == "read" {
		return true
	}
	return false
}

// malformedReason names, in general terms, what http.ReadRequest refused.
// The parser's own messages quote the offending bytes, so they are only
// matched here, never passed on.
func malformedReason(err error) string {
	var ue *url.Error
	var pe textproto.ProtocolError
	msg := err.Error()
	switch {
	case errors.As(err, &ue):
		return "malformed HTTP request: invalid request target (spaces, control characters and bad %-escapes are not allowed)"
	case errors.As(err, &pe), strings.HasPrefix(msg, "malformed MIME header"):
		return "malformed HTTP request: invalid header field (each line must be Name: value, with no space before the colon and no control characters)"
	case strings.HasPrefix(msg, "malformed HTTP request"), strings.HasPrefix(msg, "invalid method"), strings.HasPrefix(msg, "malformed HTTP version"):
		return "malformed HTTP request: invalid request line (it must be METHOD target HTTP/1.1)"
	case strings.HasPrefix(msg, "too many Host headers"):
		return "malformed HTTP request: more than one Host header"
	case strings.Contains(msg, "Content-Length"):
		return "malformed HTTP request: invalid or conflicting Content-Length"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed HTTP request: the connection ended inside the request header"
	}
	return "malformed HTTP request"
}

func (c *conn) writeError(status int, msg string) {
	ct, body := "text/plain; charset=utf-8", []byte(strconv.Itoa(status)+" "+http.StatusText(status)+": "+msg)
	if c.s.ErrorBody != nil {
		ct, body = c.s.ErrorBody(status, msg)
	}
	c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", status, http.StatusText(status), ct, len(body))
	c.bw.Write(body)
	c.bw.Flush()
}

// checkRequest applies the checks net/http's server adds to the parser's.
// hosts are the request's Host header fields as sent.
func checkRequest(req *http.Request, hosts []string) (int, string) {
	h2Upgrade := isH2Upgrade(req)
	if req.ProtoMajor != 1 && !h2Upgrade {
		return http.StatusHTTPVersionNotSupported, "unsupported protocol version: this server speaks HTTP/1.x"
	}
	if req.ProtoAtLeast(1, 1) && len(hosts) == 0 && !h2Upgrade && req.Method != "CONNECT" {
		return http.StatusBadRequest, "missing required Host header"
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return http.StatusBadRequest, "malformed Host header"
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return http.StatusBadRequest, "invalid header name"
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return http.StatusBadRequest, "invalid header value"
			}
		}
	}
	return 0, ""
}

// isH2Upgrade reports the HTTP/2 connection preface read as an HTTP/1
// request ("PRI * HTTP/2.0"): net/http hands it to the handler (which may
// hijack the connection) and closes the connection after the answer.
func isH2Upgrade(req *http.Request) bool {
	return req.Method == "PRI" && len(req.Header) == 0 && req.URL.Path == "*" && req.Proto == "HTTP/2.0"
}

// expectsContinue reports whether the request's (first) Expect header
// holds the token 100-continue, as net/http reads it.
func expectsContinue(req *http.Request) bool {
	return hasToken(req.Header.Get("Expect"), "100-continue")
}

// hasToken reports whether v holds token as a whole word, words being
// separated by spaces, tabs or commas, in any ASCII case: net/http's rule
// for the Connection and Expect headers (not quite the parser's, which
// splits on commas only).
func hasToken(v, token string) bool {
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
		if asciiEqualFold(f, token) {
			return true
		}
	}
	return false
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// serveRequest runs the handler for one request and reports whether the
// connection may serve another.
func (c *conn) serveRequest(base context.Context, req *http.Request, hosts []string) (keep bool) {
	if status, msg := checkRequest(req, hosts); status != 0 {
		c.writeError(status, msg)
		return false
	}
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	parsed := req
	req = req.WithContext(ctx)
	req.RemoteAddr = c.remote
	if tc, ok := c.rwc.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		req.TLS = &cs
	}
	w := &response{c: c, req: req, header: make(http.Header), status: 0, cl: -1, cancel: cancel, closeAfter: isH2Upgrade(req)}
	// Read before the handler runs (it may change the header), with
	// net/http's rules: the first Connection field, as a token list
	// separated by spaces or commas.
	connField := req.Header.Get("Connection")
	w.wantsClose = req.Close || hasToken(connField, "close")
	w.wants10KeepAlive = req.ProtoMajor == 1 && req.ProtoMinor == 0 && hasToken(connField, "keep-alive")
	body := &reqBody{rc: req.Body, c: c, w: w, parsed: parsed}
	w.body = body
	if expectsContinue(req) {
		if req.ProtoAtLeast(1, 1) && req.ContentLength != 0 {
			body.expectContinue, body.continueWrapped = true, true
		}
	} else if req.Header.Get("Expect") != "" {
		c.writeError(http.StatusExpectationFailed, "unsupported Expect header: only 100-continue is supported")
		return false
	}
	noBody := req.Body == nil || req.Body == http.NoBody
	c.r.begin(cancel, noBody)
	body.eof = noBody
	if !noBody {
		req.Body = body
	}
	c.reqStart.Store(time.Now().UnixNano())
	panicked := c.runHandler(w, req)
	c.reqStart.Store(0)
	c.r.end()
	if panicked {
		return false
	}
	w.finish()
	// A client gone during the request (the watch saw EOF or a reset) is
	// no reason to stop here: as in net/http, requests it pipelined
	// before a half-close are still served, and otherwise the next read
	// fails.
	keep = w.err == nil && !w.closeAfter
	if keep {
		var early bool
		keep, early = body.drain()
		c.linger = early // the client may still be sending the body
	}
	return keep && !c.s.shutdown.Load()
}

func (c *conn) runHandler(w *response, req *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logger().Error("http: panic serving request", "remote", c.remote, "path", req.URL.Path, "panic", fmt.Sprint(v), "stack", string(buf))
			}
		}
	}()
	if req.RequestURI == "*" && req.Method == http.MethodOptions {
		optionsStar(w, req) // as net/http's server: the handler never sees it
		return false
	}
	c.s.Handler.ServeHTTP(w, req)
	return false
}

// optionsStar answers "OPTIONS *" as net/http's server does: an empty 200,
// after reading up to 4 KiB of a body (a longer one ends the connection).
func optionsStar(w *response, r *http.Request) {
	w.header.Set("Content-Length", "0")
	if r.ContentLength != 0 {
		if n, _ := io.CopyN(io.Discard, r.Body, 4<<10+1); n > 4<<10 {
			w.closeAfter = true
			w.c.linger = true
		}
	}
}

// connReader reads from the connection for the conn's bufio.Reader, limits
// header bytes, and runs the background read that notices a client that
// leaves while its request runs.
type connReader struct {
	c      *conn
	remain int64 // header bytes left; only the serving goroutine touches remain and the tap
	// tap keeps the bytes read while tapping is set: readRequest's copy of
	// the request header.
	tap     []byte
	tapping bool

	mu          sync.Mutex
	cond        *sync.Cond
	inRead      bool // a background read is running
	aborting    bool
	handlerDone bool
	bodyDone    bool
	hasByte     bool
	byteBuf     [1]byte
	cancel      context.CancelFunc
}

func (cr *connReader) Read(p []byte) (int, error) {
	if cr.remain <= 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) > cr.remain {
		p = p[:cr.remain]
	}
	cr.mu.Lock()
	if cr.hasByte {
		p[0] = cr.byteBuf[0]
		cr.hasByte = false
		cr.mu.Unlock()
		cr.remain--
		if cr.tapping {
			cr.tap = append(cr.tap, p[0])
		}
		return 1, nil
	}
	cr.mu.Unlock()
	n, err := cr.c.rwc.Read(p)
	cr.remain -= int64(n)
	if cr.tapping {
		cr.tap = append(cr.tap, p[:n]...)
	}
	return n, err
}

func (cr *connReader) begin(cancel context.CancelFunc, bodyDone bool) {
	cr.mu.Lock()
	cr.cancel, cr.bodyDone, cr.handlerDone = cancel, bodyDone, false
	cr.mu.Unlock()
}

func (cr *connReader) sawBodyEOF() {
	cr.mu.Lock()
	cr.bodyDone = true
	cr.mu.Unlock()
}

// startWatch starts the background read if the request's body has been read
// and the handler still runs. It reports whether the request needs no
// further look (watch started, or the handler is done).
func (cr *connReader) startWatch() bool {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.handlerDone || cr.inRead || cr.hasByte {
		return true
	}
	if !cr.bodyDone {
		return false // the handler still reads the body: a read error tells it
	}
	cr.inRead = true
	go cr.backgroundRead()
	return true
}

func (cr *connReader) backgroundRead() {
	n, err := cr.c.rwc.Read(cr.byteBuf[:])
	cr.mu.Lock()
	if n == 1 {
		cr.hasByte = true // a pipelined request: keep its first byte
	}
	var ne net.Error
	if err != nil && !(cr.aborting && errors.As(err, &ne) && ne.Timeout()) {
		if cr.cancel != nil { // the client went away
			cr.cancel()
		}
	}
	cr.aborting = false
	cr.inRead = false
	cr.mu.Unlock()
	cr.cond.Broadcast()
}

// end stops a background read; the serving goroutine owns the connection
// again when it returns.
func (cr *connReader) end() {
	cr.mu.Lock()
	cr.handlerDone = true
	if cr.inRead {
		cr.aborting = true
		cr.c.rwc.SetReadDeadline(aLongTimeAgo)
		for cr.inRead {
			cr.cond.Wait()
		}
		cr.c.rwc.SetReadDeadline(time.Time{})
	}
	cr.mu.Unlock()
}

var aLongTimeAgo = time.Unix(1, 0)

// reqBody is the handler's request body: it sends 100 Continue on the first
// read when the client asked for it, and tells the connection when the body
// has been read to its end.
type reqBody struct {
	rc io.ReadCloser
	c  *conn
	w  *response
	// parsed is the request as http.ReadRequest returned it: its body
	// sets parsed.Trailer, which the handler's copy must then show.
	parsed *http.Request
	// continueWrapped: the client asked for 100 Continue (net/http's
	// expectContinueReader); expectContinue: it has not been sent yet.
	continueWrapped bool
	expectContinue  bool
	closed          bool
	eof             bool
	n               int64 // bytes read so far
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.read(p)
}

func (b *reqBody) read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.expectContinue {
		b.expectContinue = false
		if !b.w.committed {
			b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := b.c.bw.Flush(); err != nil {
				return 0, err
			}
		}
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		b.eof = true
		b.w.req.Trailer = b.parsed.Trailer // read with the body's end
		b.c.r.sawBodyEOF()
	} else if err != nil {
		b.w.closeAfter = true // the framing is lost
	}
	return n, err
}

func (b *reqBody) Close() error {
	b.closed = true
	return nil
}

// tooBigToDrain reports whether more than maxDrain bytes of a declared
// Content-Length are still unread.
func (b *reqBody) tooBigToDrain() bool {
	cl := b.w.req.ContentLength
	return cl > 0 && cl-b.n > maxDrain
}

// discard reads what the handler left of the body, up to maxDrain, so the
// connection can serve the next request, and reports whether it could
// (net/http's discard before an answer's header).
func (b *reqBody) discard() bool {
	if b.eof {
		return true
	}
	if b.expectContinue || b.tooBigToDrain() {
		return false // not sent yet (the client waits for 100 Continue), or too much of it
	}
	n, err := b.consume(maxDrain + 1)
	return n <= maxDrain && err == io.EOF
}

// drain reads what is left of the body after the handler returned, as
// net/http's Close of a request body does, and reports whether the
// connection can serve another request. early: it gave up on a long body
// (more than maxDrain bytes declared, or maxDrain bytes brought no end),
// whose client may still be sending.
func (b *reqBody) drain() (ok, early bool) {
	if b.eof {
		return true, false
	}
	if b.expectContinue {
		return false, false
	}
	if b.tooBigToDrain() {
		return false, true
	}
	n, err := b.consume(maxDrain)
	if n == maxDrain {
		return false, true
	}
	return err == io.EOF, false
}

// consume reads and drops up to max bytes of the body, under a read
// deadline (net/http has none unless ReadTimeout is set).
func (b *reqBody) consume(max int64) (int64, error) {
	b.c.rwc.SetReadDeadline(time.Now().Add(b.c.s.readHeaderTimeout()))
	defer b.c.rwc.SetReadDeadline(time.Time{})
	return io.CopyN(io.Discard, readerFunc(b.read), max)
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// response is the handler's http.ResponseWriter. Body bytes are kept until
// the first flush, a full buffer or the handler's return, so that a short
// answer goes out with a Content-Length; after that they are written
// through, chunked unless the handler set a Content-Length.
type response struct {
	c           *conn
	req         *http.Request
	body        *reqBody
	header      http.Header
	cancel      context.CancelFunc
	status      int
	wroteHeader bool
	committed   bool
	buf         []byte
	cl          int64 // declared Content-Length, -1 if none
	written     int64
	chunked     bool
	discard     bool // HEAD or a status without a body: body bytes are dropped
	closeAfter  bool
	// wantsClose and wants10KeepAlive: what the request asked of the
	// connection, read before the handler ran.
	wantsClose       bool
	wants10KeepAlive bool
	err              error
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader || w.committed {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.wroteHeader = true
	w.status = code
	if v := w.header.Get("Content-Length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n >= 0 {
			w.cl = n
		} else {
			w.c.s.logger().Warn("http: handler set an invalid Content-Length; dropped", "value", v)
			w.header.Del("Content-Length")
		}
	}
	w.discard = w.req.Method == http.MethodHead || !bodyAllowed(code)
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

func (w *response) writeInformational(code int) {
	fmt.Fprintf(w.c.bw, "HTTP/1.1 %d %s\r\n", code, statusText(code))
	w.header.Write(w.c.bw)
	w.c.bw.WriteString("\r\n")
	w.setErr(w.c.bw.Flush())
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if len(w.buf)+len(p) <= bufferBeforeCommit {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		w.commit(false, p)
		if w.err != nil {
			return 0, w.err
		}
	}
	w.writeBody(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

func (w *response) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

// commit writes the status line and headers, then the buffered body.
// next is the first body bytes after the buffered ones, for sniffing the
// Content-Type when nothing was buffered.
func (w *response) commit(final bool, next []byte) {
	w.committed = true
	h := w.header
	req := w.req
	switch {
	case !bodyAllowed(w.status):
	case w.cl >= 0:
	case final:
		if req.Method != http.MethodHead || len(w.buf) > 0 {
			h["Content-Length"] = []string{strconv.Itoa(len(w.buf))}
		}
	case req.Method == http.MethodHead:
	case req.ProtoAtLeast(1, 1):
		w.chunked = true
		h["Transfer-Encoding"] = []string{"chunked"}
	default:
		w.closeAfter = true // HTTP/1.0 and no length: the body ends at close
	}
	if _, ok := h["Content-Type"]; !ok && bodyAllowed(w.status) {
		if sniff := w.buf; len(sniff) > 0 || len(next) > 0 {
			if len(sniff) == 0 {
				sniff = next
			}
			h["Content-Type"] = []string{http.DetectContentType(sniff)}
		}
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{httpDate()}
	}
	// Keep-alive as net/http decides it: an HTTP/1.0 client that asked
	// for it keeps the connection when the answer's length is known.
	_, hasCL := h["Content-Length"]
	if w.wants10KeepAlive && (req.Method == http.MethodHead || hasCL || !bodyAllowed(w.status)) {
		// kept
	} else if !req.ProtoAtLeast(1, 1) || w.wantsClose {
		w.closeAfter = true
	}
	if strings.EqualFold(h.Get("Connection"), "close") {
		w.closeAfter = true
	}
	w.settleRequestBody()
	switch {
	case w.closeAfter || w.c.s.shutdown.Load():
		h["Connection"] = []string{"close"}
	case w.wants10KeepAlive:
		if _, set := h["Connection"]; !set {
			h["Connection"] = []string{"keep-alive"}
		}
	}
	bw := w.c.bw
	proto := "HTTP/1.1 "
	if !req.ProtoAtLeast(1, 1) {
		proto = "HTTP/1.0 "
	}
	bw.WriteString(proto)
	bw.WriteString(strconv.Itoa(w.status))
	bw.WriteByte(' ')
	bw.WriteString(statusText(w.status))
	bw.WriteString("\r\n")
	writeHeaderFields(bw, h)
	bw.WriteString("\r\n")
	if len(w.buf) > 0 {
		w.writeBody(w.buf)
		w.buf = nil
	}
}

// settleRequestBody decides, before the answer's header goes out, what
// becomes of a request body the handler has not read to its end, as
// net/http does: a rest of up to maxDrain bytes is read and dropped (and
// the body closed) so the connection can serve another request; a larger
// one, or a body refused with 413, ends the connection after the answer,
// which then says Connection: close. Reading the rest only after the
// answer would take a client's next request, sent on seeing a keep-alive
// answer, for body bytes.
func (w *response) settleRequestBody() {
	b := w.body
	if b.continueWrapped {
		// net/http never discards such a body: a client that was not
		// told to continue has not sent it.
		if !b.eof {
			w.closeAfter = true
		}
		return
	}
	if w.closeAfter || w.req.ContentLength == 0 || w.c.s.shutdown.Load() {
		return
	}
	switch {
	case b.eof:
		b.closed = true // as net/http: the body reads ErrBodyReadAfterClose from now on
	case b.closed:
		// Closed unread by the handler: net/http's Close looks for the
		// end within maxDrain bytes.
		if ok, early := b.drain(); !ok {
			w.closeAfter = true
			w.c.linger = early
		}
	case w.status == http.StatusRequestEntityTooLarge || b.tooBigToDrain():
		// The only departure from net/http: a handler that refuses a body
		// as too large with a small rest of it unread also ends the
		// connection (net/http learns it from MaxBytesReader, which it
		// alone can implement).
		w.closeAfter = true
		w.c.linger = true // the client may still be sending the body
	case b.discard():
		b.closed = true
	default:
		w.closeAfter = true // more than maxDrain bytes, or a broken body
	}
}

// writeHeaderFields writes h as http.Header.Write does (fields with invalid
// names dropped, CR and LF in values turned to spaces) but unsorted: the
// order of header fields carries no meaning, and sorting costs a pool
// round trip per answer.
func writeHeaderFields(bw *bufio.Writer, h http.Header) {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			if strings.ContainsAny(v, "\r\n") {
				v = headerNewlineToSpace.Replace(v)
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(textproto.TrimString(v))
			bw.WriteString("\r\n")
		}
	}
}

var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

type cachedDate struct {
	sec int64
	s   string
}

var dateCache atomic.Pointer[cachedDate]

// httpDate is the Date header value, formatted once a second.
func httpDate() string {
	now := time.Now()
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &cachedDate{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}

func (w *response) writeBody(p []byte) {
	if w.discard || w.err != nil {
		return
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		w.setErr(err)
		return
	}
	_, err := bw.Write(p)
	w.setErr(err)
}

func (w *response) setErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
		w.closeAfter = true
		w.cancel() // the client is gone: stop the work for it
	}
}

// Flush sends what has been written so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false, nil)
	}
	if w.err == nil {
		w.setErr(w.c.bw.Flush())
	}
	return w.err
}

// finish completes the answer after the handler returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true, nil)
	}
	if w.chunked && w.err == nil {
		_, err := w.c.bw.WriteString("0\r\n\r\n")
		w.setErr(err)
	}
	if w.err == nil {
		w.setErr(w.c.bw.Flush())
	}
	if w.cl >= 0 && w.written != w.cl && !w.discard {
		w.closeAfter = true // the client waits for bytes that will not come
	}
}
