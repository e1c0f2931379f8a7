// Package netlimit caps how many connections a listener has open at once.
//
// A server that accepts every connection can be made to hold any number of
// them (each costs a file descriptor, a goroutine and buffers) by clients
// that open connections and send nothing, or trickle. At the cap the
// listener stops accepting until one of its connections closes: clients
// beyond it wait in the kernel's accept queue (and, once that is full,
// their TCP stacks retry the connection) rather than being accepted and
// closed at once, which would lose requests a moment of load could have
// served.
package netlimit

import (
	"errors"
	"log/slog"
	"net"
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
// reached, at most once a minute.
func Limit(ln net.Listener, max int, log *slog.Logger) net.Listener {
	if max <= 0 {
		return ln
	}
	if log == nil {
		log = slog.Default()
	}
	return &Listener{Listener: ln, slots: make(chan struct{}, max), max: max, log: log, done: make(chan struct{})}
}

// Listener is a net.Listener with a cap on open connections.
type Listener struct {
	net.Listener
	slots     chan struct{} // one element per open (or being accepted) connection
	max       int
	log       *slog.Logger
	done      chan struct{}
	closeOnce sync.Once
	lastWarn  atomic.Int64 // unix ns of the last warning
	held      atomic.Int64 // accepts held at the cap since the last warning
}

// Accept waits for a free slot, then for a connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	default:
		l.warn()
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &conn{Conn: c, l: l}, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open is the number of connections open (or being accepted).
func (l *Listener) Open() int { return len(l.slots) }

func (l *Listener) warn() {
	n := l.held.Add(1)
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last < int64(warnEvery) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	l.held.Add(-n)
	l.log.Warn("connection limit reached: new client connections wait until an open one closes; if this is expected load, raise "+Setting+" in the config (each connection costs a file descriptor and about 10 KB)",
		Setting, l.max, "held_since_last_warning", n)
}

// conn gives its slot back on its first Close.
type conn struct {
	net.Conn
	l      *Listener
	closed atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		<-c.l.slots
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
