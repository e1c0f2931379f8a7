//go:build race

package bench

// raceEnabled slows the 500-stream accuracy case down: the race detector
// multiplies the CPU cost of every HTTP exchange several times.
const raceEnabled = true
