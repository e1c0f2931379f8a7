package limit

import (
	"sync"
	"time"
)

// snapshot holds the shared figures of a scope as of its last admission,
// for the local fallback to start from.
type snapshot struct {
	mu       sync.Mutex
	redisAt  int64 // Redis time (ms) of the levels
	at       int64 // local Unix ns of the levels
	rl, tl   float64
	window   string
	spent    int64 // settled + reserved, all replicas
	spentAt  int64 // Redis time (ms) of spent
	hasSpent bool
	// othersPeak is the most other replicas held reserved in flight at
	// this replica's operations since peakAt.
	othersPeak int64
	peakAt     time.Time
	// reqPeak and tokPeak are the most requests and tokens other replicas
	// took from the rate buckets between two of this replica's looks.
	reqPeak, tokPeak     float64
	reqPeakAt, tokPeakAt time.Time
}

// remember keeps the shared figures of the first n scopes (those after a
// refusing one were not read), as of Redis time at (ms): concurrent
// requests return in any order, and only the newest figures are kept.
// From two of its own looks at a rate bucket a replica also learns how
// much the other replicas took in between (what refill does not explain),
// and keeps the peak of that.
func (r *Redis) remember(req *Request, n int, admitted bool, at int64, rl, tl *[MaxScopes]float64, per []any) {
	now := time.Now()
	for i := 0; i < n; i++ {
		s := &req.Scopes[i]
		sp, oth := toInt(per[4*i+2]), toInt(per[4*i+3])
		if s.RPM == 0 && s.TPM == 0 && (s.BudgetNanos == 0 || sp < 0) {
			continue
		}
		sn := r.snap(s.ID)
		sn.mu.Lock()
		if at > sn.redisAt && sn.redisAt > 0 {
			dt := float64(at - sn.redisAt)
			if s.RPM > 0 {
				before := rl[i]
				if admitted {
					before++
				}
				took := min(float64(s.RPM), sn.rl+dt*float64(s.RPM)/60000) - before
				notePeak(&sn.reqPeak, &sn.reqPeakAt, took, now)
			}
			if s.TPM > 0 {
				before := tl[i]
				if admitted {
					before += float64(req.Tokens)
				}
				took := min(float64(s.TPM), sn.tl+dt*float64(s.TPM)/60000) - before
				notePeak(&sn.tokPeak, &sn.tokPeakAt, took, now)
			}
		}
		if at >= sn.redisAt {
			if at > sn.redisAt || s.RPM > 0 && rl[i] < sn.rl || s.TPM > 0 && tl[i] < sn.tl {
				sn.at, sn.rl, sn.tl = now.UnixNano(), rl[i], tl[i]
			}
			if s.BudgetNanos > 0 && sp >= 0 {
				sn.keepSpent(at, s.BudgetWindow, sp, oth)
			}
			sn.redisAt = at
		}
		sn.mu.Unlock()
	}
}

// notePeak keeps the largest v seen within peakWindow.
func notePeak(peak *float64, at *time.Time, v float64, now time.Time) {
	if v >= *peak || now.Sub(*at) > peakWindow {
		*peak, *at = max(0, v), now
	}
}

// rememberSpent keeps the budgets' spend a release returned.
func (r *Redis) rememberSpent(l *Lease, at int64, per []any) {
	for i := 0; i < l.N && 2*i+1 < len(per); i++ {
		s := &l.Scopes[i]
		if sp := toInt(per[2*i]); s.BudgetNanos > 0 && sp >= 0 {
			sn := r.snap(s.ID)
			sn.mu.Lock()
			sn.keepSpent(at, s.BudgetWindow, sp, toInt(per[2*i+1]))
			sn.mu.Unlock()
		}
	}
}

// keepSpent records a budget's spend as of Redis time at unless newer is
// known (of figures from the same millisecond the larger is kept), and the
// peak of other replicas' reservations over the last peakWindow.
func (sn *snapshot) keepSpent(at int64, window string, sp, others int64) {
	switch {
	case !sn.hasSpent || window != sn.window || at > sn.spentAt:
		sn.window, sn.spent, sn.spentAt, sn.hasSpent = window, sp, at, true
	case at == sn.spentAt:
		sn.spent = max(sn.spent, sp)
	}
	if now := time.Now(); others >= sn.othersPeak || now.Sub(sn.peakAt) > peakWindow {
		sn.othersPeak, sn.peakAt = others, now
	}
}

// peakWindow is how long the peak of other replicas' reservations in flight
// is remembered (see fallback.budget).
const peakWindow = 10 * time.Second

func (r *Redis) snap(id string) *snapshot {
	v, ok := r.snaps.Load(id)
	if !ok {
		v, _ = r.snaps.LoadOrStore(id, &snapshot{})
	}
	return v.(*snapshot)
}

func (r *Redis) snapshot(id string) (snapshot, bool) {
	v, ok := r.snaps.Load(id)
	if !ok {
		return snapshot{}, false
	}
	sn := v.(*snapshot)
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return snapshot{redisAt: sn.redisAt, at: sn.at, rl: sn.rl, tl: sn.tl, window: sn.window, spent: sn.spent, spentAt: sn.spentAt,
		hasSpent: sn.hasSpent, othersPeak: sn.othersPeak, peakAt: sn.peakAt,
		reqPeak: sn.reqPeak, tokPeak: sn.tokPeak, reqPeakAt: sn.reqPeakAt, tokPeakAt: sn.tokPeakAt}, true
}
