package relay

import "time"

// SetQueueKeepAlive changes the keep-alive timing of queued streaming
// requests for a test and returns the function that restores it.
func SetQueueKeepAlive(first, every time.Duration) (restore func()) {
	f, e := queueKeepAliveFirst, queueKeepAliveEvery
	queueKeepAliveFirst, queueKeepAliveEvery = first, every
	return func() { queueKeepAliveFirst, queueKeepAliveEvery = f, e }
}
