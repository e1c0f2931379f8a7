//go:build linux && race

package rawio

import (
	"errors"
	"syscall"
)

// Under the race detector the reads and writes go through syscall.Read and
// syscall.Write: the same non-blocking calls on the same path, plus the
// happens-before edges the detector draws between I/O (a write to any
// descriptor before a read from any). Without them, tests whose client and
// server share the process report false races.

const supported = true

func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return n, errno(err)
}

func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, err := syscall.Write(int(fd), p)
	return n, errno(err)
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
