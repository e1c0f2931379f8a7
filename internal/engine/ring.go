package engine

import (
	"bufio"
	"io"
	"strings"
	"sync"
	"time"
)

// maxLineBytes cuts very long log lines (progress bars without newlines)
// so one line cannot take the whole buffer.
const maxLineBytes = 4 << 10

// Line is one line of an engine's output.
type Line struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Text string    `json:"text"`
}

// ring keeps the last lines an engine wrote to stdout and stderr.
type ring struct {
	mu    sync.Mutex
	lines []Line
	next  int // index of the oldest line once full
	seq   uint64
}

func newRing(n int) *ring {
	if n <= 0 {
		n = 1000
	}
	return &ring{lines: make([]Line, 0, n)}
}

func (r *ring) add(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	l := Line{Seq: r.seq, Time: time.Now(), Text: text}
	if len(r.lines) < cap(r.lines) {
		r.lines = append(r.lines, l)
		return
	}
	r.lines[r.next] = l
	r.next = (r.next + 1) % len(r.lines)
}

// tail returns up to n of the newest lines with a sequence number above
// after, oldest first.
func (r *ring) tail(n int, after uint64) []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := make([]Line, 0, len(r.lines))
	all = append(all, r.lines[r.next:]...)
	all = append(all, r.lines[:r.next]...)
	i := len(all)
	for i > 0 && all[i-1].Seq > after && (n <= 0 || len(all)-i < n) {
		i--
	}
	return all[i:]
}

// pump copies an engine's output into the ring line by line until EOF.
// Carriage returns (progress bars) end a line too, so weight-loading
// progress shows up while it happens.
func (r *ring) pump(rd io.Reader, prefix string) {
	br := bufio.NewReaderSize(rd, 64<<10)
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			r.add(prefix + cur.String())
			cur.Reset()
		}
	}
	for {
		b, err := br.ReadByte()
		if err != nil {
			flush()
			return
		}
		switch b {
		case '\n', '\r':
			flush()
		default:
			if cur.Len() < maxLineBytes {
				cur.WriteByte(b)
			}
		}
	}
}

// tailText formats the last n lines for an error message.
func (r *ring) tailText(n int) string {
	lines := r.tail(n, 0)
	if len(lines) == 0 {
		return "(the engine wrote no output)"
	}
	parts := make([]string, len(lines))
	for i, l := range lines {
		t := l.Text
		if len(t) > 300 {
			t = t[:300] + "…"
		}
		parts[i] = t
	}
	return strings.Join(parts, " | ")
}
