//go:build linux && !race

package rawio

import (
	"syscall"
	"unsafe"
)

const supported = true

func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), errno
}

func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), errno
}
