package provider

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"llmgate/internal/rawio"
)

// h1Client is a lean HTTP/1.1 client for plain-http backends (local
// engines on loopback or a LAN, where no proxy applies). It does the
// request's I/O on the calling goroutine: write, then read the response
// headers and body from the same connection. net/http's Transport instead
// hands each request to a per-connection write goroutine and the response
// back from a read goroutine; on an otherwise idle gateway every such
// hand-off wakes a sleeping thread, which costs more than the hop itself
// (measured with bench/gateway.sh: the gateway's added p50 at 1,000 req/s).
//
// What it supports is what a gateway needs from such a backend: requests
// with a known body length, Content-Length, chunked and close-delimited
// responses (SSE streams are chunked), keep-alive with an idle pool,
// cancellation through the request's context, a response-header time-out,
// and one transparent retry on a fresh connection when a pooled one turns
// out to have been closed by the server before any byte of the answer
// arrived (the case net/http retries too). Its handling of answers is
// fuzzed against net/http's Transport (h1client_fuzz_test.go), and
// upstream_client: stdlib switches a backend to that Transport.
type h1Client struct {
	dialer      *net.Dialer
	firstByte   time.Duration // response-header time-out, 0 for none
	idleTimeout time.Duration
	maxIdle     int

	mu sync.Mutex
	// idle holds pooled connections per host:port (an engine's backend
	// may move to another port when the engine restarts); LIFO, so the
	// most recently used connection, the warmest, goes first.
	idle map[string][]*h1Conn
	// reaper closes connections idle for longer than idleTimeout, as
	// net/http's Transport does, so a retired backend's pool (after a
	// config reload) does not hold sockets forever.
	reaper *time.Timer
}

type h1Conn struct {
	addr     string
	conn     net.Conn
	cr       countingReader
	br       *bufio.Reader
	bw       *bufio.Writer
	lastUsed time.Time
}

// countingReader counts bytes read from the connection, so that a failure
// on a reused connection can be told apart from a failure mid-answer, and
// bounds the bytes read while response headers are read.
type countingReader struct {
	r net.Conn
	n int64
	// limit is what may still be read, when limited is set (while the
	// response headers are read, as net/http's Transport does).
	limit   int64
	limited bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.limited {
		if c.limit <= 0 {
			return 0, errHeadersTooLarge
		}
		if int64(len(p)) > c.limit {
			p = p[:c.limit]
		}
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.limit -= int64(n)
	return n, err
}

// maxResponseHeaderBytes bounds a response's headers, informational
// answers included: net/http's Transport default.
const maxResponseHeaderBytes = 10 << 20

var errHeadersTooLarge = fmt.Errorf("server response headers exceeded %d bytes; aborted", maxResponseHeaderBytes)

func newH1Client(dialer *net.Dialer, firstByte, idleTimeout time.Duration, maxIdle int) *h1Client {
	return &h1Client{dialer: dialer, firstByte: firstByte, idleTimeout: idleTimeout, maxIdle: maxIdle, idle: map[string][]*h1Conn{}}
}

// hostPort is the address to dial for u, with the scheme's default port.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// earlyAnswerWait bounds the wait for an answer the backend may have sent
// before it stopped reading the request body.
const earlyAnswerWait = time.Second

// aLongTimeAgo is a deadline in the past: setting it makes blocked reads
// and writes on a connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

// get returns a pooled connection (reused=true) or dials a new one.
func (cl *h1Client) get(ctx context.Context, addr string, fresh bool) (*h1Conn, bool, error) {
	if !fresh {
		now := time.Now()
		cl.mu.Lock()
		for n := len(cl.idle[addr]); n > 0; n = len(cl.idle[addr]) {
			pool := cl.idle[addr]
			pc := pool[n-1]
			pool[n-1] = nil
			cl.idle[addr] = pool[:n-1]
			if cl.idleTimeout > 0 && now.Sub(pc.lastUsed) > cl.idleTimeout {
				cl.mu.Unlock()
				pc.conn.Close()
				cl.mu.Lock()
				continue
			}
			cl.mu.Unlock()
			return pc, true, nil
		}
		cl.mu.Unlock()
	}
	c, err := cl.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c = rawio.Wrap(c) // reads and writes without waking the runtime's monitor thread
	pc := &h1Conn{addr: addr, conn: c}
	pc.cr.r = c
	pc.br = bufio.NewReaderSize(&pc.cr, 32<<10)
	pc.bw = bufio.NewWriterSize(c, 32<<10)
	return pc, false, nil
}

// put returns a connection whose last answer was read completely.
func (cl *h1Client) put(pc *h1Conn) {
	if pc.br.Buffered() > 0 {
		// The backend sent bytes past the end of its answer: they would
		// be read as the next request's answer. net/http's Transport
		// closes such a connection too.
		pc.conn.Close()
		return
	}
	pc.lastUsed = time.Now()
	cl.mu.Lock()
	if pool := cl.idle[pc.addr]; len(pool) < cl.maxIdle {
		cl.idle[pc.addr] = append(pool, pc)
		if cl.idleTimeout > 0 && cl.reaper == nil {
			cl.reaper = time.AfterFunc(cl.idleTimeout, cl.reap)
		}
		cl.mu.Unlock()
		return
	}
	cl.mu.Unlock()
	pc.conn.Close()
}

// reap closes the connections idle for longer than idleTimeout and re-arms
// itself while any remain pooled.
func (cl *h1Client) reap() {
	now := time.Now()
	var stale []*h1Conn
	cl.mu.Lock()
	left := 0
	for addr, pool := range cl.idle {
		kept := pool[:0]
		for _, pc := range pool { // oldest first
			if now.Sub(pc.lastUsed) >= cl.idleTimeout {
				stale = append(stale, pc)
			} else {
				kept = append(kept, pc)
			}
		}
		clear(pool[len(kept):])
		if len(kept) == 0 {
			delete(cl.idle, addr)
		} else {
			cl.idle[addr] = kept
			left += len(kept)
		}
	}
	cl.reaper = nil
	if left > 0 {
		cl.reaper = time.AfterFunc(cl.idleTimeout/2+time.Millisecond, cl.reap)
	}
	cl.mu.Unlock()
	for _, pc := range stale {
		pc.conn.Close()
	}
}

// CloseIdleConnections closes every pooled connection.
func (cl *h1Client) CloseIdleConnections() {
	cl.mu.Lock()
	idle := cl.idle
	cl.idle = map[string][]*h1Conn{}
	cl.mu.Unlock()
	for _, pool := range idle {
		for _, pc := range pool {
			pc.conn.Close()
		}
	}
}

// Do sends req and returns the response with its headers read; the body
// streams from the connection. The caller must close the body.
func (cl *h1Client) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	addr := hostPort(req.URL)
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		pc, reused, err := cl.get(ctx, addr, attempt > 0)
		if err != nil {
			return nil, err
		}
		resp, err := cl.roundTrip(ctx, pc, req)
		if err == nil {
			return resp, nil
		}
		pc.conn.Close()
		if !reused || pc.cr.n != 0 || ctx.Err() != nil || !retryableReuseErr(err) || attempt > 0 {
			return nil, err
		}
		// The pooled connection had been closed by the server while idle:
		// nothing of the answer arrived, so sending again is safe.
		if req.Body != nil {
			if req.GetBody == nil {
				return nil, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			req.Body = body
		}
	}
}

func retryableReuseErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

func (cl *h1Client) roundTrip(ctx context.Context, pc *h1Conn, req *http.Request) (*http.Response, error) {
	pc.cr.n = 0
	if cl.firstByte > 0 {
		_ = pc.conn.SetDeadline(time.Now().Add(cl.firstByte))
	} else {
		_ = pc.conn.SetDeadline(time.Time{})
	}
	// A cancelled request closes its connection: blocked reads and writes
	// return, and the backend sees the client go (an engine then stops
	// generating for it).
	stop := context.AfterFunc(ctx, func() { _ = pc.conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	werr := req.Write(pc.bw)
	if werr == nil {
		werr = pc.bw.Flush()
	}
	if werr != nil {
		// A backend may answer before it read the whole body (413, 400,
		// 401) and close: that answer, if it came, beats "broken pipe".
		if ctx.Err() != nil {
			return fail(werr)
		}
		_ = pc.conn.SetReadDeadline(time.Now().Add(earlyAnswerWait))
		pc.cr.limit, pc.cr.limited = maxResponseHeaderBytes, true
		resp, err := http.ReadResponse(pc.br, req)
		pc.cr.limited = false
		if err != nil || resp.StatusCode < 200 {
			return fail(werr)
		}
		_ = pc.conn.SetReadDeadline(time.Time{})
		resp.Body = &h1Body{rc: resp.Body, pc: pc, cl: cl, stop: stop, keep: false, ctx: ctx}
		return resp, nil
	}
	var resp *http.Response
	// The headers of the answer and of any informational ones before it
	// may take maxResponseHeaderBytes, bytes read ahead with them included.
	pc.cr.limit, pc.cr.limited = maxResponseHeaderBytes, true
	for {
		var err error
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			if pc.cr.limit <= 0 {
				err = errHeadersTooLarge
			}
			pc.cr.limited = false
			return fail(err)
		}
		// Informational answers (100 Continue, 103 Early Hints) precede
		// the real one. (101 is final, and so is a status below 100,
		// which net/http's Transport also hands over as it came.)
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	pc.cr.limited = false
	if cl.firstByte > 0 {
		_ = pc.conn.SetDeadline(time.Time{})
		if ctx.Err() != nil {
			// Cancelled while the deadline was being cleared.
			_ = pc.conn.SetDeadline(aLongTimeAgo)
		}
	}
	keep := !resp.Close && !req.Close && resp.StatusCode >= 200
	if isProtocolSwitch(resp) {
		// As net/http's Transport: what follows is no longer HTTP, and
		// the body is the connection's bytes until it closes. (No request
		// of the gateway asks for an upgrade.)
		resp.Body = io.NopCloser(pc.br)
		keep = false
	}
	resp.Body = &h1Body{rc: resp.Body, pc: pc, cl: cl, stop: stop, keep: keep, ctx: ctx}
	return resp, nil
}

func isProtocolSwitch(resp *http.Response) bool {
	return resp.StatusCode == http.StatusSwitchingProtocols && resp.Header.Get("Upgrade") != "" &&
		httpguts.HeaderValuesContainsToken(resp.Header["Connection"], "Upgrade")
}

// h1Body returns its connection to the pool once the answer has been read
// to the end, and closes it when the reader stops early. Close may be
// called from another goroutine to abort a blocked Read.
type h1Body struct {
	rc   io.ReadCloser
	pc   *h1Conn
	cl   *h1Client
	stop func() bool
	ctx  context.Context
	keep bool

	mu   sync.Mutex
	eof  bool
	done bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	done, eof := b.done, b.eof
	b.mu.Unlock()
	if done {
		if eof {
			return 0, io.EOF
		}
		return 0, net.ErrClosed
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.mu.Lock()
		if !b.done {
			b.eof, b.done = true, true
			// stop reports false when the cancellation already fired:
			// the connection's deadline is then in the past.
			if b.stop() && b.keep {
				b.cl.put(b.pc)
			} else {
				b.pc.conn.Close()
			}
		}
		b.mu.Unlock()
	} else if err != nil && b.ctx.Err() != nil {
		err = b.ctx.Err()
	}
	return n, err
}

// Close releases the connection. An answer not read to the end leaves
// bytes on it, so it is closed rather than pooled.
func (b *h1Body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	b.done = true
	b.stop()
	b.pc.conn.Close()
	return nil
}
