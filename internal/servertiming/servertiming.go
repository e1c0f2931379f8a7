// Package servertiming writes and reads the Server-Timing response header
// (W3C Server Timing: "name;dur=MS;desc=…", metrics separated by commas):
// the relay says in it how a request's time divided, and bench and doctor
// read what an llmgate gateway said.
package servertiming

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header is the header's name.
const Header = "Server-Timing"

// Append appends the metric name with duration d (in milliseconds, to the
// microsecond) to b, after a separator when b holds metrics already.
func Append(b []byte, name string, d time.Duration) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = append(append(b, name...), ";dur="...)
	return strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', -1, 64)
}

// Get returns the duration of the metric name in h's Server-Timing
// header lines (names compared without case, parameters in any order, a
// quoted value accepted); false when no such metric has a duration that
// is a figure (NaN, negative or above 10^9 ms is not).
func Get(h http.Header, name string) (time.Duration, bool) {
	for _, v := range h.Values(Header) {
		for _, m := range strings.Split(v, ",") {
			params := strings.Split(m, ";")
			if !strings.EqualFold(strings.TrimSpace(params[0]), name) {
				continue
			}
			for _, p := range params[1:] {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "dur") {
					continue
				}
				ms, err := strconv.ParseFloat(strings.Trim(strings.TrimSpace(val), `"`), 64)
				if err != nil || !(ms >= 0 && ms <= 1e9) {
					return 0, false
				}
				return time.Duration(math.Round(ms * float64(time.Millisecond))), true
			}
		}
	}
	return 0, false
}
