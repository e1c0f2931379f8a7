// Package ledger makes usage records durable: every request the gateway
// serves becomes one usage.Record, appended to an on-disk journal (the spool)
// before Add returns and written to the database in batches off the request
// path.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"llmgate/internal/usage"
)

// HealthChecker is implemented by writers that can tell whether their
// database is still there (a SQLite file not deleted or replaced, a
// PostgreSQL server that answers). The ledger asks every
// Options.HealthInterval.
type HealthChecker interface {
	CheckHealth(ctx context.Context) error
}

// Ledger makes records durable and writes them to the database in batches.
//
// With a spool, Add appends the record to the spool's journal file (one
// write(2) shared by every Add waiting at that moment: group commit) and
// returns once the bytes are in the file, so a record whose Add returned
// survives a kill of the process; the writer then stores the queue in
// batches and deletes the journal segment it came from. Without a spool,
// Add only queues the record in memory.
//
// Add wakes nobody when the journal is idle: the Add that finds no write
// in progress writes itself, and the writer looks at the queue every
// Interval, or at once when a full batch is waiting. A channel send per
// record would wake another thread for every request, on the CPU the
// requests need.
type Ledger struct {
	w        usage.Writer
	log      *slog.Logger
	queueMax int
	maxBatch int
	interval time.Duration
	pause    time.Duration

	mu       sync.Mutex
	queue    []usage.Record // records not yet taken by the writer
	notFull  *sync.Cond     // signalled when the writer takes records
	waiting  int            // Adds waiting on a full queue
	noWaiter *sync.Cond     // signalled when the last waiting Add is done
	closed   bool

	// For Flush, guarded by mu: added counts the records queued so far
	// and handled those the writer finished with (stored, or left to the
	// spool), in queue order; unstored is handled as of the last round the
	// database refused. rounds is closed and replaced when handled grows.
	added, handled, unstored uint64
	rounds                   chan struct{}

	// The journal (nil without a spool), guarded by mu.
	spool    *Spool
	group    *jgroup         // lines appended since the last journal write began, for seg
	sealed   []*jgroup       // groups of earlier segments not yet being written
	writing  bool            // a journal write is in progress or handed over
	lastOut  *jgroup         // the last group of the write in progress
	seg      uint64          // the segment new groups go to
	failed   map[uint64]bool // segments some of whose groups failed to write
	spareBuf []byte

	kick      chan struct{}
	first     chan struct{} // a record entered an empty queue: the writer's next round is due in interval
	roundsRun atomic.Int64  // the writer's rounds, for tests
	stop      chan struct{}
	done      chan struct{}
	spooling  atomic.Bool // the database refused the last batch; batches go to the drainer

	closeOnce  sync.Once
	closeDrain sync.Once
	spoolAfter int
	stopDrain  chan struct{}
	drainKick  chan struct{}
	drainDone  chan struct{}

	health     health
	stopHealth chan struct{}
	healthDone chan struct{}
}

// jgroup is the lines of the Adds that share one journal write.
type jgroup struct {
	seg  uint64
	buf  []byte
	lead chan struct{} // closed when the group's first Add is to write it
	done chan struct{} // closed when the write ended (err set before)
	err  error
}

// Options tunes a Ledger. Zero values take defaults.
type Options struct {
	Queue    int           // records buffered before Add blocks (default 65536)
	MaxBatch int           // records per write (default 1024)
	Interval time.Duration // flush at least this often (default 200ms)
	// Pause is the rest a store takes after every PaceRows rows of a
	// batch while the ledger keeps up (at most PaceBacklog records waiting),
	// so that an embedded database's work does not take a CPU away from
	// requests for a millisecond at a time (default 300µs; negative: never).
	Pause time.Duration
	// Spool, when set, is the journal every record is appended to before
	// Add returns, and where records wait while the database refuses them.
	// The ledger closes it on Close.
	Spool *Spool
	// SpoolAfter is the number of failed attempts at a batch before the
	// ledger leaves it to the spool's drainer (default 3).
	SpoolAfter int
	// SpoolSync makes every journal append fsync before Add returns, so
	// records survive a power loss or kernel crash, not only a kill of the
	// process. It costs a disk flush per group of Adds.
	SpoolSync bool
	// HealthInterval is how often the database's health is checked when
	// the writer is a HealthChecker (default 1s).
	HealthInterval time.Duration
	// AlarmEvery is how often the error line repeats in the log while the
	// ledger is unhealthy (default 30s).
	AlarmEvery time.Duration
}

// ErrClosed is returned by Add after Close.
var ErrClosed = errors.New("ledger closed")

// ErrNotDurable is returned (wrapped) by Add when the record could not be
// appended to the spool. The record is still queued for the database, but
// a kill of the process before it is stored would lose it.
var ErrNotDurable = errors.New("usage record not written to the spool")

// NewLedger starts a ledger writing to w. Records a spool holds from an
// earlier run are written first (for up to 10 seconds; the rest follow in
// the background), so summaries read after NewLedger count them.
func NewLedger(w usage.Writer, opt Options, log *slog.Logger) *Ledger {
	if opt.Queue <= 0 {
		opt.Queue = 65536
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 1024
	}
	if opt.Interval <= 0 {
		opt.Interval = 200 * time.Millisecond
	}
	if log == nil {
		log = slog.Default()
	}
	if opt.SpoolAfter <= 0 {
		opt.SpoolAfter = 3
	}
	if opt.Pause == 0 {
		opt.Pause = 300 * time.Microsecond
	}
	if opt.HealthInterval <= 0 {
		opt.HealthInterval = time.Second
	}
	if opt.AlarmEvery <= 0 {
		opt.AlarmEvery = 30 * time.Second
	}
	l := &Ledger{w: w, queueMax: opt.Queue, kick: make(chan struct{}, 1), first: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), log: log,
		maxBatch: opt.MaxBatch, interval: opt.Interval, spool: opt.Spool, spoolAfter: opt.SpoolAfter, pause: opt.Pause}
	l.notFull = sync.NewCond(&l.mu)
	l.noWaiter = sync.NewCond(&l.mu)
	l.rounds = make(chan struct{})
	l.failed = map[uint64]bool{}
	l.health.init(log, opt.AlarmEvery, l.spool)
	if l.spool != nil {
		l.spool.syncOn = opt.SpoolSync
		l.seg = l.spool.newSegment()
		l.replay()
		l.stopDrain, l.drainDone, l.drainKick = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
		go func() {
			defer close(l.drainDone)
			l.drainLoop()
		}()
	}
	go l.run()
	l.stopHealth, l.healthDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.healthDone)
		l.healthLoop(opt.HealthInterval)
	}()
	return l
}

// replay writes what an earlier run left in the spool before serving.
func (l *Ledger) replay() {
	if !l.spool.Pending() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := l.spool.Drain(ctx, l.w, l.maxBatch)
	l.health.wrote(err)
	if err != nil {
		l.log.Warn("usage records from an earlier run are still in the spool; writing them in the background",
			"dir", l.spool.Dir(), "written", n, "err", err)
		return
	}
	l.log.Info("usage records from an earlier run written from the spool", "dir", l.spool.Dir(), "records", n)
}

// Add records r. With a spool it returns once r is appended to the journal
// file (and fsynced with SpoolSync); an error wrapping ErrNotDurable says
// the append failed, though r is still queued for the database. Add blocks
// when the queue is full rather than drop a record: back-pressure on
// requests is better than lost accounting. A record whose Add was waiting
// when Close began is still written; only an Add that starts after Close
// gets ErrClosed. A record without an ID gets one from NewID.
func (l *Ledger) Add(r usage.Record) error {
	if r.ID == "" {
		r.ID = usage.NewID()
	}
	var line *[]byte
	if l.spool != nil {
		line = linePool.Get().(*[]byte)
		*line = appendRecord((*line)[:0], &r)
		defer linePool.Put(line)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.log.Error("usage record after ledger close", "id", r.ID, "model", r.Model)
		return ErrClosed
	}
	if len(l.queue) >= l.queueMax {
		l.waiting++
		for len(l.queue) >= l.queueMax && !l.closed {
			l.notFull.Wait()
		}
		// Past a full queue on close: Close waits for this append before
		// the writer's last round, so the record is not lost.
		l.waiting--
		if l.waiting == 0 {
			l.noWaiter.Broadcast()
		}
	}
	l.queue = append(l.queue, r)
	l.added++
	first := len(l.queue) == 1
	full := len(l.queue) >= l.maxBatch
	var g *jgroup
	lead := false
	if l.spool != nil {
		if g = l.group; g == nil {
			g, lead = &jgroup{seg: l.seg, buf: l.spareBuf[:0], lead: make(chan struct{}), done: make(chan struct{})}, true
			l.spareBuf, l.group = nil, g
		}
		g.buf = append(g.buf, *line...)
		if lead && !l.writing {
			l.writeGroups()
			lead = false
		}
	}
	l.mu.Unlock()
	switch {
	case full:
		select {
		case l.kick <- struct{}{}:
		default:
		}
	case first:
		select {
		case l.first <- struct{}{}:
		default:
		}
	}
	if g == nil {
		return nil
	}
	// The first Add of a group writes it when the write in progress hands
	// over (unless the writer of an earlier group takes it along); the
	// others wait for it. One wake-up per Add, no herd on a shared lock.
	if lead {
		select {
		case <-g.lead:
			l.mu.Lock()
			l.writeGroups()
			l.mu.Unlock()
		case <-g.done:
		}
	}
	<-g.done
	if g.err != nil {
		return fmt.Errorf("%w: %w", ErrNotDurable, g.err)
	}
	return nil
}

var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeGroups writes every group waiting, oldest first (so a segment's
// groups reach it in order), with one write(2) each, then hands the next
// write to the first Add of a group that formed meanwhile. Only one runs
// at a time: l.writing stays set from one to the next. Called with mu
// held; returns with mu held.
func (l *Ledger) writeGroups() {
	batch := l.sealed
	if l.group != nil {
		batch = append(batch, l.group)
	}
	l.sealed, l.group = nil, nil
	l.writing, l.lastOut = true, batch[len(batch)-1]
	l.mu.Unlock()
	for _, b := range batch {
		b.err = l.spool.write(b.seg, b.buf)
	}
	l.mu.Lock()
	for _, b := range batch {
		l.endWrite(b)
	}
	l.lastOut = nil
	switch {
	case len(l.sealed) > 0:
		close(l.sealed[0].lead)
	case l.group != nil:
		close(l.group.lead)
	default:
		l.writing = false
	}
}

// endWrite records the outcome of a journal write of g and lets its Adds
// return. Called with mu held.
func (l *Ledger) endWrite(g *jgroup) {
	if g.err != nil {
		l.failed[g.seg] = true
	}
	l.health.journaled(g.err)
	if cap(g.buf) <= 1<<20 {
		l.spareBuf = g.buf[:0]
	}
	g.buf = nil
	close(g.done)
}

// Depth returns the number of queued records.
func (l *Ledger) Depth() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// Close stops accepting records and writes everything queued. It waits
// until the queue is written or ctx ends. What the database refuses stays
// in the spool for the next start.
func (l *Ledger) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.notFull.Broadcast()
		for l.waiting > 0 { // Adds that were waiting append first
			l.noWaiter.Wait()
		}
		l.mu.Unlock()
		close(l.stop)
	})
	select {
	case <-l.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.closeDrain.Do(func() {
		close(l.stopHealth)
		if l.stopDrain != nil {
			close(l.stopDrain)
		}
	})
	<-l.healthDone
	if l.spool == nil {
		return nil
	}
	<-l.drainDone
	// One last attempt; what the store still refuses stays on disk and is
	// written by the next start.
	if l.spool.Pending() {
		if n, err := l.spool.Drain(ctx, l.w, l.maxBatch); err != nil {
			l.log.Warn("usage records left in the spool for the next start", "dir", l.spool.Dir(), "written", n, "err", err)
		}
	}
	return l.spool.Close()
}

// run is the writer: a round takes the whole queue interval after a
// record entered it empty (at once when Flush asks or a batch is full),
// so an idle gateway's writer sleeps until a request comes.
func (l *Ledger) run() {
	defer close(l.done)
	var spare []usage.Record
	t := time.NewTimer(l.interval)
	t.Stop()
	defer t.Stop()
	armed := false
	for {
		var due <-chan time.Time
		if armed {
			due = t.C
		}
		stopping := false
		select {
		case <-l.first:
			if !armed {
				t.Reset(l.interval)
				armed = true
			}
			continue
		case <-due:
		case <-l.kick:
		case <-l.stop:
			stopping = true
		}
		// The round takes the whole queue: the next record to come
		// finds it empty and arms the timer again.
		t.Stop()
		armed = false
		l.roundsRun.Add(1)
		if l.spool != nil {
			spare = l.storeJournaled(spare, stopping)
		} else {
			spare = l.storeQueued(spare, stopping)
		}
		if stopping {
			return
		}
	}
}

// storeQueued takes the queue (Adds blocked on a full queue go on at once)
// and writes it a batch at a time, retrying until the store takes it: the
// ledger without a spool.
func (l *Ledger) storeQueued(spare []usage.Record, stopping bool) []usage.Record {
	l.mu.Lock()
	taken := l.queue
	l.queue = spare[:0]
	if len(taken) > 0 {
		l.notFull.Broadcast()
	}
	l.mu.Unlock()
	paced := l.pace(len(taken), stopping)
	for i := 0; i < len(taken); i += l.maxBatch {
		batch := taken[i:min(i+l.maxBatch, len(taken))]
		for backoff, attempt := 50*time.Millisecond, 1; !l.insert(batch, paced && attempt == 1, attempt); attempt++ {
			time.Sleep(backoff)
			backoff = min(backoff*2, 5*time.Second)
		}
	}
	l.handledRound(len(taken), true)
	clear(taken)
	return taken[:0]
}

// A small backlog is written at an easy pace; a large one (a burst of
// traffic, a store that was down) as fast as possible.
func (l *Ledger) pace(n int, stopping bool) bool {
	return l.pause > 0 && n <= PaceBacklog && !stopping
}

// insert makes one attempt at storing a batch.
func (l *Ledger) insert(batch []usage.Record, paced bool, attempt int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if paced {
		ctx = context.WithValue(ctx, paceKey{}, l.pause)
	}
	err := l.w.InsertUsage(ctx, batch)
	cancel()
	l.health.wrote(err)
	if err != nil {
		l.log.Warn("usage write failed; retrying", "records", len(batch), "attempt", attempt, "err", err)
	}
	return err == nil
}

// take hands the writer the queue and the journal segment holding it, and
// starts a new segment for the Adds that follow (its file opened here, so
// no Add waits for a file to be created). It never waits: the group not
// yet written is sealed and written by its own Adds. last is the newest
// group of the segment, nil if none.
func (l *Ledger) take(spare []usage.Record) (taken []usage.Record, seg uint64, last *jgroup) {
	l.mu.Lock()
	if len(l.queue) == 0 {
		l.mu.Unlock()
		return spare[:0], 0, nil
	}
	taken, l.queue = l.queue, spare[:0]
	l.notFull.Broadcast()
	seg, last = l.seg, l.group
	if last != nil {
		l.sealed = append(l.sealed, last)
		l.group = nil
	} else if l.lastOut != nil && l.lastOut.seg == seg {
		last = l.lastOut
	}
	l.seg = l.spool.newSegment()
	next := l.seg
	l.mu.Unlock()
	l.spool.prepare(next)
	return taken, seg, last
}

// settle waits until every group of seg is written and closes its file; it
// reports whether all of them reached it.
func (l *Ledger) settle(seg uint64, last *jgroup) bool {
	if last != nil {
		<-last.done
	}
	l.mu.Lock()
	failed := l.failed[seg]
	delete(l.failed, seg)
	l.mu.Unlock()
	l.spool.seal(seg)
	return !failed
}

// storeJournaled takes the queue with its journal segment and stores it.
// When every batch is stored the segment is deleted. When the database
// keeps refusing, the segment is left to the drainer and the records leave
// memory, so a long outage costs disk, not memory; later batches go
// straight to the drainer until it gets one into the database.
func (l *Ledger) storeJournaled(spare []usage.Record, stopping bool) []usage.Record {
	taken, seg, last := l.take(spare)
	if len(taken) == 0 {
		return taken
	}
	defer clear(taken)
	stored := !l.spooling.Load()
	if stored {
		paced := l.pace(len(taken), stopping)
	batches:
		for i := 0; i < len(taken); i += l.maxBatch {
			batch := taken[i:min(i+l.maxBatch, len(taken))]
			for attempt := 1; !l.insert(batch, paced && attempt == 1, attempt); attempt++ {
				if attempt >= l.spoolAfter || stopping {
					stored = false
					break batches
				}
				time.Sleep(50 * time.Millisecond << (attempt - 1))
			}
		}
	}
	onDisk := l.settle(seg, last)
	defer l.handledRound(len(taken), stored)
	switch {
	case stored:
		if err := l.spool.remove(seg); err != nil {
			l.log.Warn("usage spool segment not deleted; its records will be replayed (and ignored) later", "err", err)
		}
	case onDisk:
		if !l.spooling.Swap(true) {
			l.log.Warn("usage database refuses records; they wait in the spool until it takes them", "dir", l.spool.Dir())
		}
	default:
		l.rescue(taken, stopping)
	}
	l.spool.release(seg)
	select {
	case l.drainKick <- struct{}{}:
	default:
	}
	return taken[:0]
}

// handledRound notes that the writer finished with the n records it took
// (the oldest queued), stored in the database or not, and wakes Flush.
func (l *Ledger) handledRound(n int, stored bool) {
	if n == 0 {
		return
	}
	l.mu.Lock()
	l.handled += uint64(n)
	if !stored {
		l.unstored = l.handled
	}
	close(l.rounds)
	l.rounds = make(chan struct{})
	l.mu.Unlock()
}

// ErrNotStored is returned by Flush when records queued before it were
// left to the spool: the database refused them, and they are written once
// it takes them again.
var ErrNotStored = errors.New("usage records not in the database yet: the database refuses them; they wait in the spool")

// Flush has the writer store every record queued before the call now,
// rather than at its next interval, and returns once it has: then a read
// of the database counts them. It returns ErrNotStored when the database
// refused some (they wait in the spool), or ctx's error when ctx ends
// first. A reader that must not miss recent spend (the Redis limiter's
// re-seeding after a restart) calls it before reading.
func (l *Ledger) Flush(ctx context.Context) error {
	l.mu.Lock()
	from, target := l.handled, l.added
	for l.handled < target {
		ch := l.rounds
		l.mu.Unlock()
		select {
		case l.kick <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-l.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		l.mu.Lock()
	}
	refused := l.unstored > from
	l.mu.Unlock()
	if refused || l.spooling.Load() {
		return ErrNotStored
	}
	return nil
}

// rescue stores records of which some never reached the journal (their
// Adds returned ErrNotDurable) while the database refuses them: into the
// database or a spool segment of their own, whichever works first. Until
// then they stay in memory and the writer retries, which holds up later
// batches: back-pressure rather than lost records. At Close it tries once.
func (l *Ledger) rescue(recs []usage.Record, stopping bool) {
	for backoff := 50 * time.Millisecond; ; backoff = min(backoff*2, 5*time.Second) {
		err := l.spool.Append(recs)
		if err == nil {
			l.spooling.Store(true)
			return
		}
		ok := true
		for i := 0; i < len(recs) && ok; i += l.maxBatch {
			ok = l.insert(recs[i:min(i+l.maxBatch, len(recs))], false, 1)
		}
		if ok {
			return
		}
		if stopping {
			l.log.Error("usage records lost: neither the database nor the spool takes them", "records", len(recs), "err", err)
			return
		}
		l.log.Error("usage spool and database both fail; keeping records in memory", "records", len(recs), "err", err)
		time.Sleep(backoff)
	}
}

// drainLoop writes what waits in the spool, at start (what an earlier
// run left), when the writer leaves a segment, and every 500ms while the
// database refuses it, until Close. With nothing waiting it sleeps.
func (l *Ledger) drainLoop() {
	t := time.NewTimer(0)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-l.stopDrain:
			return
		case <-t.C:
		case <-l.drainKick:
		}
		if !l.spool.Pending() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := l.spool.Drain(ctx, l.w, l.maxBatch)
		cancel()
		l.health.wrote(err)
		if err != nil {
			t.Reset(500 * time.Millisecond)
			// Said once; while it lasts, the health alarm repeats it
			// every AlarmEvery rather than twice a second here.
			level := slog.LevelDebug
			if !failing {
				level, failing = slog.LevelWarn, true
			}
			l.log.Log(context.Background(), level, "usage spool not drained yet; will retry every 500ms", "written", n, "err", err)
			continue
		}
		failing = false
		if l.spooling.Swap(false) || n > 0 {
			l.log.Info("usage spool drained into the database", "records", n)
		}
	}
}

// Pacing. At 1,000 requests/s the writer stores ~200 records every 200 ms;
// on SQLite that is a few milliseconds of CPU in one go, and on a small
// machine (gateway, engine and clients sharing two cores) the requests
// that arrive meanwhile wait for it. With a 300µs rest every 8 rows, six
// interleaved A/B runs of bench/gateway.sh (24 s each) had a lower added p99
// in five (e.g. 2.97 -> 1.93, 1.62 -> 1.27, 1.97 -> 1.41 ms). The rests hold
// the write transaction open a few milliseconds longer, which only other
// writers notice.
//
// Batches. Each transaction costs ~0.7 ms on SQLite (its WAL pages, the
// journal segment it empties), and each wake-up of the writer a few tens
// of µs on a VM: writing every 200 ms, up to 1,024 records per
// transaction, rather than every 50 ms and 256, cut the gateway's CPU per
// request by 4 % at 1,000 requests/s and raised its throughput at 16
// connections by 4 % (bench/gateway.sh, interleaved), for records that
// reach the database 150 ms later (budgets and rate limits do not wait for
// the database; the journal holds every record before its answer ends).
const (
	// PaceRows is how many rows a store writes between rests.
	PaceRows = 8
	// PaceBacklog is the most records waiting for which the ledger still
	// asks for rests; above it, it writes flat out to catch up.
	PaceBacklog = 512
)

type paceKey struct{}

// Pace is called by a store after writing row i (from 0) of a batch; when
// the ledger asked for an easy pace, it rests after every PaceRows rows.
func Pace(ctx context.Context, i int) {
	if (i+1)%PaceRows != 0 {
		return
	}
	if d, ok := ctx.Value(paceKey{}).(time.Duration); ok {
		paceSleep(d)
	}
}

// PaceRange is Pace for a store that wrote rows from to to-1 in one
// statement: one rest as long as the rests of the PaceRows boundaries the
// rows crossed, so a statement of many rows keeps the same share of the
// CPU without more wake-ups.
func PaceRange(ctx context.Context, from, to int) {
	n := to/PaceRows - from/PaceRows
	if n <= 0 {
		return
	}
	if d, ok := ctx.Value(paceKey{}).(time.Duration); ok {
		paceSleep(time.Duration(n) * d)
	}
}

var paceSleep = time.Sleep // replaced in tests
