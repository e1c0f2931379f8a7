package bench

import (
	"syscall"
	"time"
)

// threadSleep blocks the calling OS thread in nanosleep, which wakes
// within tens of microseconds; a Go timer can wake a millisecond late and
// wakes every sleeper due in the same millisecond together. The capacity
// test's upstream uses it so chunk arrivals are spread evenly instead of
// in timer-tick bursts.
func threadSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
