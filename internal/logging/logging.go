// Package logging builds the gateway's structured logger. Log lines are
// buffered and written by a timer an interval after the first line into an
// empty buffer, so the per-request access line never puts a write system
// call on the request path and an idle gateway wakes for nothing; warnings
// and errors are written at once.
package logging

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Logger is a slog.Logger whose output is buffered.
type Logger struct {
	*slog.Logger
	out  *buffer
	once sync.Once
}

// New returns a text (or JSON) logger writing to w through a buffer flushed
// an interval (50 ms when zero) after its first line, and whenever a warning
// or error is logged. Nothing runs while nothing is logged.
func New(w io.Writer, json bool, interval time.Duration) *Logger {
	if interval <= 0 {
		interval = 50 * time.Millisecond
	}
	b := &buffer{w: w, interval: interval}
	b.timer = time.AfterFunc(time.Hour, b.flush)
	b.timer.Stop()
	var h slog.Handler
	if json {
		h = slog.NewJSONHandler(b, nil)
	} else {
		h = slog.NewTextHandler(b, nil)
	}
	return &Logger{Logger: slog.New(flushOnWarn{Handler: h, b: b, json: json, plain: true}), out: b}
}

// Close writes what is buffered and stops the flusher. Later lines are
// written directly.
func (l *Logger) Close() {
	l.once.Do(func() {
		l.out.mu.Lock()
		l.out.direct = true
		l.out.timer.Stop()
		l.out.mu.Unlock()
		l.out.flush()
	})
}

// buffer collects whole log lines; flush writes them in order.
type buffer struct {
	mu      sync.Mutex
	buf     []byte
	spare   []byte
	direct  bool
	w       io.Writer
	writeMu sync.Mutex // keeps flushes in order

	interval time.Duration
	timer    *time.Timer // flushes; armed by the first line into an empty buffer
	armed    bool
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.direct {
		b.mu.Unlock()
		return b.w.Write(p)
	}
	b.buf = append(b.buf, p...)
	full := b.grewLocked()
	b.mu.Unlock()
	if full {
		b.flush()
	}
	return len(p), nil
}

// maxBuffered is what the buffer holds before a line's writer flushes it.
const maxBuffered = 64 << 10

// grewLocked is called by every path that appends to b.buf, with b.mu
// held: it reports whether the buffer is full, for the caller to flush
// at once, and otherwise has the timer flush it an interval from now
// unless it is to already.
func (b *buffer) grewLocked() (full bool) {
	if len(b.buf) >= maxBuffered {
		return true
	}
	if !b.armed {
		b.armed = true
		b.timer.Reset(b.interval)
	}
	return false
}

func (b *buffer) flush() {
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	b.mu.Lock()
	out := b.buf
	b.buf = b.spare[:0]
	b.armed = false
	b.mu.Unlock()
	if len(out) > 0 {
		_, _ = b.w.Write(out)
	}
	b.mu.Lock()
	b.spare = out[:0]
	b.mu.Unlock()
}

// flushOnWarn writes warnings and errors through at once, so a problem is
// in the log before anything that may follow it (a crash).
type flushOnWarn struct {
	slog.Handler
	b *buffer
	// json says the handler is slog's JSON handler (else its text one);
	// plain, that it has no attributes or groups of its own (Line may
	// format for it).
	json, plain bool
}

func (h flushOnWarn) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.b.flush()
	}
	return err
}

func (h flushOnWarn) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushOnWarn{Handler: h.Handler.WithAttrs(attrs), b: h.b, json: h.json}
}

func (h flushOnWarn) WithGroup(name string) slog.Handler {
	return flushOnWarn{Handler: h.Handler.WithGroup(name), b: h.b, json: h.json}
}
