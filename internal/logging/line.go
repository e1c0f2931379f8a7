package logging

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// Line writes one log line of plain attributes (strings, ints, bools,
// floats) formatted here rather than by slog's handler: the same bytes
// slog's text or JSON handler would write, for a fifth of the CPU. The
// gateway's access line, one per request, goes this way. It falls back to
// the logger's handler for a logger made with With or WithGroup, one not
// made by New, and a value the fast path does not format exactly as slog
// would (a string with spaces, quotes or non-ASCII bytes, an unusual
// float, another kind of value).
func Line(l *slog.Logger, level slog.Level, msg string, attrs []slog.Attr) {
	ctx := context.Background()
	h, ok := l.Handler().(flushOnWarn)
	if !ok || !h.plain {
		if l.Enabled(ctx, level) {
			rec := slog.NewRecord(time.Now(), level, msg, 0)
			rec.AddAttrs(attrs...)
			_ = l.Handler().Handle(ctx, rec)
		}
		return
	}
	if !h.Enabled(ctx, level) {
		return
	}
	t := time.Now()
	b := h.b
	b.mu.Lock()
	if !b.direct {
		n := len(b.buf)
		var done bool
		b.buf, done = appendLine(b.buf, h.json, t, level, msg, attrs)
		if done {
			full := b.grewLocked()
			b.mu.Unlock()
			if full || level >= slog.LevelWarn {
				b.flush()
			}
			return
		}
		b.buf = b.buf[:n]
	}
	b.mu.Unlock()
	rec := slog.NewRecord(t, level, msg, 0)
	rec.AddAttrs(attrs...)
	_ = h.Handle(ctx, rec)
}

// appendLine appends the line slog's text (or JSON) handler would write
// for these values, or reports false when one of them is not one it
// formats the same way.
func appendLine(b []byte, json bool, t time.Time, level slog.Level, msg string, attrs []slog.Attr) ([]byte, bool) {
	if json {
		b = append(b, `{"time":"`...)
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","level":"`...)
		b = append(b, level.String()...)
		b = append(b, `","msg":`...)
	} else {
		b = append(b, "time="...)
		b = appendTextTime(b, t)
		b = append(b, " level="...)
		b = append(b, level.String()...)
		b = append(b, " msg="...)
	}
	var ok bool
	if b, ok = appendString(b, json, msg); !ok {
		return b, false
	}
	for _, a := range attrs {
		if json {
			b = append(b, ',')
		} else {
			b = append(b, ' ')
		}
		if b, ok = appendString(b, json, a.Key); !ok {
			return b, false
		}
		if json {
			b = append(b, ':')
		} else {
			b = append(b, '=')
		}
		v := a.Value
		switch v.Kind() {
		case slog.KindString:
			b, ok = appendString(b, json, v.String())
		case slog.KindInt64:
			b = strconv.AppendInt(b, v.Int64(), 10)
		case slog.KindBool:
			b = strconv.AppendBool(b, v.Bool())
		case slog.KindFloat64:
			b, ok = appendFloat(b, json, v.Float64())
		default:
			ok = false
		}
		if !ok {
			return b, false
		}
	}
	if json {
		b = append(b, '}')
	}
	return append(b, '\n'), true
}

// appendString writes s as slog would when it is printable ASCII that
// needs no escaping (JSON) or quoting (text: also no space, '=' or '\'),
// and reports false otherwise. Text quotes an empty string.
func appendString(b []byte, json bool, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || (!json && (c == ' ' || c == '=')) {
			return b, false
		}
	}
	if json {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"'), true
	}
	if s == "" {
		return append(b, `""`...), true
	}
	return append(b, s...), true
}

// appendFloat writes f as slog would: strconv's shortest 'g' form in text,
// encoding/json's in JSON (the shortest 'f' form for the magnitudes a
// latency has; others fall back).
func appendFloat(b []byte, json bool, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	if !json {
		return strconv.AppendFloat(b, f, 'g', -1, 64), true
	}
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return b, false
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64), true
}

// textTimeLayout is slog's text handler's time: milliseconds and the zone.
const textTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// secondText is the text of one second of one location: what comes before
// the milliseconds and what comes after them.
type secondText struct {
	sec          int64
	loc          *time.Location
	before, zone string
}

var lastSecond atomic.Pointer[secondText]

// appendTextTime appends t.Truncate(time.Millisecond).AppendFormat(b,
// textTimeLayout), formatting the date, the clock and the zone once per
// second: a line per request would otherwise parse the layout each time.
func appendTextTime(b []byte, t time.Time) []byte {
	sec, loc := t.Unix(), t.Location()
	st := lastSecond.Load()
	if st == nil || st.sec != sec || st.loc != loc {
		whole := t.Truncate(time.Second)
		full := whole.AppendFormat(nil, textTimeLayout) // "...:05.000Z07:00"
		i := len(whole.AppendFormat(nil, "2006-01-02T15:04:05."))
		if len(full) < i+3 {
			return t.Truncate(time.Millisecond).AppendFormat(b, textTimeLayout)
		}
		st = &secondText{sec: sec, loc: loc, before: string(full[:i]), zone: string(full[i+3:])}
		lastSecond.Store(st)
	}
	ms := t.Nanosecond() / int(time.Millisecond)
	b = append(b, st.before...)
	b = append(b, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	return append(b, st.zone...)
}
