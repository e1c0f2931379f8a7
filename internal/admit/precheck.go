package admit

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/policy"
)

var _ policy.Prechecker = (*Admission)(nil)

// maxPrecheck bounds how long a key's refusal is repeated before its
// body is read: a budget raised by 'llmgate keys update', or a slot freed
// early, is noticed within it.
const maxPrecheck = 5 * time.Second

// refused is a key's last refusal and until when it holds.
type refused struct {
	err   *apierror.Error
	until time.Time
}

// remember notes a key-scope refusal so that Precheck repeats it, until
// its Retry-After (at most maxPrecheck; a concurrency refusal, which has
// none, for a quarter of a second).
func (a *Admission) remember(keyID string, e *apierror.Error, retry time.Duration) {
	if retry <= 0 {
		retry = 250 * time.Millisecond
	}
	a.refusals.Store(keyID, refused{err: e, until: a.now().Add(min(retry, maxPrecheck))})
}

// Precheck implements policy.Prechecker: a key refused for its own rate,
// concurrency or budget moments ago is refused again without reading the
// body. It asks no limiter, so it costs a map lookup.
func (a *Admission) Precheck(p keys.Principal) error {
	if p.Master || p.Key == nil {
		return nil
	}
	v, ok := a.refusals.Load(p.Key.ID)
	if !ok {
		return nil
	}
	r := v.(refused)
	left := r.until.Sub(a.now())
	if left <= 0 {
		a.refusals.CompareAndDelete(p.Key.ID, v)
		return nil
	}
	e := r.err.Clone()
	if e.Header == nil {
		e.Header = http.Header{}
	}
	if ra := e.Header.Get("Retry-After"); ra == "" {
		e.Header.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(left.Seconds())), 10))
	}
	return e
}
