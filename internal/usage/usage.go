// Package usage is the usage ledger: every request the gateway serves becomes
// one Record, written in batches off the request path.
package usage

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Record is one request in the ledger.
type Record struct {
	ID               string // unique per request; makes retried writes idempotent
	Time             time.Time
	KeyID            string
	Model            string // public model name
	Backend          string
	UpstreamModel    string
	Endpoint         string // chat, completions, embeddings, messages, responses
	Status           int
	ErrorType        string
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
	TTFT             time.Duration // time to first byte (non-stream) or first token event (stream)
	Latency          time.Duration
	Estimated        bool // token counts estimated locally
	Stream           bool
	CostUSD          float64
}

// Writer persists batches of records. Implementations must make a batch
// atomic and must ignore records whose ID is already stored.
type Writer interface {
	InsertUsage(ctx context.Context, recs []Record) error
}

// Ledger batches records and writes them asynchronously.
type Ledger struct {
	w        Writer
	ch       chan Record
	done     chan struct{}
	log      *slog.Logger
	maxBatch int
	interval time.Duration

	closeOnce sync.Once
	mu        sync.Mutex
	closed    bool
}

// Options tunes a Ledger. Zero values take defaults.
type Options struct {
	Queue    int           // records buffered before Add blocks (default 65536)
	MaxBatch int           // records per write (default 1000)
	Interval time.Duration // flush at least this often (default 200ms)
}

// NewLedger starts a ledger writing to w.
func NewLedger(w Writer, opt Options, log *slog.Logger) *Ledger {
	if opt.Queue <= 0 {
		opt.Queue = 65536
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 1000
	}
	if opt.Interval <= 0 {
		opt.Interval = 200 * time.Millisecond
	}
	if log == nil {
		log = slog.Default()
	}
	l := &Ledger{w: w, ch: make(chan Record, opt.Queue), done: make(chan struct{}), log: log,
		maxBatch: opt.MaxBatch, interval: opt.Interval}
	go l.run()
	return l
}

// ErrClosed is returned by Add after Close.
var ErrClosed = errors.New("ledger closed")

// Add queues a record. It blocks when the queue is full rather than drop a
// record: back-pressure on requests is better than lost accounting.
func (l *Ledger) Add(r Record) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.log.Error("usage record after ledger close", "id", r.ID, "model", r.Model)
		return ErrClosed
	}
	// Holding mu while sending would block Close; a read lock pattern is not
	// needed because sends are fast unless the queue is full.
	l.mu.Unlock()
	defer func() {
		// Close may have closed the channel between the check and the send.
		if recover() != nil {
			l.log.Error("usage record lost at shutdown", "id", r.ID)
		}
	}()
	l.ch <- r
	return nil
}

// Depth returns the number of queued records.
func (l *Ledger) Depth() int { return len(l.ch) }

// Close stops accepting records and writes everything queued. It waits
// until the queue is written or ctx ends.
func (l *Ledger) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.ch)
	})
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Ledger) run() {
	defer close(l.done)
	batch := make([]Record, 0, l.maxBatch)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		l.write(batch)
		batch = batch[:0]
	}
	for {
		select {
		case r, ok := <-l.ch:
			if !ok {
				flush()
				return
			}
			batch = append(batch, r)
			if len(batch) >= l.maxBatch {
				flush()
			}
		case <-t.C:
			flush()
		}
	}
}

// write stores a batch, retrying with backoff while the store fails, so a
// brief outage loses nothing. Writes are idempotent by record ID.
func (l *Ledger) write(batch []Record) {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := l.w.InsertUsage(ctx, batch)
		cancel()
		if err == nil {
			return
		}
		l.log.Warn("usage write failed; retrying", "records", len(batch), "attempt", attempt, "err", err)
		time.Sleep(backoff)
		backoff = min(backoff*2, 5*time.Second)
	}
}
