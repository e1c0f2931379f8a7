package bench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// progress prints a live line per cell: requests done, errors and the
// running request rate. On a terminal the line is redrawn every second;
// otherwise (CI logs) one line is printed every ten seconds.
type progress struct {
	w      io.Writer
	label  string
	total  int
	ok     atomic.Int64
	failed atomic.Int64
	mu     sync.Mutex
	start  time.Time
	stop   chan struct{}
	done_  chan struct{}
	tty    bool
}

func startProgress(w io.Writer, label string, total int) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, label: label, total: total, start: time.Now(), stop: make(chan struct{}), done_: make(chan struct{})}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	fmt.Fprintf(w, "%s: started\n", label)
	go p.loop()
	return p
}

func (p *progress) done(r *Result) {
	if p == nil {
		return
	}
	if r.OK() {
		p.ok.Add(1)
	} else {
		p.failed.Add(1)
	}
}

func (p *progress) line() string {
	ok, failed := p.ok.Load(), p.failed.Load()
	p.mu.Lock()
	el := time.Since(p.start).Seconds()
	p.mu.Unlock()
	rate := 0.0
	if el > 0 {
		rate = float64(ok) / el
	}
	tot := "?"
	if p.total > 0 {
		tot = fmt.Sprint(p.total)
	}
	return fmt.Sprintf("%s: %d/%s done, %d failed, %.1f req/s, %.0fs", p.label, ok+failed, tot, failed, rate, el)
}

func (p *progress) loop() {
	defer close(p.done_)
	period := 10 * time.Second
	if p.tty {
		period = time.Second
	}
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tk.C:
			if p.tty {
				fmt.Fprintf(p.w, "\r\033[K%s", p.line())
			} else {
				fmt.Fprintln(p.w, p.line())
			}
		}
	}
}

// begin restarts the clock when measurement starts, after the warm-up, so
// the live request rate is not diluted by it.
func (p *progress) begin() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.start = time.Now()
	p.mu.Unlock()
}

// finish stops the ticker and prints the cell's final line.
func (p *progress) finish(summary string) {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done_
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%s  %s\n", p.line(), summary)
}
