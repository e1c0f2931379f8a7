package limit

import "time"

// ForgetHeldSharesNow makes the shares r holds for replicas that never
// came back expire now rather than forgetAfter after they were taken, as
// if that minute had passed.
func ForgetHeldSharesNow(r *Redis) {
	r.gate.Lock()
	r.holdUntil = time.Now().Add(-time.Millisecond)
	r.gate.Unlock()
}
