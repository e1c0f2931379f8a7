// Package rawio does a TCP connection's reads and writes as raw system
// calls on the calling goroutine, through syscall.RawConn.
//
// Why: net.Conn's Read and Write enter the scheduler's syscall state, and
// the first one after the process went idle wakes the runtime's monitor
// thread (sysmon), which then polls every 20µs until the process is idle
// again. On a gateway that is idle between requests that is one futex wake
// on the request's critical path, twice per proxied request (client read,
// upstream read), and about four of the process's seven thread switches per
// request (measured with perf sched tracepoints at 1,000 req/s). The
// descriptors are non-blocking, so a raw read or write never blocks; when it
// would (EAGAIN) RawConn parks the goroutine in the netpoller exactly as
// net.Conn does, and deadlines and Close work as with net.Conn.
//
// Only TCP connections on Linux take the raw path (a *net.TCPConn, or a
// wrapper of one that exposes its syscall.Conn, such as the connection
// limiter's); anything else is returned unchanged. Race-detector builds use syscall.Read/Write on the same path,
// for the detector's I/O happens-before edges (raw_linux_race.go).
package rawio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// disabled turns Wrap into a no-op (socket_io: standard).
var disabled atomic.Bool

// SetEnabled switches the raw path on or off for connections wrapped from
// now on (default on). Under heavy host contention (a VM whose CPUs the
// hypervisor often gives away) the runtime's hand-off of a processor during
// system calls can matter more than the thread wake-ups saved: see
// docs/performance.md.
func SetEnabled(on bool) { disabled.Store(!on) }

// Conn is a net.Conn whose Read and Write are raw system calls.
type Conn struct {
	net.Conn
	rc syscall.RawConn

	rmu    sync.Mutex
	rbuf   []byte
	rn     int
	rerr   syscall.Errno
	readFn func(uintptr) bool

	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werr    syscall.Errno
	writeFn func(uintptr) bool
}

// Wrap returns c with raw reads and writes when it is a TCP connection on
// Linux, and c itself otherwise. A wrapper of a TCP connection that
// exposes SyscallConn has its own Read and Write bypassed: only wrappers
// that read and write the socket as it is may expose it. Close, deadlines
// and CloseWrite still go through c.
func Wrap(c net.Conn) net.Conn {
	if !supported || disabled.Load() {
		return c
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	if _, tcp := c.LocalAddr().(*net.TCPAddr); !tcp {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &Conn{Conn: c, rc: rc}
	rw.readFn = rw.doRead
	rw.writeFn = rw.doWrite
	return rw
}

func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readFn)
	c.rbuf = nil
	if err != nil {
		return 0, c.opError("read", err)
	}
	if c.rerr != 0 {
		return 0, c.opError("read", os.NewSyscallError("read", c.rerr))
	}
	if c.rn == 0 {
		return 0, io.EOF
	}
	return c.rn, nil
}

func (c *Conn) doRead(fd uintptr) bool {
	for {
		n, errno := rawRead(fd, c.rbuf)
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // RawConn waits for readability, honouring the deadline
		}
		c.rn, c.rerr = max(n, 0), errno
		return true
	}
}

func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	total := 0
	for total < len(p) {
		c.wbuf, c.wn, c.werr = p[total:], 0, 0
		err := c.rc.Write(c.writeFn)
		c.wbuf = nil
		total += c.wn
		if err != nil {
			return total, c.opError("write", err)
		}
		if c.werr != 0 {
			return total, c.opError("write", os.NewSyscallError("write", c.werr))
		}
	}
	return total, nil
}

func (c *Conn) doWrite(fd uintptr) bool {
	for {
		n, errno := rawWrite(fd, c.wbuf)
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.wn, c.werr = max(n, 0), errno
		return true
	}
}

// CloseWrite shuts down the writing side of the connection, when the
// wrapped connection can.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// opError wraps err as net.Conn's own errors are wrapped, so that callers'
// errors.Is / errors.As checks (timeouts, net.ErrClosed, ECONNRESET) and
// messages ("write: connection reset by peer") are the same.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
