//go:build !linux

package bench

import "time"

// threadSleep falls back to the runtime's timer (the syscall package has
// nanosleep only on Linux).
func threadSleep(d time.Duration) { time.Sleep(d) }
