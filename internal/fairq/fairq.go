// Package fairq is the gateway's fair queue in front of one deployment:
// at most a configured number of requests in flight to it, and the
// requests beyond that waiting in the gateway, served in turn across
// lanes (one lane per virtual key) in proportion to each lane's weight
// (the key's priority), instead of first come first served.
//
// The order is start-time fair queueing: each waiting request gets a start
// tag, max(the queue's virtual time, the finish tag of its lane's previous
// request), and its lane's finish tag moves on by 1/weight; a free slot
// goes to the waiting request with the smallest start tag. A key with 40
// requests waiting has tags reaching 40 turns ahead, so a quiet key's one
// request, tagged with the current virtual time, goes next; two busy keys
// with weights 3 and 1 get three turns and one.
package fairq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTimeout is returned by Acquire when the request waited the whole
// timeout without a slot.
var ErrTimeout = errors.New("fairq: queue timeout")

// ErrMoved is the cause a caller cancels an Acquire's context with when it
// takes the waiting request to another queue (one with room: RoomSignal).
// Acquire then returns it, and does not count the request as gone.
var ErrMoved = errors.New("fairq: moved to another queue")

// Busy reports whether the deployment's engine says it already has too
// many requests waiting (from its own metrics); the queue then holds
// further requests even below its concurrency limit. It is asked under
// the queue's lock and must be quick (read a scraped figure).
type Busy func() bool

// Queue is the fair queue of one deployment. The zero value is not
// usable; call New.
type Queue struct {
	mu       sync.Mutex
	limit    int // 0: no limit of its own
	reserve  int // slots kept for lanes with nothing in flight (SetReserve)
	now      func() time.Time
	busy     Busy
	inflight int
	waiting  int
	vtime    float64
	seq      uint64
	lanes    map[string]*lane
	active   atomic.Bool   // limit > 0 || busy != nil
	roomCh   chan struct{} // RoomSignal's channel, closed when room comes

	waits    atomic.Int64 // requests that had to wait (granted, timed out or gone)
	waitNs   atomic.Int64 // their total wait
	timeouts atomic.Int64
	gone     atomic.Int64
}

type lane struct {
	key     string
	finish  float64
	waiters []*waiter
	// inflight counts the lane's slots taken and not given back; active
	// is when it last took or gave one back.
	inflight int
	active   time.Time
}

type waiter struct {
	start   float64
	seq     uint64
	lane    *lane
	ready   chan struct{}
	granted bool
}

// New returns a queue admitting at most limit requests at once (0: no
// limit; only a Busy function set later holds requests).
func New(limit int) *Queue {
	q := &Queue{limit: max(limit, 0), lanes: map[string]*lane{}, now: time.Now}
	q.active.Store(q.limit > 0)
	return q
}

// SetLimit changes the concurrency limit (a config reload); requests
// waiting are let in at once if the new limit has room for them.
func (q *Queue) SetLimit(limit int) {
	q.mu.Lock()
	q.limit = max(limit, 0)
	q.active.Store(q.limit > 0 || q.busy != nil)
	q.dispatch()
	q.mu.Unlock()
}

// ReserveWindow is how long a lane counts as active after its last
// request ended, for SetReserve: a client that sends one request after
// another (an agent's turns, a chat) stays active between them.
const ReserveWindow = 5 * time.Second

// SetReserve keeps n of the limit's slots (at most limit-1) for lanes
// that have nothing in flight, while more than one lane is active (has a
// request in flight or waiting, or had one in the last ReserveWindow): a
// lane that already holds slots does not take the last n free ones then,
// so a quiet key's request starts at once instead of waiting for a flood's
// requests to end. A lane alone uses every slot.
func (q *Queue) SetReserve(n int) {
	q.mu.Lock()
	q.reserve = max(n, 0)
	q.dispatch()
	q.mu.Unlock()
}

// SetBusy installs the engine-load check (nil: none).
func (q *Queue) SetBusy(b Busy) {
	q.mu.Lock()
	q.busy = b
	q.active.Store(q.limit > 0 || q.busy != nil)
	q.dispatch()
	q.mu.Unlock()
}

// Kick lets waiting requests in if there is room now; whoever updates the
// figures a Busy function reads calls it after each update.
func (q *Queue) Kick() {
	q.mu.Lock()
	q.dispatch()
	q.mu.Unlock()
}

// Active reports whether the queue can hold a request at all (a limit or a
// Busy check is set).
func (q *Queue) Active() bool { return q != nil && q.active.Load() }

// room reports whether one more request may go to the deployment. The
// engine's own queue holds requests only while this gateway has some in
// flight: their ends wake the queue, and a stale figure cannot hold a
// request forever.
func (q *Queue) room() bool {
	if q.limit > 0 && q.inflight >= q.limit {
		return false
	}
	return q.inflight == 0 || q.busy == nil || !q.busy()
}

// fits reports whether a request of lane l may take a slot now: there is
// room, and the slot is not one kept for other lanes (SetReserve).
func (q *Queue) fits(l *lane) bool { return q.fitsAmong(l, -1) }

// fitsAmong is fits with the number of active lanes counted already
// (-1: count them if needed).
func (q *Queue) fitsAmong(l *lane, active int) bool {
	if !q.room() {
		return false
	}
	if q.reserve == 0 || q.limit == 0 || l.inflight == 0 || q.limit-q.inflight > min(q.reserve, q.limit-1) {
		return true
	}
	if active < 0 {
		active = q.activeLanes()
	}
	// l holds a slot, so it is one of the active lanes.
	return active <= 1
}

// activeLanes counts the lanes with a request in flight or waiting, or
// one ended within ReserveWindow.
func (q *Queue) activeLanes() int {
	cut := q.now().Add(-ReserveWindow)
	n := 0
	for _, o := range q.lanes {
		if o.inflight > 0 || len(o.waiters) > 0 || o.active.After(cut) {
			n++
		}
	}
	return n
}

// HasRoom reports whether a request would be let in at once (any lane's:
// slots kept by SetReserve count as room).
func (q *Queue) HasRoom() bool {
	if !q.Active() {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting == 0 && q.room()
}

// Slot is one admitted request's place; Release gives it back.
type Slot struct {
	q    *Queue
	lane *lane
	done atomic.Bool
}

// Release gives the slot back and lets the next waiting request in. Only
// the first call counts, so every path of a request may call it.
func (s *Slot) Release() {
	if s == nil || !s.done.CompareAndSwap(false, true) {
		return
	}
	q := s.q
	q.mu.Lock()
	q.inflight--
	s.lane.inflight--
	s.lane.active = q.now()
	q.dispatch()
	q.mu.Unlock()
}

// TryAcquire takes a slot if one is free and nobody is waiting, without
// waiting; the lane's turn is counted as with Acquire.
func (q *Queue) TryAcquire(laneKey string, weight int) (*Slot, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lane(laneKey)
	if q.waiting > 0 || !q.fits(l) {
		return nil, false
	}
	q.admitNow(l, weight)
	return &Slot{q: q, lane: l}, true
}

func (q *Queue) admitNow(l *lane, weight int) {
	start := max(q.vtime, l.finish)
	l.finish = start + 1/float64(max(weight, 1))
	q.vtime = start
	q.take(l)
}

// take counts a slot taken by lane l.
func (q *Queue) take(l *lane) {
	q.inflight++
	l.inflight++
	l.active = q.now()
}

func (q *Queue) lane(key string) *lane {
	l := q.lanes[key]
	if l == nil {
		if len(q.lanes) >= maxLanes {
			q.prune()
		}
		l = &lane{key: key}
		q.lanes[key] = l
	}
	return l
}

// Acquire takes a slot for a request of lane laneKey (a key's id; requests
// without a key share the lane "") with the lane's weight (its priority,
// at least 1). It waits its turn for at most timeout (0: until ctx ends).
// It returns ErrTimeout after the timeout, ctx's error when ctx ends
// first; either way the request has left the queue.
func (q *Queue) Acquire(ctx context.Context, laneKey string, weight int, timeout time.Duration) (*Slot, time.Duration, error) {
	q.mu.Lock()
	l := q.lane(laneKey)
	if q.waiting == 0 && q.fits(l) {
		q.admitNow(l, weight)
		q.mu.Unlock()
		return &Slot{q: q, lane: l}, 0, nil
	}
	w := &waiter{start: max(q.vtime, l.finish), seq: q.seq, lane: l, ready: make(chan struct{})}
	q.seq++
	l.finish = w.start + 1/float64(max(weight, 1))
	l.waiters = append(l.waiters, w)
	q.waiting++
	// The requests waiting may all be held for other lanes (SetReserve)
	// while this one may go.
	q.dispatch()
	if w.granted {
		q.mu.Unlock()
		return &Slot{q: q, lane: l}, 0, nil
	}
	q.mu.Unlock()

	began := time.Now()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case <-w.ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = ErrTimeout
	}
	waited := time.Since(began)
	q.waits.Add(1)
	q.waitNs.Add(int64(waited))
	if err == nil {
		return &Slot{q: q, lane: l}, waited, nil
	}
	q.mu.Lock()
	if w.granted {
		// The slot came as the wait ended: pass it on.
		q.inflight--
		l.inflight--
		q.dispatch()
		q.mu.Unlock()
	} else {
		q.remove(w)
		q.signalRoom() // it may have been the last one waiting
		q.mu.Unlock()
	}
	switch {
	case errors.Is(err, ErrTimeout):
		q.timeouts.Add(1)
	case errors.Is(context.Cause(ctx), ErrMoved):
		err = ErrMoved
	default:
		q.gone.Add(1)
	}
	return nil, waited, err
}

// RoomSignal returns a channel that is closed when the queue has room and
// nobody waiting, so a request would be let in at once (closed already if
// that is so now). A request waiting in another queue of an equal
// deployment watches it, to move here rather than wait its turn there.
func (q *Queue) RoomSignal() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.roomCh == nil {
		q.roomCh = make(chan struct{})
	}
	ch := q.roomCh
	q.signalRoom()
	return ch
}

// signalRoom closes RoomSignal's channel if the queue has room for a
// request now. Called with q.mu held, wherever room may have come.
func (q *Queue) signalRoom() {
	if q.roomCh != nil && q.waiting == 0 && q.room() {
		close(q.roomCh)
		q.roomCh = nil
	}
}

// remove takes a waiter that gave up out of its lane. When it was the
// lane's last, the lane's finish tag steps back to its start, so that
// turns a key never took are not held against it.
func (q *Queue) remove(w *waiter) {
	l := w.lane
	for i, x := range l.waiters {
		if x == w {
			if i == len(l.waiters)-1 {
				l.finish = w.start
			}
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			q.waiting--
			break
		}
	}
}

// maxLanes is the number of lanes kept before idle ones are dropped.
const maxLanes = 256

// prune drops the lanes with nobody waiting: their finish tags only
// matter while they are ahead of the virtual time, and dropping one gives
// its key at most one early turn, so the map does not grow with every key
// ever seen.
func (q *Queue) prune() {
	for k, l := range q.lanes {
		if len(l.waiters) == 0 && l.inflight == 0 && l.finish <= q.vtime+1 {
			delete(q.lanes, k)
		}
	}
}

// dispatch lets waiting requests in while there is room, smallest start
// tag first (ties: the earlier arrival). Called with q.mu held.
func (q *Queue) dispatch() {
	for q.waiting > 0 && q.room() {
		var best *lane
		active := -1
		if q.reserve > 0 && q.limit > 0 && q.limit-q.inflight <= min(q.reserve, q.limit-1) {
			active = q.activeLanes()
		}
		for _, l := range q.lanes {
			if len(l.waiters) == 0 || !q.fitsAmong(l, active) {
				continue
			}
			h := l.waiters[0]
			if best == nil || h.start < best.waiters[0].start || (h.start == best.waiters[0].start && h.seq < best.waiters[0].seq) {
				best = l
			}
		}
		if best == nil {
			return // the slots left are kept for lanes with nothing in flight
		}
		w := best.waiters[0]
		best.waiters[0] = nil
		best.waiters = best.waiters[1:]
		q.waiting--
		q.vtime = max(q.vtime, w.start)
		q.take(best)
		w.granted = true
		close(w.ready)
	}
	q.signalRoom()
}

// Stats is a snapshot of a queue for metrics and the console.
type Stats struct {
	Limit    int
	InFlight int
	Waiting  int
	// Waits counts requests that had to wait, WaitTime their total wait;
	// Timeouts and Gone those that left without a slot (queue_timeout,
	// client gone).
	Waits    int64
	WaitTime time.Duration
	Timeouts int64
	Gone     int64
}

// Stats returns the queue's current figures.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	s := Stats{Limit: q.limit, InFlight: q.inflight, Waiting: q.waiting}
	q.mu.Unlock()
	s.Waits, s.WaitTime = q.waits.Load(), time.Duration(q.waitNs.Load())
	s.Timeouts, s.Gone = q.timeouts.Load(), q.gone.Load()
	return s
}
