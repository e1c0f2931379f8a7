package keys

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Verifier authenticates presented secrets against the master key and the
// stored virtual keys. It keeps every key in memory, indexed by hash, and
// reloads them when the store's version changes, so the hot path never
// touches the database.
type Verifier struct {
	store  Store
	master atomic.Pointer[[32]byte]
	keys   atomic.Pointer[map[[32]byte]*Key]
	ver    atomic.Int64
	mu     sync.Mutex // serializes reloads
	now    func() time.Time
	log    *slog.Logger

	lookups lookups // store lookups for unknown keys (lookup.go)
}

// Principal is who a request authenticated as.
type Principal struct {
	Master bool
	Key    *Key // nil for the master key
}

// KeyID returns the ledger identity of the principal.
func (p Principal) KeyID() string {
	if p.Master {
		return "master"
	}
	return p.Key.ID
}

// NewVerifier loads keys from store. masterHash is the SHA-256 of the
// master key; the zero value disables master access.
func NewVerifier(ctx context.Context, store Store, masterHash [32]byte, log *slog.Logger) (*Verifier, error) {
	v := &Verifier{store: store, now: time.Now, log: log}
	v.lookups.rate, v.lookups.burst = UnknownKeyLookups, UnknownKeyBurst
	v.master.Store(&masterHash)
	empty := map[[32]byte]*Key{}
	v.keys.Store(&empty)
	if err := v.Reload(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// Reload rereads all keys from the store.
func (v *Verifier) Reload(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	ver, err := v.store.KeysVersion(ctx)
	if err != nil {
		return fmt.Errorf("read key version: %w", err)
	}
	list, err := v.store.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("load keys: %w", err)
	}
	m := make(map[[32]byte]*Key, len(list))
	for _, k := range list {
		var h [32]byte
		if _, err := decodeHex(h[:], k.Hash); err != nil {
			continue
		}
		m[h] = k
	}
	v.keys.Store(&m)
	v.ver.Store(ver)
	return nil
}

// Watch reloads keys whenever the store's version moves, checking every
// interval, until ctx ends. It is how a revoke on one replica reaches others.
func (v *Verifier) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ver, err := v.store.KeysVersion(ctx)
		if err != nil {
			if ctx.Err() == nil && v.log != nil {
				v.log.Warn("key refresh failed", "err", err)
			}
			continue
		}
		if ver != v.ver.Load() {
			if err := v.Reload(ctx); err != nil && v.log != nil {
				v.log.Warn("key reload failed", "err", err)
			}
		}
	}
}

// MasterHash returns the hex SHA-256 of the master key this verifier
// accepts, "" when master access is off. The console binds master sessions
// to it, so a changed master key ends them.
func (v *Verifier) MasterHash() string {
	m := v.master.Load()
	if m == nil || *m == ([32]byte{}) {
		return ""
	}
	return hex.EncodeToString(m[:])
}

// Verify returns the principal for a presented secret. A secret not in
// memory is looked up in the store first (see lookup.go), so a key created
// a moment ago by another process works on its first request; when that
// lookup fails, the error wraps ErrUnavailable (the key may exist).
func (v *Verifier) Verify(secret string) (Principal, error) {
	h := HashBytes(secret)
	if m := v.master.Load(); m != nil && *m != ([32]byte{}) && Equal(h, *m) {
		return Principal{Master: true}, nil
	}
	k, ok := (*v.keys.Load())[h]
	if !ok {
		err := v.lookupUnknown()
		if k, ok = (*v.keys.Load())[h]; !ok {
			if err != nil {
				return Principal{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			return Principal{}, ErrNotFound
		}
	}
	// The map lookup found the hash; compare again in constant time so
	// correctness never rests on map internals.
	var stored [32]byte
	if _, err := decodeHex(stored[:], k.Hash); err != nil || !Equal(h, stored) {
		return Principal{}, ErrNotFound
	}
	if err := k.Usable(v.now()); err != nil {
		return Principal{}, err
	}
	return Principal{Key: k}, nil
}

func decodeHex(dst []byte, s string) (int, error) {
	if len(s) != 2*len(dst) {
		return 0, errors.New("bad hash length")
	}
	for i := range dst {
		hi, ok1 := fromHex(s[2*i])
		lo, ok2 := fromHex(s[2*i+1])
		if !ok1 || !ok2 {
			return 0, errors.New("bad hex")
		}
		dst[i] = hi<<4 | lo
	}
	return len(dst), nil
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
