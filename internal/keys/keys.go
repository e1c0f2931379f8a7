// Package keys issues and verifies virtual API keys. A key's secret is shown
// once; only its SHA-256 hash is stored, and lookups compare hashes in
// constant time.
package keys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"path"
	"strings"
	"time"
)

// Prefix starts every key issued by llmgate.
const Prefix = "sk-lg-"

// Key is a virtual API key as stored. It never holds the secret.
type Key struct {
	ID      string
	Name    string
	Owner   string
	Hash    string   // hex SHA-256 of the secret
	Hint    string   // "sk-lg-…abcd": enough to recognise, useless to use
	Models  []string // allowed public models as glob patterns; empty = all
	RPM     int      // requests per minute; 0 = unlimited
	TPM     int      // tokens per minute; 0 = unlimited
	MaxConc int      // concurrent requests; 0 = unlimited
	// Priority weighs the key's turns in a deployment's fair queue: a key
	// of priority 3 gets three turns to one of priority 1 while both
	// wait. 0 means DefaultPriority.
	Priority  int
	BudgetUSD float64 // 0 = no budget
	// BudgetPeriod is "", "daily" or "monthly".
	BudgetPeriod string
	Metadata     map[string]string
	// Objective names the service class of the key's requests for an
	// InferencePool's endpoint picker (an InferenceObjective), sent as
	// x-gateway-inference-objective to backends with inference_extension;
	// "" sends none.
	Objective string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// DefaultPriority is the fair-queue weight of a key without one, and of
// requests made with the master key.
const DefaultPriority = 1

// MaxPriority bounds a key's priority: beyond it one key would starve the
// others in every queue for all practical purposes.
const MaxPriority = 100

// EffectivePriority is the key's fair-queue weight (DefaultPriority when
// unset).
func (k *Key) EffectivePriority() int {
	if k.Priority <= 0 {
		return DefaultPriority
	}
	return k.Priority
}

// Errors returned by verification.
var (
	ErrNotFound = errors.New("key not found")
	ErrRevoked  = errors.New("key revoked")
	ErrExpired  = errors.New("key expired")
	// ErrUnavailable: the key is not among those in memory, and the store
	// that would know a key created moments ago could not be asked. It
	// wraps the store's error, for the log.
	ErrUnavailable = errors.New("key store unavailable")
)

// Allows reports whether the key may use the public model name.
func (k *Key) Allows(model string) bool {
	if len(k.Models) == 0 {
		return true
	}
	for _, p := range k.Models {
		if p == model || p == "*" {
			return true
		}
		if globMatch(p, model) {
			return true
		}
	}
	return false
}

// globMatch is path.Match where '*' and '?' also match '/': model names
// such as "Qwen/Qwen2.5-7B-Instruct" are names, not paths, and a user who
// allows 'Qwen*' means those too. A malformed pattern matches nothing.
func globMatch(pattern, name string) bool {
	if strings.Contains(pattern, "/") || strings.Contains(name, "/") {
		pattern = strings.ReplaceAll(pattern, "/", "\x00")
		name = strings.ReplaceAll(name, "/", "\x00")
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

// Usable returns nil when the key is neither revoked nor expired at now.
func (k *Key) Usable(now time.Time) error {
	if k.RevokedAt != nil {
		return ErrRevoked
	}
	if k.ExpiresAt != nil && !now.Before(*k.ExpiresAt) {
		return ErrExpired
	}
	return nil
}

// Generate returns a new random secret with the sk-lg- prefix (192 bits).
func Generate() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// NewID returns a short random identifier for a key record.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "key_" + hex.EncodeToString(b[:])
}

// Hash returns the hex SHA-256 of a secret.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// HashBytes returns the raw SHA-256 of a secret, for map lookups without
// allocating a hex string on the hot path.
func HashBytes(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Hint returns a recognisable but useless fragment of a secret.
func Hint(secret string) string {
	if strings.HasPrefix(secret, Prefix) && len(secret) >= len(Prefix)+16 {
		return Prefix + "…" + secret[len(secret)-4:]
	}
	// Someone else's key (or a password typed by mistake): at most its
	// last 4 characters, and only when that is a small share of it, since
	// hints are logged.
	if len(secret) >= 32 {
		return "…" + secret[len(secret)-4:]
	}
	return "…"
}

// Equal compares two hashes in constant time.
func Equal(a, b [32]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// Store is what the keys package needs from persistence.
type Store interface {
	CreateKey(ctx context.Context, k *Key) error
	ListKeys(ctx context.Context) ([]*Key, error)
	GetKey(ctx context.Context, id string) (*Key, error)
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// KeysVersion returns a number that changes whenever any key changes,
	// so verifiers on every replica know when to reload.
	KeysVersion(ctx context.Context) (int64, error)
	GetSetting(ctx context.Context, name string) (string, error)
	SetSetting(ctx context.Context, name, value string) error
}
