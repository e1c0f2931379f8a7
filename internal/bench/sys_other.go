//go:build !unix

package bench

import "time"

// processCPU is unavailable on this platform; reports leave CPU blank.
func processCPU() (time.Duration, bool) { return 0, false }
