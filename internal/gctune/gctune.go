// Package gctune paces the garbage collector for a gateway, whose live
// heap is small (a few MB: buffers in flight, tables, caches) while it
// allocates per request. With Go's default (GOGC=100, the next collection
// at twice the live heap) such a process collects hundreds of times a
// second under load and spends ~5 % of its CPU on marking; a floor under
// the heap goal lets it collect far less often for a few tens of MB,
// while a large live heap (thousands of open streams) keeps the default
// ratio, so memory never grows by more than the floor beyond it.
//
// After every collection the tuner sets the GC percentage so that the
// next goal is max(2 × live heap, floor). It stays off when the operator
// set GOGC or GOMEMLIMIT: their choice wins.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// DefaultFloor is the heap goal the tuner keeps at least: 32 MiB. Under
// load the gateway's live heap is a few MB, so Go's default collects every
// few MB allocated (tens of times a second, ~5 % of the CPU); at 32 MiB a
// collection every few hundred milliseconds costs well under 1 %.
const DefaultFloor = 32 << 20

// maxPercent bounds the percentage set for a nearly empty heap.
const maxPercent = 5000

// Percent is the GC percentage that puts the next heap goal at
// max(live + roots × base/100, floor), where roots is the live heap plus
// the goroutine stacks and globals the collector scans (Go applies the
// percentage to all three): base where that reaches the floor, more below
// it, at most maxPercent. Before the first collection the live heap is
// unknown (0): base, so that the first goal is the runtime's own.
func Percent(live, roots, floor uint64, base int) int {
	if live == 0 {
		return base
	}
	roots = max(roots, live)
	if live+roots*uint64(base)/100 >= floor {
		return base
	}
	p := (floor - live) * 100 / roots
	if p > maxPercent {
		return maxPercent
	}
	return max(int(p), base)
}

// Tuner re-sets the GC percentage after each collection.
type Tuner struct {
	floor   uint64
	stopped atomic.Bool
	last    atomic.Int64 // the percentage set last
	sample  []metrics.Sample
}

// Start starts a tuner with the given floor (DefaultFloor if 0), unless
// GOGC or GOMEMLIMIT is set in the environment; then it returns nil. Stop
// ends it and restores GC percentage 100.
func Start(floor uint64) *Tuner {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	if floor == 0 {
		floor = DefaultFloor
	}
	t := &Tuner{floor: floor, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
	}}
	t.adjust()
	t.arm()
	return t
}

// Percent is the GC percentage the tuner set last (0 for a nil tuner).
func (t *Tuner) Percent() int {
	if t == nil {
		return 0
	}
	return int(t.last.Load())
}

// Stop ends the tuning and restores the default percentage.
func (t *Tuner) Stop() {
	if t == nil || t.stopped.Swap(true) {
		return
	}
	debug.SetGCPercent(100)
}

// sentinel is an object nothing refers to: its finalizer runs after the
// collection that found it, and arms the next one.
type sentinel struct {
	t *Tuner
	_ [16]byte // not a tiny allocation, which could share a block and outlive a cycle
}

func (t *Tuner) arm() {
	runtime.SetFinalizer(&sentinel{t: t}, func(s *sentinel) {
		if s.t.stopped.Load() {
			return
		}
		s.t.adjust()
		s.t.arm()
	})
}

func (t *Tuner) adjust() {
	metrics.Read(t.sample)
	var v [3]uint64
	for i, sm := range t.sample {
		if sm.Value.Kind() == metrics.KindUint64 {
			v[i] = sm.Value.Uint64()
		}
	}
	p := Percent(v[0], v[0]+v[1]+v[2], t.floor, 100)
	if int64(p) != t.last.Load() {
		t.last.Store(int64(p))
		debug.SetGCPercent(p)
	}
}
