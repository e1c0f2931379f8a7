package keys

import (
	"context"
	"sync"
	"time"
)

// Unknown keys. The verifier answers from memory, reloading when the
// store's key version moves (Watch polls it every 500ms). A key created a
// moment ago by another process (llmgate keys create, the admin API on
// another replica) is not in memory yet, so before answering "unknown" the
// verifier asks the store whether the key version moved and reloads if so.
// Those questions are shared and bounded, so random keys cannot turn into
// database load:
//
//   - one store lookup at a time: callers that arrive while one runs wait
//     for the next, which starts when it ends, and share it (a lookup that
//     began before a caller arrived might not see the caller's key, so
//     callers never join a running one);
//   - at most UnknownKeyLookups per second (burst UnknownKeyBurst); past
//     that, unknown keys are answered from memory until tokens refill, and
//     Watch still picks up new keys within its interval.
const (
	UnknownKeyLookups = 10 // store lookups per second for unknown keys
	UnknownKeyBurst   = 10
	lookupTimeout     = 2 * time.Second
)

// lookups coordinates store lookups for unknown keys.
type lookups struct {
	mu      sync.Mutex
	running bool    // a goroutine is running lookups
	next    *flight // the lookup callers arriving now will share
	tokens  float64
	last    time.Time
	rate    float64
	burst   float64
}

// flight is one store lookup and the callers that share it.
type flight struct {
	done    chan struct{}
	waiters int
	err     error // the store's error, set before done is closed
}

// lookupUnknown waits for a store lookup that starts after the call (or
// is skipped for want of budget), and returns the store's error if it
// failed.
func (v *Verifier) lookupUnknown() error {
	l := &v.lookups
	l.mu.Lock()
	f := l.next
	if f == nil {
		f = &flight{done: make(chan struct{})}
		l.next = f
	}
	f.waiters++
	if !l.running {
		l.running = true
		go v.runLookups()
	}
	l.mu.Unlock()
	<-f.done
	return f.err
}

// runLookups runs the pending lookup, then the one callers queued
// meanwhile, until none is pending.
func (v *Verifier) runLookups() {
	l := &v.lookups
	for {
		l.mu.Lock()
		f := l.next
		if f == nil {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.next = nil
		allowed := l.take(v.now())
		l.mu.Unlock()
		if allowed {
			f.err = v.checkVersion()
		}
		close(f.done)
	}
}

// take spends a token of the lookup budget if there is one.
func (l *lookups) take(now time.Time) bool {
	if l.last.IsZero() {
		l.tokens = l.burst
	} else if d := now.Sub(l.last); d > 0 {
		l.tokens = min(l.burst, l.tokens+d.Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// checkVersion reloads the keys when the store's version moved, and
// returns the store's error if it could not tell.
func (v *Verifier) checkVersion() error {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	ver, err := v.store.KeysVersion(ctx)
	if err != nil {
		if v.log != nil {
			v.log.Warn("key lookup for an unknown key failed: keys not loaded yet are refused until the database answers", "err", err)
		}
		return err
	}
	if ver == v.ver.Load() {
		return nil
	}
	if err := v.Reload(ctx); err != nil {
		if v.log != nil {
			v.log.Warn("key reload failed", "err", err)
		}
		return err
	}
	return nil
}
