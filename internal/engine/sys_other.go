//go:build !linux

package engine

import "syscall"

// parentDeathSignal is Linux only; elsewhere an engine left running by a
// crashed gateway is found through the state file at the next start (when
// the platform has /proc; otherwise it stays, as before).
func parentDeathSignal(a *syscall.SysProcAttr, sig syscall.Signal) {}
