package usage

import (
	"context"
	"log/slog"
	"time"
)

// Retainer deletes raw ledger records older than a time. Hourly rollups are
// kept, so long-range summaries stay available after raw rows are gone.
type Retainer interface {
	DeleteUsageBefore(ctx context.Context, t time.Time) (int64, error)
}

// RunRetention deletes raw records older than keep, once at start and then
// every interval, until ctx ends. keep <= 0 keeps everything.
func RunRetention(ctx context.Context, r Retainer, keep, interval time.Duration, log *slog.Logger) {
	if keep <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := r.DeleteUsageBefore(ctx, time.Now().Add(-keep))
		if err != nil && ctx.Err() == nil {
			log.Warn("usage retention failed; will retry", "err", err)
		} else if n > 0 {
			log.Info("usage retention deleted raw records (hourly rollups kept)", "records", n, "older_than", keep.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
