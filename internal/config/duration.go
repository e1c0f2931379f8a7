package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration read from Go duration syntax ("90s", "5m30s",
// "2h") plus a "d" unit for days of 24 hours ("7d", "1d12h").
type Duration time.Duration

// UnmarshalYAML reads a duration with ParseDuration. Load checks every
// duration first (checkTypes), so the error users see names the key and the
// line; this one is the fallback for other decoders.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// durationHint is the advice every duration error ends with.
const durationHint = "use Go syntax such as 90s, 5m30s, 2h or 7d"

// ParseDuration reads Go duration syntax (time.ParseDuration) with one more
// unit, d for days of 24 hours, allowed once, before the other units: "7d",
// "1d12h", "1.5d". Nothing else is accepted: "10 seconds", "5m30" and a bare
// "30" are errors (only "0" needs no unit, as in Go).
func ParseDuration(s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		msg := fmt.Sprintf("%q is not a duration: %s", s, durationHint)
		if _, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
			msg += fmt.Sprintf(" (a number needs a unit, e.g. %ss)", strings.TrimSpace(s))
		}
		return 0, fmt.Errorf("%s", msg)
	}
	rest, neg := s, false
	if r, ok := strings.CutPrefix(rest, "-"); ok {
		rest, neg = r, true
	} else if r, ok := strings.CutPrefix(rest, "+"); ok {
		rest = r
	}
	i := strings.IndexByte(rest, 'd')
	if i < 0 {
		d, err := time.ParseDuration(s)
		if err != nil {
			return bad()
		}
		return d, nil
	}
	days, tail := rest[:i], rest[i+1:]
	if !isDecimal(days) {
		return bad()
	}
	n, err := strconv.ParseFloat(days, 64)
	if err != nil {
		return bad()
	}
	var extra time.Duration
	if tail != "" {
		if tail[0] == '-' || tail[0] == '+' || strings.IndexByte(tail, 'd') >= 0 {
			return bad()
		}
		if extra, err = time.ParseDuration(tail); err != nil {
			return bad()
		}
	}
	total := n*float64(24*time.Hour) + float64(extra)
	if total > math.MaxInt64 {
		return 0, fmt.Errorf("%q is too long a duration (at most about 106751d)", s)
	}
	d := time.Duration(total)
	if neg {
		d = -d
	}
	return d, nil
}

// isDecimal reports whether s is digits with at most one decimal point,
// as Go durations write numbers ("1", "1.5", ".5").
func isDecimal(s string) bool {
	digits, dot := 0, false
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return digits > 0
}
