package server

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"llmgate/internal/apierror"
)

func TestLargeBodies_HoldTheirSizeAndWaitInTurn(t *testing.T) {
	if l := newLargeBodies(0, time.Second); l != nil {
		t.Fatal("a cap of 0 is no cap")
	}
	var none *largeBodies
	if rel, err := none.take(context.Background(), 100<<20); rel != nil || err != nil {
		t.Fatalf("no cap: take = %v, %v; want nothing taken", rel != nil, err)
	}
	l := newLargeBodies(3<<20, 50*time.Millisecond)
	if rel, err := l.take(context.Background(), LargeBody-1); rel != nil || err != nil {
		t.Fatalf("a small body: take = %v, %v; want nothing taken", rel != nil, err)
	}
	a, err := l.take(context.Background(), 2<<20)
	if err != nil || a == nil {
		t.Fatalf("2 of 3 MiB free: %v", err)
	}
	// 2 MiB more does not fit: it waits 50 ms, then a 503 saying why.
	_, err = l.take(context.Background(), 2<<20)
	var e *apierror.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Code != "large_bodies_busy" || e.Header.Get("Retry-After") != "1" {
		t.Fatalf("no room: %v; want a 503 large_bodies_busy with Retry-After", err)
	}
	// A waiter gets the room given back while it waits.
	l.wait = time.Minute
	got := make(chan error, 1)
	go func() {
		rel, err := l.take(context.Background(), 2<<20)
		if rel != nil {
			defer rel()
		}
		got <- err
	}()
	a()
	if err := <-got; err != nil {
		t.Fatalf("waiter after the room was given back: %v", err)
	}
	// A body over the whole cap takes all of it, once it is all free.
	all, err := l.take(context.Background(), 10<<20)
	if err != nil {
		t.Fatalf("a body over the cap with the cap free: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := l.take(ctx, 1<<20)
		got <- err
	}()
	cancel()
	if err := <-got; !errors.As(err, &e) || e.Kind != apierror.KindClientClosed {
		t.Fatalf("client gone while waiting: %v; want client closed", err)
	}
	all()
	if rel, err := l.take(context.Background(), 3<<20); err != nil {
		t.Fatalf("all of the cap after release: %v", err)
	} else {
		rel()
	}
}
