package logging

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// appendLine writes exactly the bytes slog's own handler writes, or says
// it cannot: checked value by value against slog's text and JSON handlers.
func TestAppendLine_SameBytesAsSlog(t *testing.T) {
	at := []time.Time{
		time.Date(2026, 12, 2, 4, 20, 3, 123456789, time.UTC),
		time.Date(2026, 12, 2, 4, 20, 3, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 7000000, time.FixedZone("x", 5*3600+1800)),
	}
	strs := []string{"req_01J", "", "qwen3-30b-a3b", "a b", "k=v", `say "hi"`, `back\slash`, "tab\there", "naïve", "\u2028", "<html>&", "x\x7f"}
	floats := []float64{0, 1.25, 0.001, 1234567, 1e21, 1e-7, 3.6e6, math.Copysign(0, -1), math.NaN(), math.Inf(1), 123.456789}
	var cases [][]slog.Attr
	for _, s := range strs {
		cases = append(cases, []slog.Attr{slog.String("request_id", s), slog.Int("status", 200)})
		cases = append(cases, []slog.Attr{slog.String(s, "v")})
	}
	for _, f := range floats {
		cases = append(cases, []slog.Attr{slog.Float64("latency_ms", f), slog.Bool("stream", true), slog.Int("n", -3)})
	}
	cases = append(cases, []slog.Attr{slog.Duration("d", time.Second)}, nil)
	for _, json := range []bool{false, true} {
		for _, tm := range at {
			for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
				for _, msg := range []string{"request", "a message"} {
					for _, attrs := range cases {
						var want bytes.Buffer
						var h slog.Handler = slog.NewTextHandler(&want, nil)
						if json {
							h = slog.NewJSONHandler(&want, nil)
						}
						rec := slog.NewRecord(tm, level, msg, 0)
						rec.AddAttrs(attrs...)
						if err := h.Handle(context.Background(), rec); err != nil {
							t.Fatal(err)
						}
						got, ok := appendLine(nil, json, tm, level, msg, attrs)
						if ok && string(got) != want.String() {
							t.Errorf("json=%v %v:\n got %q\nwant %q", json, attrs, got, want.String())
						}
						if !ok && msg == "request" && len(attrs) > 0 && attrs[0].Key == "request_id" && attrs[0].Value.String() == "req_01J" {
							t.Errorf("a plain line fell back: %v", attrs)
						}
					}
				}
			}
		}
	}
}

// The ordinary access line takes the fast path (no fallback), and Line
// through a logger made by New writes what slog would.
func TestLine_WritesTheLoggersFormat(t *testing.T) {
	for _, json := range []bool{false, true} {
		var out syncBuf
		l := New(&out, json, time.Hour)
		attrs := []slog.Attr{slog.String("request_id", "req_1"), slog.String("model", "m"), slog.Int("status", 200), slog.Bool("stream", false), slog.Float64("latency_ms", 1.25)}
		Line(l.Logger, slog.LevelInfo, "request", attrs)
		Line(l.Logger, slog.LevelWarn, "request", []slog.Attr{slog.String("error", "upstream_error"), slog.String("model", "has space")})
		Line(l.Logger, slog.LevelDebug, "hidden", nil)
		// A logger with attributes of its own keeps them (the slow path).
		Line(l.With("component", "x"), slog.LevelInfo, "request", attrs[:1])
		l.Close()
		got := out.String()
		lines := strings.Split(strings.TrimSpace(got), "\n")
		if len(lines) != 3 {
			t.Fatalf("json=%v: %d lines: %q", json, len(lines), got)
		}
		want := []string{"msg=request request_id=req_1 model=m status=200 stream=false latency_ms=1.25", `error=upstream_error model="has space"`, "component=x request_id=req_1"}
		if json {
			want = []string{`"msg":"request","request_id":"req_1","model":"m","status":200,"stream":false,"latency_ms":1.25}`, `"error":"upstream_error","model":"has space"`, `"component":"x","request_id":"req_1"`}
		}
		for i, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("json=%v line %d = %q, want it to hold %q", json, i, lines[i], w)
			}
		}
	}
}

func BenchmarkLine_AccessLine(b *testing.B) {
	var out syncBuf
	l := New(&out, false, 10*time.Millisecond)
	defer l.Close()
	attrs := []slog.Attr{slog.String("request_id", "req_01JABCDEF"), slog.String("record_id", "req_01JABCDEF"), slog.String("key_id", "master"),
		slog.String("endpoint", "chat"), slog.String("model", "qwen"), slog.String("backend", "up"), slog.Int("status", 200), slog.Bool("stream", false),
		slog.Int("prompt_tokens", 11), slog.Int("completion_tokens", 9), slog.Float64("ttft_ms", 0), slog.Float64("latency_ms", 1.234)}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Line(l.Logger, slog.LevelInfo, "request", attrs)
	}
}

// TestAppendTextTime holds the once-a-second time text to the layout's own
// output: times in several zones, in and across seconds, around a
// daylight-saving change and far from now.
func TestAppendTextTime(t *testing.T) {
	locs := []*time.Location{time.UTC, time.Local, time.FixedZone("IST", 5*3600+1800), time.FixedZone("W", -7*3600)}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		locs = append(locs, ny)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var times []time.Time
	dst := time.Date(2026, 3, 8, 6, 59, 59, 0, time.UTC) // 01:59:59 EST, one second before the change
	for i := range 3000 {
		times = append(times, dst.Add(time.Duration(i)*time.Millisecond*7/3))
	}
	for range 3000 {
		times = append(times, time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)))
	}
	times = append(times, time.Date(1, 1, 1, 0, 0, 0, 999_999_999, time.UTC), time.Date(12345, 6, 7, 8, 9, 10, 11_000_000, time.UTC))
	for _, loc := range locs {
		for _, tm := range times {
			tm = tm.In(loc)
			want := tm.Truncate(time.Millisecond).AppendFormat(nil, textTimeLayout)
			if got := appendTextTime(nil, tm); string(got) != string(want) {
				t.Fatalf("%v in %v: %q, want %q", tm, loc, got, want)
			}
		}
	}
}

func BenchmarkAppendTextTime(b *testing.B) {
	buf := make([]byte, 0, 64)
	now := time.Now()
	for i := range b.N {
		buf = appendTextTime(buf[:0], now.Add(time.Duration(i)*time.Microsecond))
	}
}
