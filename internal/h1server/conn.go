package h1server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

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
