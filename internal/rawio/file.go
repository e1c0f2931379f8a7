package rawio

import (
	"os"
	"syscall"
)

// File appends to a regular file with raw write system calls, for a file
// written on a request's critical path (the usage ledger's journal): an
// os.File Write enters the scheduler's syscall state like a socket write,
// and measured at 1,000 req/s the journal's one write per request cost two
// more thread switches and ~80µs of CPU per request through the monitor
// thread it wakes. A write to a regular file lands in the page cache in
// microseconds; the one case that can block longer (the kernel throttling
// a writer of too many dirty pages) holds this goroutine's processor for
// that time instead of handing it on. Where the raw path is off (another
// OS, a race build, socket_io: standard) it is os.File's Write.
type File struct {
	f       *os.File
	rc      syscall.RawConn
	buf     []byte
	n       int
	errno   syscall.Errno
	writeFn func(uintptr) bool
}

// NewFile wraps f, which must be opened for writing.
func NewFile(f *os.File) *File {
	w := &File{f: f}
	if supported && !disabled.Load() {
		if rc, err := f.SyscallConn(); err == nil {
			w.rc = rc
			w.writeFn = func(fd uintptr) bool {
				w.n, w.errno = rawWrite(fd, w.buf)
				return true // a regular file is never "not ready"
			}
		}
	}
	return w
}

// Write writes all of p, as os.File's Write does. It is not safe for
// concurrent use.
func (w *File) Write(p []byte) (int, error) {
	if w.rc == nil {
		return w.f.Write(p)
	}
	written := 0
	for written < len(p) {
		w.buf = p[written:]
		err := w.rc.Write(w.writeFn)
		w.buf = nil
		if err != nil {
			return written, &os.PathError{Op: "write", Path: w.f.Name(), Err: err}
		}
		if w.errno == syscall.EINTR {
			continue
		}
		if w.errno != 0 {
			return written, &os.PathError{Op: "write", Path: w.f.Name(), Err: w.errno}
		}
		if w.n == 0 {
			return written, &os.PathError{Op: "write", Path: w.f.Name(), Err: syscall.EIO}
		}
		written += w.n
	}
	return written, nil
}
