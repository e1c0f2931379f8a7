package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Healthy returns nil while records reach the database, else why not: the
// database's own check failed (a SQLite file deleted or replaced, a
// PostgreSQL server gone), the last write to it failed (disk full,
// read-only), or the spool cannot be written. Records are kept in the spool
// meanwhile. A gateway's /readyz reports it; the ledger also logs an error
// line every Options.AlarmEvery while it lasts.
func (l *Ledger) Healthy() error { return l.health.err() }

// health is what the ledger knows about its database and spool.
type health struct {
	log   *slog.Logger
	every time.Duration
	spool *Spool

	mu        sync.Mutex
	store     error // the last health check of the database
	write     error // the last write to the database (nil once one succeeds)
	journal   error // the last append to the spool
	badSince  time.Time
	lastAlarm time.Time
}

func (h *health) init(log *slog.Logger, every time.Duration, sp *Spool) {
	h.log, h.every, h.spool = log, every, sp
}

func (h *health) checked(err error) {
	h.mu.Lock()
	h.store = err
	h.mu.Unlock()
}

func (h *health) wrote(err error) {
	h.mu.Lock()
	h.write = err
	h.mu.Unlock()
}

func (h *health) journaled(err error) {
	h.mu.Lock()
	h.journal = err
	h.mu.Unlock()
}

func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.errLocked()
}

func (h *health) errLocked() error {
	where := "memory"
	if h.spool != nil {
		where = "the spool"
	}
	switch {
	case h.store != nil:
		return fmt.Errorf("usage database unavailable (records wait in %s): %w", where, h.store)
	case h.write != nil:
		return fmt.Errorf("usage database refuses records (they wait in %s): %w", where, h.write)
	case h.journal != nil:
		return fmt.Errorf("usage spool cannot be written (records are not safe from a crash): %w", h.journal)
	}
	return nil
}

// alarm logs an error line when the ledger turns unhealthy and every
// h.every while it stays so, and one line when it recovers.
func (h *health) alarm(now time.Time) {
	h.mu.Lock()
	err := h.errLocked()
	since, last := h.badSince, h.lastAlarm
	switch {
	case err == nil && !since.IsZero():
		h.badSince, h.lastAlarm = time.Time{}, time.Time{}
	case err != nil && since.IsZero():
		h.badSince, h.lastAlarm = now, now
	case err != nil && now.Sub(last) >= h.every:
		h.lastAlarm = now
	default:
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	if err == nil {
		h.log.Info("usage ledger healthy again: records reach the database", "after", now.Sub(since).Round(time.Millisecond).String())
		return
	}
	attrs := []any{"for", now.Sub(since).Round(time.Second).String()}
	if h.spool != nil {
		attrs = append(attrs, "spool", h.spool.Dir())
	}
	h.log.Error("USAGE LEDGER NOT HEALTHY: "+err.Error(), attrs...)
}

// healthLoop checks the database every interval (when the writer can
// tell) and raises or repeats the alarm, until Close.
func (l *Ledger) healthLoop(interval time.Duration) {
	hc, _ := l.w.(HealthChecker)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stopHealth:
			return
		case <-t.C:
		}
		if hc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			l.health.checked(hc.CheckHealth(ctx))
			cancel()
		}
		l.health.alarm(time.Now())
	}
}
