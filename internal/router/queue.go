package router

import (
	"context"
	"errors"
	"math"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/fairq"
)

// CodeQueueTimeout is the error code of a request that waited a
// deployment's whole queue_timeout in the gateway's fair queue.
const CodeQueueTimeout = "queue_timeout"

// Lane says whose turn a request takes in the deployments' fair queues.
type Lane struct {
	// Key is the virtual key's id; requests without a key share "".
	Key string
	// Weight is the key's priority: under contention a key gets turns in
	// proportion to it (at least 1).
	Weight int
	// Wait, when set, runs wait, which blocks until the request has a
	// slot or must give up; the relay sends a streaming client
	// keep-alives meanwhile. It returns wait's error.
	Wait func(ctx context.Context, wait func(context.Context) error) error
}

type laneKey struct{}

// WithLane returns ctx carrying the request's lane for Forward.
func WithLane(ctx context.Context, l Lane) context.Context {
	return context.WithValue(ctx, laneKey{}, l)
}

// queueSettings are a deployment's fair-queue settings from the config.
type queueSettings struct {
	limit, whenWaiting, reserve int
}

// setupQueues gives each deployment's queue its limit and engine check.
// A backend+model pair named by several models takes the largest limit.
func (t *Table) setupQueues(settings map[*depState]queueSettings) {
	waiting := map[*backendState][]*fairq.Queue{}
	defer func() {
		for be := range t.bstates {
			qs := waiting[t.bstates[be]]
			t.bstates[be].waitQueues.Store(&qs)
		}
	}()
	for _, s := range t.deps {
		qs := settings[s]
		s.q.SetLimit(qs.limit)
		s.q.SetReserve(qs.reserve)
		var busy fairq.Busy
		if qs.whenWaiting > 0 {
			// The engine's own queue, from its scraped /metrics (the
			// route has its engines read): a fresh reading above the
			// threshold holds requests. The queue asks again whenever
			// one of this gateway's requests to the deployment ends.
			be, threshold := s.be, float64(qs.whenWaiting)
			waiting[be] = append(waiting[be], s.q)
			busy = func() bool {
				sc := be.scraper.Load()
				if sc == nil {
					return false
				}
				sn := sc.Snapshot()
				return sn.Fresh && sn.Waiting > threshold
			}
		}
		s.q.SetBusy(busy)
	}
}

// roomFirst moves, within each priority group of the order, the
// deployments whose fair queue has room ahead of those that are full
// (keeping the balancing's order otherwise), so that a request does not
// wait for a busy deployment while an equal one is free.
func (t *Table) roomFirst(r *Route, order []int) {
	deps := r.Deployments
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && deps[order[end]].Priority == deps[order[start]].Priority {
			end++
		}
		if end-start > 1 {
			insertionSort(order[start:end], func(a, b int) bool {
				return deps[a].s.q.HasRoom() && !deps[b].s.q.HasRoom()
			})
		}
		start = end
	}
}

// admit takes a slot in d's fair queue for the request, waiting its turn
// when d is at its max_concurrency (or its engine's queue is long). The
// slot is nil when d has no queue. A request that waited queue_timeout
// gets 429 with Retry-After; one whose client left, ErrClientClosed.
//
// Before waiting it asks elsewhere, when given, whether an equal
// deployment has a free slot after all; if so admit returns errElsewhere
// and the caller tries that one. While it waits it watches the queues of
// the equal deployments peers names: when one of them gets room (a
// request there ended and nobody waits there), the request leaves d's
// queue and goes there (errElsewhere) instead of waiting for a slot of
// d's, unless another request took that room first.
func (t *Table) admit(ctx context.Context, r *Route, d Deployment, elsewhere func() bool, peers func() []*fairq.Queue) (*fairq.Slot, error) {
	q := d.s.q
	if !q.Active() {
		return nil, nil
	}
	lane, _ := ctx.Value(laneKey{}).(Lane)
	if s, ok := q.TryAcquire(lane.Key, lane.Weight); ok {
		return s, nil
	}
	// queue_timeout bounds the whole wait here, however often the request
	// set out for room elsewhere that another request took first.
	var deadline time.Time
	if d.QueueTimeout > 0 {
		deadline = time.Now().Add(d.QueueTimeout)
	}
	for {
		timeout := d.QueueTimeout
		if !deadline.IsZero() {
			if timeout = time.Until(deadline); timeout <= 0 {
				return nil, queueTimeout(r, d, q.Stats())
			}
		}
		// The signals first, then the look: room that comes between
		// them still wakes the wait.
		var bells []<-chan struct{}
		if peers != nil {
			for _, pq := range peers() {
				bells = append(bells, pq.RoomSignal())
			}
		}
		if elsewhere != nil && elsewhere() {
			return nil, errElsewhere
		}
		slot, err := t.wait(ctx, q, lane, timeout, bells)
		if err == nil && slot != nil {
			return slot, nil
		}
		slot.Release()
		switch {
		case errors.Is(err, fairq.ErrMoved):
			if elsewhere != nil && elsewhere() {
				return nil, errElsewhere
			}
			continue // another request took the room first: wait here again
		case errors.Is(err, fairq.ErrTimeout):
			return nil, queueTimeout(r, d, q.Stats())
		}
		return nil, apierror.ClientClosed(err)
	}
}

// wait waits for a slot of q (through the lane's Wait, which sends a
// streaming client keep-alives). When one of bells is closed first — an
// equal deployment has room — the wait ends with fairq.ErrMoved.
func (t *Table) wait(ctx context.Context, q *fairq.Queue, lane Lane, timeout time.Duration, bells []<-chan struct{}) (*fairq.Slot, error) {
	if len(bells) > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := make(chan struct{})
		defer close(stop)
		cases := make([]reflect.SelectCase, 0, len(bells)+1)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(stop)})
		for _, b := range bells {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(b)})
		}
		go func() {
			if i, _, _ := reflect.Select(cases); i > 0 {
				cancel(fairq.ErrMoved)
			}
		}()
	}
	var slot *fairq.Slot
	wait := func(ctx context.Context) error {
		s, _, err := q.Acquire(ctx, lane.Key, lane.Weight, timeout)
		slot = s
		return err
	}
	var err error
	if lane.Wait != nil {
		err = lane.Wait(ctx, wait)
	} else {
		err = wait(ctx)
	}
	return slot, err
}

// errElsewhere says an equal deployment has room: try it instead of
// waiting.
var errElsewhere = errors.New("router: an equal deployment has room")

// roomier returns the index in order, after k and in k's priority group,
// of a deployment that may be tried now and has a free slot; -1 if none.
func (t *Table) roomier(r *Route, order []int, k int) int {
	found := -1
	t.eachPeer(r, order, k, func(j int, s *depState) bool {
		if s.q.HasRoom() {
			found = j
			return false
		}
		return true
	})
	return found
}

// peerQueues returns the fair queues of the deployments after k in order
// and in k's priority group that may be tried now: where a request waiting
// in k's queue may go when one of them gets room.
func (t *Table) peerQueues(r *Route, order []int, k int) []*fairq.Queue {
	var qs []*fairq.Queue
	t.eachPeer(r, order, k, func(_ int, s *depState) bool {
		if s.q.Active() {
			qs = append(qs, s.q)
		}
		return true
	})
	return qs
}

// eachPeer calls fn with the index in order and the state of each
// deployment after k in order and in k's priority group that may be tried
// now (not down, breaker closed), until fn returns false.
func (t *Table) eachPeer(r *Route, order []int, k int, fn func(j int, s *depState) bool) {
	deps := r.Deployments
	now := t.opt.Now()
	for j := k + 1; j < len(order) && deps[order[j]].Priority == deps[order[k]].Priority; j++ {
		s := deps[order[j]].s
		if !s.be.down.Load() && s.br.readyAt(now).IsZero() && !fn(j, s) {
			return
		}
	}
}

// queueTimeout is the 429 of a request that waited the whole
// queue_timeout. Retry-After is a tenth of the timeout (at least 1s): the
// queue was full for all of it, so an immediate retry would likely wait
// again.
func queueTimeout(r *Route, d Deployment, st fairq.Stats) error {
	secs := max(1, int(math.Ceil(d.QueueTimeout.Seconds()/10)))
	e := apierror.Newf(http.StatusTooManyRequests, apierror.KindRateLimit, CodeQueueTimeout,
		"model %q is busy: its deployment %s/%s has %d requests in flight (max_concurrency %d) and %d more waiting in the gateway's queue; this request waited %s (queue_timeout) without its turn. Retry after %d s, send fewer requests at once, or ask the gateway admin to raise max_concurrency or queue_timeout",
		r.Model, d.Backend.Name, d.UpstreamModel, st.InFlight, st.Limit, st.Waiting, d.QueueTimeout, secs)
	e.Header = http.Header{"Retry-After": {strconv.Itoa(secs)}}
	return e
}

type slotKey struct{}

// ReleaseSlot gives back the fair-queue slot the attempt running under ctx
// holds, if any, before the attempt returns: the relay calls it once the
// backend's answer has ended, so that the next request in the queue goes
// to the engine while this one's record is written and its last bytes
// are sent. Later releases (the router's own, when the attempt returns)
// do nothing.
func ReleaseSlot(ctx context.Context) {
	if s, _ := ctx.Value(slotKey{}).(*fairq.Slot); s != nil {
		s.Release()
	}
}

// QueueStats is one deployment's fair queue as metrics and the console
// show it.
type QueueStats struct {
	Backend, UpstreamModel string
	fairq.Stats
}

// Queues returns the fair queues of the table's deployments that have
// one (a max_concurrency or an engine check), sorted by backend and model.
func (t *Table) Queues() []QueueStats {
	var out []QueueStats
	for key, s := range t.deps {
		if !s.q.Active() {
			continue
		}
		b, u := splitDepKey(key)
		out = append(out, QueueStats{Backend: b, UpstreamModel: u, Stats: s.q.Stats()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Backend != out[j].Backend {
			return out[i].Backend < out[j].Backend
		}
		return out[i].UpstreamModel < out[j].UpstreamModel
	})
	return out
}

// QueueHealth is a deployment's fair queue as /v1/models?health=1 and the
// console show it.
type QueueHealth struct {
	MaxConcurrency int     `json:"max_concurrency"`
	InFlight       int     `json:"in_flight"`
	Waiting        int     `json:"waiting"`
	Waits          int64   `json:"waits"`
	MeanWaitMS     float64 `json:"mean_wait_ms"`
	Timeouts       int64   `json:"timeouts"`
	Abandoned      int64   `json:"abandoned"`
}

func queueHealth(q *fairq.Queue) *QueueHealth {
	if !q.Active() {
		return nil
	}
	st := q.Stats()
	h := &QueueHealth{MaxConcurrency: st.Limit, InFlight: st.InFlight, Waiting: st.Waiting, Waits: st.Waits, Timeouts: st.Timeouts, Abandoned: st.Gone}
	if st.Waits > 0 {
		h.MeanWaitMS = float64(st.WaitTime.Microseconds()) / 1000 / float64(st.Waits)
	}
	return h
}

func splitDepKey(key string) (backend, upstream string) {
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}
