package store

import (
	"context"
	"time"
)

// Session is one signed-in web console browser, shared by every replica
// through the database. Only the SHA-256 of the cookie value is stored, never
// the cookie itself, and never a key's secret.
type Session struct {
	// IDHash is the hex SHA-256 of the session cookie's value.
	IDHash string
	// CSRF is the token state-changing console requests must carry.
	CSRF string
	// Master is true for a master-key session; KeyID is then empty.
	Master bool
	// KeyID is the virtual key signed in with.
	KeyID string
	// KeyHash is the key's stored hash at sign-in (the same value as
	// api_keys.hash): a rotated key no longer matches, ending the session.
	KeyHash   string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Sessions stores console sessions.
type Sessions interface {
	// CreateSession stores a new session.
	CreateSession(ctx context.Context, s Session) error
	// GetSession returns the session with this cookie hash if it has not
	// expired at now, or nil.
	GetSession(ctx context.Context, idHash string, now time.Time) (*Session, error)
	// DeleteSession ends one session.
	DeleteSession(ctx context.Context, idHash string) error
	// DeleteKeySessions ends every session of a key and reports how many.
	DeleteKeySessions(ctx context.Context, keyID string) (int64, error)
	// PurgeSessions deletes sessions expired at now and reports how many.
	PurgeSessions(ctx context.Context, now time.Time) (int64, error)
	// TrimSessions deletes the oldest sessions of a key (or, with master,
	// of the master key) beyond the newest keep, and reports how many.
	TrimSessions(ctx context.Context, keyID string, master bool, keep int) (int64, error)
}
