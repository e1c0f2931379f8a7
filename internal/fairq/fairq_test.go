package fairq

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// eventually waits for cond, yielding to the goroutines that make it
// true; it fails the test only if it never holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		runtime.Gosched()
	}
}

type grant struct {
	lane string
	slot *Slot
}

// enqueue starts a request of lane that reports its grant on got, and
// returns once it is waiting in q (so arrival order is the call order).
func enqueue(t *testing.T, q *Queue, lane string, weight int, got chan<- grant) {
	t.Helper()
	before := q.Stats().Waiting
	go func() {
		s, _, err := q.Acquire(context.Background(), lane, weight, 0)
		if err != nil {
			t.Errorf("acquire %s: %v", lane, err)
			return
		}
		got <- grant{lane, s}
	}()
	eventually(t, "request of "+lane+" waiting", func() bool { return q.Stats().Waiting == before+1 })
}

func hold(t *testing.T, q *Queue, lane string, n int) []*Slot {
	t.Helper()
	var held []*Slot
	for range n {
		s, ok := q.TryAcquire(lane, 1)
		if !ok {
			t.Fatalf("no free slot for %s", lane)
		}
		held = append(held, s)
	}
	return held
}

func TestQueue_QuietKeyGoesBeforeFlood(t *testing.T) {
	q := New(4)
	held := hold(t, q, "flood", 4)
	got := make(chan grant, 64)
	for range 40 {
		enqueue(t, q, "flood", 1, got)
	}
	enqueue(t, q, "quiet", 1, got)

	held[0].Release()
	if g := <-got; g.lane != "quiet" {
		t.Fatalf("after a flood of 40 waiting, the next slot went to %q, want the quiet key", g.lane)
	} else {
		g.slot.Release()
	}
	// The flood then has the deployment to itself, one by one.
	for range 40 {
		g := <-got
		if g.lane != "flood" {
			t.Fatalf("grant to %q", g.lane)
		}
		g.slot.Release()
	}
	for _, s := range held[1:] {
		s.Release()
	}
	if st := q.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("stats after all released: %+v", st)
	}
}

func TestQueue_RequestsWithoutKeyShareOneLane(t *testing.T) {
	q := New(1)
	held := hold(t, q, "", 1)
	got := make(chan grant, 8)
	for range 3 {
		enqueue(t, q, "", 1, got)
	}
	enqueue(t, q, "key_b", 1, got)
	held[0].Release()
	// The keyless requests are one lane, which has had its turn (the
	// slot held): key_b's one request is served first, not after all
	// three.
	var order []string
	for range 4 {
		g := <-got
		order = append(order, g.lane)
		g.slot.Release()
	}
	if want := []string{"key_b", "", "", ""}; !slices.Equal(order, want) {
		t.Fatalf("order %q, want %q", order, want)
	}
}

func TestQueue_PriorityThreeGetsThreeTurnsToOne(t *testing.T) {
	q := New(1)
	held := hold(t, q, "x", 1)
	got := make(chan grant, 128)
	for range 40 {
		enqueue(t, q, "high", 3, got)
		enqueue(t, q, "low", 1, got)
	}
	held[0].Release()
	turns := map[string]int{}
	for range 40 {
		g := <-got
		turns[g.lane]++
		g.slot.Release()
	}
	if turns["high"] < 29 || turns["high"] > 31 {
		t.Fatalf("of 40 turns under contention priority 3 got %d and priority 1 got %d; want about 30 and 10", turns["high"], turns["low"])
	}
	for range 40 {
		(<-got).slot.Release()
	}
}

func TestQueue_TimeoutLeavesTheQueue(t *testing.T) {
	q := New(1)
	held := hold(t, q, "a", 1)
	s, waited, err := q.Acquire(context.Background(), "b", 1, time.Millisecond)
	if !errors.Is(err, ErrTimeout) || s != nil {
		t.Fatalf("got slot %v err %v, want ErrTimeout", s, err)
	}
	if waited < time.Millisecond {
		t.Fatalf("waited %v, less than the timeout", waited)
	}
	st := q.Stats()
	if st.Waiting != 0 || st.Timeouts != 1 || st.InFlight != 1 {
		t.Fatalf("stats %+v: want nobody waiting, one timeout, one in flight", st)
	}
	held[0].Release()
	if st := q.Stats(); st.InFlight != 0 {
		t.Fatalf("in flight %d after release", st.InFlight)
	}
}

func TestQueue_ClientGoneLeavesAtOnceAndTakesNoSlot(t *testing.T) {
	q := New(1)
	held := hold(t, q, "a", 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := q.Acquire(ctx, "gone", 1, time.Hour)
		errc <- err
	}()
	eventually(t, "waiting", func() bool { return q.Stats().Waiting == 1 })
	got := make(chan grant, 1)
	enqueue(t, q, "next", 1, got)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if st := q.Stats(); st.Waiting != 1 || st.Gone != 1 {
		t.Fatalf("stats %+v: want the other request still waiting and one gone", st)
	}
	held[0].Release()
	g := <-got
	if g.lane != "next" {
		t.Fatalf("slot went to %q", g.lane)
	}
	g.slot.Release()
	if st := q.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSlot_ReleaseCountsOnce(t *testing.T) {
	q := New(2)
	a := hold(t, q, "a", 1)[0]
	b := hold(t, q, "b", 1)[0]
	a.Release()
	a.Release()
	if st := q.Stats(); st.InFlight != 1 {
		t.Fatalf("in flight %d after releasing one of two slots twice, want 1", st.InFlight)
	}
	b.Release()
	var nilSlot *Slot
	nilSlot.Release() // a path that never got a slot may still release
	if st := q.Stats(); st.InFlight != 0 {
		t.Fatalf("in flight %d", st.InFlight)
	}
}

func TestQueue_EngineBusyHoldsRequestsUntilKicked(t *testing.T) {
	q := New(0)
	var busy atomic.Bool
	busy.Store(true)
	q.SetBusy(func() bool { return busy.Load() })
	// With nothing of ours in flight the engine's figure does not hold
	// the first request: nothing would wake it.
	first, ok := q.TryAcquire("a", 1)
	if !ok {
		t.Fatal("first request held with nothing in flight")
	}
	got := make(chan grant, 1)
	enqueue(t, q, "b", 1, got)
	busy.Store(false)
	q.Kick()
	g := <-got
	g.slot.Release()
	first.Release()
	if st := q.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestQueue_SetLimitLetsWaitersIn(t *testing.T) {
	q := New(1)
	held := hold(t, q, "a", 1)
	got := make(chan grant, 1)
	enqueue(t, q, "b", 1, got)
	q.SetLimit(2)
	(<-got).slot.Release()
	held[0].Release()
}

func TestQueue_SlotAccountingUnderManyGoroutines(t *testing.T) {
	const limit, workers, rounds = 3, 48, 60
	before := runtime.NumGoroutine()
	q := New(limit)
	var inUse, peak, served atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lane := []string{"a", "b", "c", ""}[w%4]
			for r := range rounds {
				ctx, cancel := context.WithCancel(context.Background())
				if rand.IntN(5) == 0 {
					cancel() // a client gone before or while it waits
				}
				s, _, err := q.Acquire(ctx, lane, 1+w%3, 0)
				if err == nil {
					n := inUse.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					served.Add(1)
					runtime.Gosched()
					inUse.Add(-1)
					s.Release()
					if r%7 == 0 {
						s.Release() // a second release on another path
					}
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Fatalf("%d requests held slots at once, limit %d", p, limit)
	}
	st := q.Stats()
	if st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("after every request ended: %+v", st)
	}
	if served.Load() == 0 {
		t.Fatal("nothing was served")
	}
	eventually(t, "no goroutine left behind", func() bool { return runtime.NumGoroutine() <= before })
}

// fakeNow is a settable clock for the reserve's activity window.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeNow) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// With a reserve of one slot, a flooding key that holds slots does not
// take the last free one while another key is active: the quiet key's
// request starts at once, without waiting for a flood request to end. A
// key alone uses every slot, and gets the kept one back once the other
// key has been gone for ReserveWindow.
func TestQueue_ReserveKeepsASlotForAQuietKeyButNotFromAKeyAlone(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1_000_000, 0)}
	q := New(4)
	q.now = clk.now
	q.SetReserve(1)

	// Alone, the flood takes all four.
	alone := hold(t, q, "flood", 4)
	for _, s := range alone {
		s.Release()
	}

	// The quiet key has been active (one request, ended).
	s, ok := q.TryAcquire("quiet", 1)
	if !ok {
		t.Fatal("the quiet key found no slot in an idle queue")
	}
	s.Release()

	held := hold(t, q, "flood", 3)
	if _, ok := q.TryAcquire("flood", 1); ok {
		t.Fatal("the flood took the kept slot while the quiet key was active")
	}
	got := make(chan grant, 8)
	enqueue(t, q, "flood", 1, got)
	// The quiet key's next request goes at once, ahead of the flood's
	// waiting one.
	qs, waited, err := q.Acquire(context.Background(), "quiet", 1, 0)
	if err != nil || waited != 0 {
		t.Fatalf("quiet request: waited %v, err %v; want a slot at once", waited, err)
	}
	if st := q.Stats(); st.InFlight != 4 || st.Waiting != 1 {
		t.Fatalf("in flight %d, waiting %d; want 4 and the flood's 1", st.InFlight, st.Waiting)
	}
	qs.Release() // ended just now: the quiet key is still active
	select {
	case g := <-got:
		t.Fatalf("the flood's waiting request took the kept slot (%s)", g.lane)
	default:
	}
	// The quiet key gone for the whole window: the next release lets the
	// flood use the fourth slot again.
	clk.add(ReserveWindow + time.Second)
	held[0].Release()
	if g := <-got; g.lane != "flood" {
		t.Fatalf("got %q", g.lane)
	} else {
		held[0] = g.slot
	}
	more, ok := q.TryAcquire("flood", 1)
	if !ok {
		t.Fatal("the flood alone could not use its fourth slot after the quiet key left")
	}
	if st := q.Stats(); st.InFlight != 4 {
		t.Fatalf("in flight %d, want 4", st.InFlight)
	}
	more.Release()
	for _, s := range held {
		s.Release()
	}
	if st := q.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("left %d in flight, %d waiting", st.InFlight, st.Waiting)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// RoomSignal's channel is closed when a request would be let in at once:
// at once if that is so, else when a slot is given back with nobody
// waiting for it — not while the slot goes to a waiting request.
func TestQueue_RoomSignalClosesWhenASlotIsFreeWithNobodyWaiting(t *testing.T) {
	q := New(1)
	if !closed(q.RoomSignal()) {
		t.Fatal("an empty queue has room: its signal should be closed already")
	}
	first, ok := q.TryAcquire("k", 1)
	if !ok {
		t.Fatal("TryAcquire on an empty queue failed")
	}
	sig := q.RoomSignal()
	if closed(sig) {
		t.Fatal("signal closed while the only slot is taken")
	}
	got := make(chan grant, 1)
	enqueue(t, q, "k2", 1, got)
	first.Release() // the slot goes to the waiting request
	second := <-got
	if closed(sig) {
		t.Fatal("signal closed though the slot went to the request waiting for it")
	}
	second.slot.Release()
	if !closed(sig) {
		t.Fatal("signal still open after the slot was given back with nobody waiting")
	}
}

// A wait its caller ends with ErrMoved (it took the request to another
// queue) returns ErrMoved, leaves the queue, and is not counted as a
// request gone or timed out.
func TestQueue_AWaitEndedByAMoveIsNotCountedAsGone(t *testing.T) {
	q := New(1)
	held, _ := q.TryAcquire("k", 1)
	defer held.Release()
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := q.Acquire(ctx, "k2", 1, 0)
		errc <- err
	}()
	eventually(t, "request waiting", func() bool { return q.Stats().Waiting == 1 })
	cancel(ErrMoved)
	if err := <-errc; !errors.Is(err, ErrMoved) {
		t.Fatalf("Acquire = %v, want ErrMoved", err)
	}
	if st := q.Stats(); st.Waiting != 0 || st.Gone != 0 || st.Timeouts != 0 || st.Waits != 1 {
		t.Fatalf("stats after the move: %+v", st)
	}
}
