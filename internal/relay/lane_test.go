package relay

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"llmgate/internal/codec"
	"llmgate/internal/keys"
)

func TestLane_KeyIDAndPriorityOrOneSharedLane(t *testing.T) {
	rl := New(Options{})
	req, err := codec.Decode(codec.Chat, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	for _, c := range []struct {
		name   string
		p      keys.Principal
		key    string
		weight int
	}{
		{"key with priority 3", keys.Principal{Key: &keys.Key{ID: "key_a", Priority: 3}}, "key_a", 3},
		{"key without priority", keys.Principal{Key: &keys.Key{ID: "key_b"}}, "key_b", 1},
		{"master key", keys.Principal{Master: true}, "", 1},
	} {
		l := rl.lane(w, &Call{Principal: c.p, Req: req})
		if l.Key != c.key || l.Weight != c.weight || l.Wait == nil {
			t.Errorf("%s: lane %q weight %d (keep-alives %v), want %q weight %d with keep-alives", c.name, l.Key, l.Weight, l.Wait != nil, c.key, c.weight)
		}
	}
	// A queue wait is timed (Server-Timing's wait); only a streaming
	// client gets keep-alives while it lasts.
	defer func(first time.Duration) { queueKeepAliveFirst = first }(queueKeepAliveFirst)
	queueKeepAliveFirst = time.Microsecond
	const held = 2 * time.Millisecond
	plain, _ := codec.Decode(codec.Chat, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	for _, r := range []*codec.Request{plain, req} {
		w := httptest.NewRecorder()
		c := &Call{Principal: keys.Principal{Master: true}, Req: r}
		err := rl.lane(w, c).Wait(context.Background(), func(context.Context) error { <-time.After(held); return nil })
		if err != nil || c.t.waited < held {
			t.Errorf("stream=%v: wait returned %v after %s counted as waiting, want nil and at least %s", r.Stream, err, c.t.waited, held)
		}
		if sent := w.Body.Len() > 0; sent != r.Stream {
			t.Errorf("stream=%v: keep-alives sent while queued = %v (%q)", r.Stream, sent, w.Body.String())
		}
	}
}
