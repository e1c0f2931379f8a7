package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"llmgate/internal/store"
)

func newSession(n int, keyID string, master bool, created time.Time, ttl time.Duration) store.Session {
	return store.Session{IDHash: fmt.Sprintf("%064x", n), CSRF: fmt.Sprintf("csrf-%d", n), Master: master, KeyID: keyID,
		KeyHash: map[bool]string{false: fmt.Sprintf("%064x", 1000+n)}[master], CreatedAt: created, ExpiresAt: created.Add(ttl)}
}

func testSessionsCreateGetDelete(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli())
	user := newSession(1, "key-1", false, now, time.Hour)
	admin := newSession(2, "", true, now, time.Hour)
	for _, x := range []store.Session{user, admin} {
		if err := s.CreateSession(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetSession(ctx, user.IDHash, now)
	if err != nil || got == nil {
		t.Fatalf("get user session: %v %v", got, err)
	}
	if got.CSRF != user.CSRF || got.Master || got.KeyID != "key-1" || got.KeyHash != user.KeyHash ||
		!got.CreatedAt.Equal(user.CreatedAt) || !got.ExpiresAt.Equal(user.ExpiresAt) {
		t.Fatalf("session did not round-trip: %+v, want %+v", got, user)
	}
	if got, err := s.GetSession(ctx, admin.IDHash, now); err != nil || got == nil || !got.Master || got.KeyID != "" {
		t.Fatalf("master session: %+v %v", got, err)
	}
	if got, err := s.GetSession(ctx, fmt.Sprintf("%064x", 99), now); err != nil || got != nil {
		t.Fatalf("unknown session: %+v %v, want nil, nil", got, err)
	}
	// Expired sessions are not returned, even before they are purged.
	if got, err := s.GetSession(ctx, user.IDHash, user.ExpiresAt); err != nil || got != nil {
		t.Fatalf("session at its expiry: %+v %v, want nil", got, err)
	}
	if err := s.CreateSession(ctx, user); err == nil {
		t.Error("a second session with the same cookie hash was stored")
	}
	if err := s.DeleteSession(ctx, user.IDHash); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSession(ctx, user.IDHash, now); err != nil || got != nil {
		t.Fatalf("deleted session: %+v %v", got, err)
	}
	if got, _ := s.GetSession(ctx, admin.IDHash, now); got == nil {
		t.Fatal("deleting one session deleted another")
	}
}

func testSessionsKeyPurgeTrim(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli())
	var all []store.Session
	for i := 0; i < 5; i++ { // key-a: five sessions, one a millisecond apart
		all = append(all, newSession(i, "key-a", false, now.Add(time.Duration(i)*time.Millisecond), time.Hour))
	}
	all = append(all, newSession(10, "key-b", false, now, time.Hour), newSession(11, "", true, now, time.Hour),
		newSession(12, "key-b", false, now.Add(-2*time.Hour), time.Hour)) // expired an hour ago
	for _, x := range all {
		if err := s.CreateSession(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PurgeSessions(ctx, now); err != nil || n != 1 {
		t.Fatalf("purge: %d %v, want the one expired session", n, err)
	}
	if n, err := s.TrimSessions(ctx, "key-a", false, 2); err != nil || n != 3 {
		t.Fatalf("trim key-a to 2: %d %v, want 3 deleted", n, err)
	}
	for i, x := range all[:5] {
		got, err := s.GetSession(ctx, x.IDHash, now)
		if err != nil {
			t.Fatal(err)
		}
		if keep := i >= 3; (got != nil) != keep {
			t.Errorf("key-a session %d present=%v, want %v (the newest two are kept)", i, got != nil, keep)
		}
	}
	if n, err := s.TrimSessions(ctx, "", true, 0); err != nil || n != 1 {
		t.Fatalf("trim master sessions to 0: %d %v", n, err)
	}
	if n, err := s.DeleteKeySessions(ctx, "key-a"); err != nil || n != 2 {
		t.Fatalf("delete key-a sessions: %d %v, want 2", n, err)
	}
	if got, _ := s.GetSession(ctx, all[5].IDHash, now); got == nil {
		t.Fatal("deleting key-a's sessions ended key-b's")
	}
}
