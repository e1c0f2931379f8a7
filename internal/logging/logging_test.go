package logging

import (
	"bytes"
	"fmt"
	"llmgate/internal/testenv"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestLogger_InfoIsBufferedWarnIsWrittenAtOnce(t *testing.T) {
	var out syncBuf
	l := New(&out, false, time.Hour) // no periodic flush during the test
	l.Info("request", "n", 1)
	if out.String() != "" {
		t.Fatalf("info line written synchronously: %q", out.String())
	}
	l.Warn("backend down")
	got := out.String()
	if !strings.Contains(got, "msg=request") || !strings.Contains(got, `msg="backend down"`) ||
		strings.Index(got, "msg=request") > strings.Index(got, "backend down") {
		t.Fatalf("warn must flush earlier lines in order: %q", got)
	}
}

func TestLogger_CloseWritesEverythingAndLaterLinesGoDirect(t *testing.T) {
	var out syncBuf
	l := New(&out, true, time.Hour)
	for i := 0; i < 100; i++ {
		l.Info("request", "i", i)
	}
	l.Close()
	if n := strings.Count(out.String(), `"msg":"request"`); n != 100 {
		t.Fatalf("after Close %d of 100 lines written", n)
	}
	l.Info("after close")
	if !strings.Contains(out.String(), "after close") {
		t.Fatal("a line after Close was not written")
	}
}

func TestLogger_PeriodicFlush(t *testing.T) {
	var out syncBuf
	l := New(&out, false, 5*time.Millisecond)
	defer l.Close()
	l.Info("tick")
	testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(out.String(), "tick") }, "the buffered line flushed")
}

func TestLogger_AnIdleLoggerRunsNothingAndALoneLineIsStillWritten(t *testing.T) {
	before := runtime.NumGoroutine()
	var out syncBuf
	l := New(&out, false, 5*time.Millisecond)
	defer l.Close()
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after New, %d before: an idle logger must not run a flusher", n, before)
	}
	for round := range 4 { // each line after a flush arms the timer again
		line := fmt.Sprintf("lone-line-%d", round) // no spaces: Line formats it itself
		if round%2 == 0 {
			l.Info(line)
		} else {
			// The access log's path, formatted straight into the buffer.
			Line(l.Logger, slog.LevelInfo, line, []slog.Attr{slog.Int("status", 200)})
		}
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(out.String(), line) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: a line with nothing after it was never flushed", round)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func BenchmarkLogger_AccessLine(b *testing.B) {
	var out syncBuf
	l := New(&out, false, 10*time.Millisecond)
	defer l.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.Info("request", "request_id", "req_1", "model", "qwen", "status", 200, "latency_ms", 1.25)
	}
}
