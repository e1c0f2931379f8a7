package relay

import (
	"context"
	"net/http"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/router"
	"llmgate/internal/sse"
)

// Keep-alive timing while a streaming request waits its turn in a
// deployment's fair queue. The first one goes out only after a wait that a
// client with a short read time-out could notice: until then a request
// that waits its whole queue_timeout still gets a real 429 with
// Retry-After; after it, the status is on the wire and a time-out reaches
// the client as its protocol's error event.
var (
	queueKeepAliveFirst = 10 * time.Second
	queueKeepAliveEvery = 5 * time.Second
)

// anthropicPing is the keep-alive of an Anthropic stream: the event its
// SDKs skip wherever it appears.
var anthropicPing = []byte(`{"type": "ping"}`)

// lane is the request's place in the deployments' fair queues: its key
// (the master key and keyless requests share one lane) weighted by the
// key's priority, and keep-alives for a streaming client while it waits.
func (rl *Relay) lane(w http.ResponseWriter, c *Call) router.Lane {
	l := router.Lane{Weight: keys.DefaultPriority}
	if k := c.Principal.Key; k != nil {
		l.Key, l.Weight = k.ID, k.EffectivePriority()
	}
	l.Wait = func(ctx context.Context, wait func(context.Context) error) error {
		start := time.Now()
		var err error
		if c.Req.Stream {
			err = rl.waitWithKeepAlives(ctx, w, c, wait)
		} else {
			err = wait(ctx)
		}
		if c.t.attemptEnd.IsZero() { // else the time between attempts has it
			c.t.waited += time.Since(start)
		}
		return err
	}
	return l
}

// waitWithKeepAlives runs wait; if it lasts, the client gets the SSE
// headers and then keep-alives (an Anthropic stream a ping event, others
// an SSE comment) until it ends. The headers stay sent for the attempts
// that follow (c.sw): retries and fallbacks still happen, as nothing but
// keep-alives has reached the client, and a final failure becomes the
// protocol's error event.
func (rl *Relay) waitWithKeepAlives(ctx context.Context, w http.ResponseWriter, c *Call, wait func(context.Context) error) error {
	sw, err := keepAliveWhile(w, c.sw, queueKeepAliveFirst, queueKeepAliveEvery, func() error { return wait(ctx) }, func(sw *sse.Writer) {
		if c.Req.Dialect.Anthropic() {
			_ = sw.WriteEvent("ping", anthropicPing)
		} else {
			_ = sw.WriteComment("keep-alive")
		}
	})
	c.sw = sw
	return err
}

// backendDone says the backend has ended its answer: the deployment's
// fair-queue slot goes to the next request now.
func (c *Call) backendDone() {
	if c.answered != nil {
		router.ReleaseSlot(c.answered)
	}
}
