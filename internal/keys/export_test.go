package keys

import "time"

// SetClock replaces the verifier's clock.
func SetClock(v *Verifier, now func() time.Time) { v.now = now }

// LookupWaiters returns the number of callers waiting for the next store
// lookup of unknown keys.
func LookupWaiters(v *Verifier) int {
	v.lookups.mu.Lock()
	defer v.lookups.mu.Unlock()
	if v.lookups.next == nil {
		return 0
	}
	return v.lookups.next.waiters
}
