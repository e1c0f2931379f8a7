//go:build !unix

package bench

import "time"

// processCPU is unavailable on this platform; reports leave CPU blank.
func processCPU() (time.Duration, bool) { return 0, false }

// threadSleep falls back to the runtime's timer.
func threadSleep(d time.Duration) { time.Sleep(d) }
