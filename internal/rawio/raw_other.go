//go:build !linux

package rawio

import "syscall"

const supported = false

func rawRead(fd uintptr, p []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }
func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
