package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"llmgate/internal/store"
)

func newResponse(id, prev, keyID string, created time.Time, ttl time.Duration) store.StoredResponse {
	return store.StoredResponse{ID: id, KeyID: keyID, Model: "m", PreviousID: prev,
		Input:     json.RawMessage(fmt.Sprintf(`[{"role":"user","content":"question %s"}]`, id)),
		Output:    json.RawMessage(fmt.Sprintf(`[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"answer %s"}]}]`, id)),
		Body:      json.RawMessage(fmt.Sprintf(`{"id":%q,"object":"response"}`, id)),
		CreatedAt: created, ExpiresAt: created.Add(ttl)}
}

func chainIDs(c []store.StoredResponse) []string {
	var ids []string
	for _, r := range c {
		ids = append(ids, r.ID)
	}
	return ids
}

func testResponsesChain(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli())
	a := newResponse("resp_a", "", "key-1", now, time.Hour)
	b := newResponse("resp_b", "resp_a", "key-1", now.Add(time.Second), time.Hour)
	c := newResponse("resp_c", "resp_b", "key-1", now.Add(2*time.Second), 3*time.Hour)
	other := newResponse("resp_x", "", "key-2", now, time.Hour)
	for _, r := range []store.StoredResponse{a, b, c, other} {
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetResponse(ctx, "resp_b", "key-1", now)
	if err != nil || got == nil {
		t.Fatalf("get: %+v %v", got, err)
	}
	if got.PreviousID != "resp_a" || got.Model != "m" || string(got.Input) != string(b.Input) || string(got.Output) != string(b.Output) ||
		string(got.Body) != string(b.Body) || !got.CreatedAt.Equal(b.CreatedAt) {
		t.Fatalf("response did not round-trip: %+v", got)
	}
	if got, err := s.GetResponse(ctx, "resp_b", "key-2", now); err != nil || got != nil {
		t.Fatalf("another key's response: %+v %v, want nil", got, err)
	}
	chain, err := s.ResponseChain(ctx, "resp_c", "key-1", now)
	if err != nil || fmt.Sprint(chainIDs(chain)) != "[resp_a resp_b resp_c]" {
		t.Fatalf("chain of resp_c: %v %v, want [resp_a resp_b resp_c]", chainIDs(chain), err)
	}
	if string(chain[0].Input) != string(a.Input) || string(chain[2].Output) != string(c.Output) {
		t.Fatalf("chain items did not round-trip: %s %s", chain[0].Input, chain[2].Output)
	}
	if chain, err := s.ResponseChain(ctx, "resp_c", "key-2", now); err != nil || chain != nil {
		t.Fatalf("another key's chain: %v %v, want nil", chainIDs(chain), err)
	}
	if chain, err := s.ResponseChain(ctx, "resp_none", "key-1", now); err != nil || chain != nil {
		t.Fatalf("unknown response: %v %v, want nil", chainIDs(chain), err)
	}
	// Continuing resp_b extended resp_a's expiry to resp_c's: two hours on,
	// when a and b would have expired by their own, the chain is whole.
	later := now.Add(2 * time.Hour)
	if chain, err := s.ResponseChain(ctx, "resp_c", "key-1", later); err != nil || len(chain) != 3 {
		t.Fatalf("chain two hours on: %v %v, want all three (expiry extended)", chainIDs(chain), err)
	}
	if got, err := s.GetResponse(ctx, "resp_x", "key-2", later); err != nil || got != nil {
		t.Fatalf("expired response: %+v %v, want nil", got, err)
	}
	if id := "resp_dup"; true {
		if err := s.PutResponse(ctx, newResponse(id, "", "key-1", now, time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutResponse(ctx, newResponse(id, "", "key-2", now, time.Hour)); err == nil {
			t.Fatal("a second response with the same id was accepted")
		}
	}
}

func testResponsesBrokenDeletePurge(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli())
	for _, r := range []store.StoredResponse{
		newResponse("resp_1", "", "k", now, time.Hour),
		newResponse("resp_2", "resp_1", "k", now, time.Hour),
		newResponse("resp_3", "resp_2", "k", now, time.Hour),
	} {
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.DeleteResponse(ctx, "resp_2", "other"); err != nil || ok {
		t.Fatalf("delete by another key: %v %v, want false", ok, err)
	}
	if ok, err := s.DeleteResponse(ctx, "resp_2", "k"); err != nil || !ok {
		t.Fatalf("delete: %v %v, want true", ok, err)
	}
	if ok, _ := s.DeleteResponse(ctx, "resp_2", "k"); ok {
		t.Fatal("a deleted response was deleted again")
	}
	if _, err := s.ResponseChain(ctx, "resp_3", "k", now); !errors.Is(err, store.ErrBrokenChain) {
		t.Fatalf("chain with a deleted middle: %v, want ErrBrokenChain", err)
	}
	if chain, err := s.ResponseChain(ctx, "resp_1", "k", now); err != nil || len(chain) != 1 {
		t.Fatalf("chain of the first: %v %v", chainIDs(chain), err)
	}
	n, err := s.PurgeResponses(ctx, now.Add(2*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("purge: %d %v, want 2", n, err)
	}
	if got, err := s.GetResponse(ctx, "resp_1", "k", now); err != nil || got != nil {
		t.Fatalf("purged response: %+v %v", got, err)
	}
}
