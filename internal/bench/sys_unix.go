//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU returns the user plus system CPU time this process has used,
// from getrusage(RUSAGE_SELF).
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// threadSleep blocks the calling OS thread in nanosleep, which wakes
// within tens of microseconds; a Go timer can wake a millisecond late and
// wakes every sleeper due in the same millisecond together. The capacity
// test's upstream uses it so chunk arrivals are spread evenly instead of
// in timer-tick bursts.
func threadSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
