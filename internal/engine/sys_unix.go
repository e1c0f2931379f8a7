//go:build unix

package engine

import "syscall"

// procAttr puts an engine in its own process group, so that stopping it
// reaches the workers it forks (vLLM's engine core, tensor-parallel ranks).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup sends sig to every process in a process group (sig 0: only
// checks that the group has a member).
func killGroup(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }

// killProcess sends sig to one process.
func killProcess(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
