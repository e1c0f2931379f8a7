package sim

import (
	"sync"
	"time"
)

// engine runs one model's scheduler in real time: one goroutine, one step
// at a time, sleeping for each step's modelled duration. Tokens are
// published to waiting HTTP handlers at the end of each step.
type engine struct {
	mc   ModelConfig
	m    *modelMetrics
	mu   sync.Mutex
	s    scheduler
	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

func newEngine(mc ModelConfig) *engine {
	e := &engine{mc: mc, m: newModelMetrics(mc), s: scheduler{mc: mc, kv: newKVCache(mc)},
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go e.run()
	return e
}

// submit queues q, or reports false when the waiting queue is full.
func (e *engine) submit(q *seq) bool {
	q.arrival = time.Now()
	e.mu.Lock()
	ok := e.s.enqueue(q)
	if ok {
		e.publishLoad()
	}
	e.mu.Unlock()
	if ok {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	return ok
}

// publishLoad copies the scheduler's gauges, preemption count and
// prefix-cache counters to the metrics; the caller holds e.mu.
func (e *engine) publishLoad() {
	e.m.setLoad(len(e.s.running), e.s.numWaiting(), e.s.preemptions)
	if kv := e.s.kv; kv != nil {
		e.m.setKV(kv.usage(), kv.queries, kv.hits)
	}
}

// close stops the loop and waits for it.
func (e *engine) close() {
	select {
	case <-e.quit:
	default:
		close(e.quit)
	}
	<-e.done
}

func (e *engine) run() {
	defer close(e.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var prevEnd time.Time
	idle := true
	for {
		e.mu.Lock()
		now := time.Now()
		b := e.s.schedule(now)
		e.publishLoad()
		if e.s.aborted > 0 {
			e.m.addAborted(e.s.aborted)
			e.s.aborted = 0
		}
		e.mu.Unlock()
		if b.empty() {
			idle = true
			select {
			case <-e.wake:
				continue
			case <-e.quit:
				return
			}
		}
		// Back-to-back steps are timed from the previous step's scheduled
		// end so that wake-up latency does not accumulate into the
		// inter-token latency; after idling, or when the loop has fallen
		// behind by more than a step, the step starts now.
		start := now
		if !idle && now.Sub(prevEnd) < b.dur {
			start = prevEnd
			// A step cannot have begun before a request it prefills
			// arrived: one that came in while the loop was late would
			// otherwise get its first token early.
			for _, pc := range b.prefill {
				if pc.s.arrival.After(start) {
					start = pc.s.arrival
				}
			}
		}
		idle = false
		end := start.Add(b.dur)
		if d := time.Until(end); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-e.quit:
				timer.Stop()
				return
			}
		}
		prevEnd = end
		e.mu.Lock()
		touched := e.s.complete(b, end)
		e.m.observeStep(touched, end)
		e.publishLoad()
		e.mu.Unlock()
		for _, q := range touched {
			q.publish()
		}
	}
}
