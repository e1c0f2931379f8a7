package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// StaleAfter is how many scrape intervals a reading stays usable: after
// that (the engine stopped answering /metrics, or answers without the
// queue metrics) routing falls back to the requests this gateway has in
// flight there.
const StaleAfter = 3

// Snapshot is the last reading of one engine's load.
type Snapshot struct {
	Load
	// At is when the reading was taken; zero before the first one.
	At time.Time
	// InFlight is what the scraper's inflight function said at that
	// moment: requests sent after it are not in the engine's figures yet.
	InFlight int64
	// Fresh: the reading is recent enough to route on.
	Fresh bool
	// Err is the last scrape's failure ("" when it succeeded).
	Err string
}

// Scraper reads one engine's /metrics every interval in its own
// goroutine, never on a request's path, and keeps the last reading.
type Scraper struct {
	get      func(ctx context.Context) ([]byte, error)
	inflight func() int64
	interval time.Duration
	now      func() time.Time

	onScrape atomic.Pointer[func()]

	mu   sync.Mutex
	last Snapshot
	stop context.CancelFunc
	done chan struct{}
}

// NewScraper returns a scraper calling get for the metrics text. inflight
// (may be nil) reports the gateway's requests in flight to the engine;
// now is the clock (nil: time.Now).
func NewScraper(get func(ctx context.Context) ([]byte, error), inflight func() int64, interval time.Duration, now func() time.Time) *Scraper {
	if now == nil {
		now = time.Now
	}
	if interval <= 0 {
		interval = time.Second
	}
	if inflight == nil {
		inflight = func() int64 { return 0 }
	}
	return &Scraper{get: get, inflight: inflight, interval: interval, now: now}
}

// OnScrape has f called after each reading is taken (the fair queues
// waiting on the engine's own queue look again).
func (s *Scraper) OnScrape(f func()) { s.onScrape.Store(&f) }

// Interval is the time between two scrapes.
func (s *Scraper) Interval() time.Duration { return s.interval }

// Start scrapes at once and then every interval until Stop.
func (s *Scraper) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	if s.stop != nil {
		s.mu.Unlock()
		cancel()
		return
	}
	s.stop, s.done = cancel, make(chan struct{})
	done := s.done
	s.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			s.ScrapeOnce(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the scraping goroutine and waits for it.
func (s *Scraper) Stop() {
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// ScrapeOnce reads the metrics once, bounded by the interval.
func (s *Scraper) ScrapeOnce(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, s.interval)
	defer cancel()
	inflight := s.inflight()
	body, err := s.get(sctx)
	if err != nil && ctx.Err() != nil {
		return // stopped, not a failure of the engine
	}
	if s.record(body, err, inflight) {
		if f := s.onScrape.Load(); f != nil {
			(*f)()
		}
	}
}

// record keeps a scrape's reading (or its failure) and reports whether it
// was a reading.
func (s *Scraper) record(body []byte, err error, inflight int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.last.Err = err.Error()
		return false
	}
	l, ok := ParseLoad(body)
	if !ok {
		s.last.Err = "the /metrics answer has no queue metrics (vLLM, SGLang with --enable-metrics, llama.cpp with --metrics)"
		return false
	}
	s.last = Snapshot{Load: l, At: s.now(), InFlight: inflight}
	return true
}

// Snapshot returns the last reading, Fresh when it is at most StaleAfter
// intervals old.
func (s *Scraper) Snapshot() Snapshot {
	s.mu.Lock()
	sn := s.last
	s.mu.Unlock()
	sn.Fresh = !sn.At.IsZero() && s.now().Sub(sn.At) <= StaleAfter*s.interval
	return sn
}
