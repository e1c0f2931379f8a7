// Package h1server is llmgate's own HTTP/1.1 server, the opt-in
// alternative (http_server: builtin) to net/http's Server on the gateway's
// listener: a lean replacement that runs any http.Handler.
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
// headers, Content-Length and chunked bodies, smuggling checks), plus what
// net/http's server adds (Host header rules, header field syntax, header
// size, Expect, Connection and keep-alive rules, OPTIONS *), with its rules
// for a body the handler did not read. A differential fuzz target
// (difffuzz_test.go) feeds the same bytes to this server and to net/http's
// and fails on any difference in the requests their handlers are given.
// The one deliberate difference: an answer of 413 to a body not read to
// its end closes the connection. Errors the server answers itself never
// quote the request.
//
// Supported: keep-alive and pipelining, HTTP/1.0, chunked and
// Content-Length request bodies, Expect: 100-continue, streaming with
// http.Flusher / http.ResponseController, Content-Length for answers that
// fit the buffer and chunked encoding for the rest, HEAD, idle and header
// time-outs, TLS (HTTP/1.1 only), graceful Shutdown. Not supported:
// HTTP/2, Hijack, response trailers — the gateway's listener needs none of
// them.
package h1server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

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
