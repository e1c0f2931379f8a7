package relay

import (
	"net/http/httptest"
	"testing"

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
	plain, _ := codec.Decode(codec.Chat, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if l := rl.lane(w, &Call{Principal: keys.Principal{Master: true}, Req: plain}); l.Wait != nil {
		t.Error("a request that does not stream gets keep-alives while queued")
	}
}
