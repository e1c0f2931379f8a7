//go:build race

package gateway

// raceEnabled: the race detector multiplies memory several times over, so
// memory figures are not measured under it.
const raceEnabled = true
