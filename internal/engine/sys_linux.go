//go:build linux

package engine

import "syscall"

// parentDeathSignal asks the kernel to send sig to the child when the
// thread that started it dies (prctl PR_SET_PDEATHSIG). spawnLocked starts
// the child on a goroutine locked to its OS thread until the child exits,
// so that thread dies only with the gateway: the runtime terminates a
// thread only when a goroutine exits while locked to it, and no other
// goroutine ever runs on a locked thread (golang/go#27505).
func parentDeathSignal(a *syscall.SysProcAttr, sig syscall.Signal) {
	a.Pdeathsig = sig
}
