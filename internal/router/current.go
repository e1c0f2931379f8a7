package router

import "sync/atomic"

// Current holds the routing table being served. The gateway stores each
// new table in it (at start, on a reload, when DNS discovery's answers
// change); the edge loads it once per request, which then runs on that
// table to its end, and the admin views, metrics and engines read it.
type Current struct{ p atomic.Pointer[Table] }

// NewCurrent returns a holder serving t.
func NewCurrent(t *Table) *Current {
	c := &Current{}
	c.p.Store(t)
	return c
}

// Load returns the table being served (nil before the first Store).
func (c *Current) Load() *Table { return c.p.Load() }

// Store makes t the table being served; requests in flight finish on the
// table they started with.
func (c *Current) Store(t *Table) { c.p.Store(t) }
