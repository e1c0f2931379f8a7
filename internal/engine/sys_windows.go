package engine

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// Windows has neither process groups that signals reach nor a stop signal
// a console program honours, so an engine's stop is a kill of its process
// tree (taskkill /T /F); stop_signal and stop_grace have no effect.

// procAttr gives an engine its own console process group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// killGroup kills the process tree rooted at pgid, the engine's own pid
// (sig 0: only checks that the process is still there).
func killGroup(pgid int, sig syscall.Signal) error {
	if sig == 0 {
		p, err := os.FindProcess(pgid) // opens the process: fails once it is gone
		if err != nil {
			return err
		}
		return p.Release()
	}
	return exec.Command("taskkill", "/T", "/F", "/PID", strconv.Itoa(pgid)).Run()
}

// killProcess kills one process.
func killProcess(pid int, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if sig == 0 {
		return p.Release()
	}
	return p.Kill()
}
