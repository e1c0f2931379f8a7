// Package netlimit caps how many connections a listener has open at once.
//
// A server that accepts every connection can be made to hold any number of
// them (each costs a file descriptor, a goroutine and buffers) by clients
// that open connections and send nothing, or trickle. At the cap the
// listener stops handing out connections until one of its connections
// closes: clients beyond it wait (the first accepted but held, the rest in
// the kernel's accept queue; once that is full their TCP stacks retry the
// connection) rather than being accepted and closed at once, which would
// lose requests a moment of load could have served.
//
// Only connections that hold work keep a client waiting. A keep-alive
// connection idle between requests is closed to make room for a client
// waiting at the cap, the longest idle first; the HTTP server says which
// connections are idle through ConnState. HTTP/1.1 clients expect a server
// to close idle keep-alive connections (net/http's own IdleTimeout does)
// and open a new one; a request that crosses the close on the wire fails
// before any byte of an answer, which clients retry when the request is
// idempotent.
package netlimit

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Setting is the configuration key that sets the cap, named in the
// warning logged when it is reached.
const Setting = "max_connections"

// warnEvery bounds how often reaching the cap is logged.
const warnEvery = time.Minute

// Limit returns ln with at most max of its accepted connections open at
// once; max <= 0 returns ln itself. log receives a warning when the cap is
// reached with no idle connection to close, at most once a minute. Give
// the returned Listener's ConnState to the HTTP server, or no connection
// counts as idle.
func Limit(ln net.Listener, max int, log *slog.Logger) net.Listener {
	if max <= 0 {
		return ln
	}
	if log == nil {
		log = slog.Default()
	}
	return &Listener{Listener: ln, max: max, log: log, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// Listener is a net.Listener with a cap on open connections. It is meant
// for one accepting goroutine, as http.Server runs.
type Listener struct {
	net.Listener
	max        int
	log        *slog.Logger
	done       chan struct{}
	closeOnce  sync.Once
	lastWarn   atomic.Int64 // unix ns of the last warning
	held       atomic.Int64 // accepts held at the cap since the last warning
	closedIdle atomic.Int64

	mu   sync.Mutex
	open int   // connections counted: accepted and not closed
	idle queue // idle connections, longest idle first
	// wake is signalled (without blocking) when a connection closes or
	// goes idle: an Accept waiting at the cap looks again.
	wake chan struct{}
}

// Accept waits for a connection, then, at the cap, for room: an idle
// connection is closed to make it, else the connection is held until one
// closes or goes idle.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := l.admit(); err != nil {
		c.Close()
		return nil, err
	}
	return &conn{Conn: c, l: l}, nil
}

// admit counts one more connection, making room at the cap.
func (l *Listener) admit() error {
	warned := false
	l.mu.Lock()
	for l.open >= l.max {
		if v := l.idle.pop(); v != nil {
			v.idle = false
			if v.closed.CompareAndSwap(false, true) {
				// Its slot passes to the new connection; the server's
				// Close of it, when its read fails, gives back nothing.
				l.mu.Unlock()
				v.Conn.Close()
				l.closedIdle.Add(1)
				return nil
			}
			continue // closing already: its own Close frees the slot
		}
		l.mu.Unlock()
		if !warned {
			l.warn()
			warned = true
		}
		select {
		case <-l.wake:
		case <-l.done:
			return net.ErrClosed
		}
		l.mu.Lock()
	}
	l.open++
	l.mu.Unlock()
	return nil
}

// ConnState is the http.Server hook that tells the listener which
// connections are idle between requests (and so may be closed to make
// room at the cap) and which hold work. Connections of another listener
// are ignored; TLS connections are recognised through NetConn.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c := l.find(nc)
	if c == nil {
		return
	}
	switch s {
	case http.StateIdle:
		l.mu.Lock()
		if !c.closed.Load() && !c.idle {
			c.idle = true
			l.idle.push(c)
		}
		l.mu.Unlock()
		l.signal()
	case http.StateActive, http.StateHijacked:
		l.mu.Lock()
		if c.idle {
			c.idle = false
			l.idle.remove(c)
		}
		l.mu.Unlock()
	}
}

// find returns the listener's conn under nc, unwrapping TLS.
func (l *Listener) find(nc net.Conn) *conn {
	for nc != nil {
		if c, ok := nc.(*conn); ok {
			if c.l == l {
				return c
			}
			return nil
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = u.NetConn()
	}
	return nil
}

func (l *Listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// release gives back the slot of a closed connection.
func (l *Listener) release(c *conn) {
	l.mu.Lock()
	if c.idle {
		c.idle = false
		l.idle.remove(c)
	}
	l.open--
	l.mu.Unlock()
	l.signal()
}

// Close closes the listener and ends an Accept waiting for room.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open is the number of connections open, idle ones included.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// ClosedIdle is the number of idle connections closed to make room.
func (l *Listener) ClosedIdle() int64 { return l.closedIdle.Load() }

func (l *Listener) warn() {
	n := l.held.Add(1)
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last < int64(warnEvery) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	l.held.Add(-n)
	l.log.Warn("connection limit reached with every connection holding a request: new client connections wait until one finishes; if this is expected load, raise "+Setting+" in the config (each connection costs a file descriptor and about 10 KB)",
		Setting, l.max, "held_since_last_warning", n)
}

// conn gives its slot back on its first Close.
type conn struct {
	net.Conn
	l      *Listener
	closed atomic.Bool
	// Guarded by l.mu: idle says whether it is in the idle queue.
	idle       bool
	prev, next *conn
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c)
	}
	return err
}

// CloseWrite passes through, so that net/http can half-close a connection
// whose client is still sending before it closes it.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// queue is a doubly linked list of connections, oldest first.
type queue struct{ head, tail *conn }

func (q *queue) push(c *conn) {
	c.prev, c.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = c
	} else {
		q.head = c
	}
	q.tail = c
}

func (q *queue) remove(c *conn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		q.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		q.tail = c.prev
	}
	c.prev, c.next = nil, nil
}

// pop removes and returns the oldest connection, nil when empty.
func (q *queue) pop() *conn {
	c := q.head
	if c != nil {
		q.remove(c)
	}
	return c
}
