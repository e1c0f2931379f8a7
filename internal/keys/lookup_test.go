package keys_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/store/sqlite"
)

// A key created by another process (llmgate keys create opens the
// database itself) works on its first request, with no Watch running and
// no wait.
func TestVerifier_KeyCreatedElsewhereWorksOnItsFirstRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	gw, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	v := newVerifier(t, gw, "")
	cli, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	k, secret, err := keys.Issue(ctx, cli, keys.Key{Name: "script"})
	cli.Close()
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(secret)
	if err != nil || p.Key.ID != k.ID {
		t.Fatalf("first request with a new key: %+v %v, want key %s", p, err, k.ID)
	}
}

// countingStore counts the queries an unknown key can cause.
type countingStore struct {
	memStore
	versions, lists atomic.Int64
	block           chan struct{} // when set, KeysVersion waits on it
}

func (c *countingStore) KeysVersion(ctx context.Context) (int64, error) {
	c.versions.Add(1)
	if c.block != nil {
		<-c.block
	}
	return c.memStore.KeysVersion(ctx)
}

func (c *countingStore) ListKeys(ctx context.Context) ([]*keys.Key, error) {
	c.lists.Add(1)
	return c.memStore.ListKeys(ctx)
}

func flood(v *keys.Verifier, goroutines, each int) error {
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := v.Verify(fmt.Sprintf("sk-lg-random-%d-%d", g, i)); !errors.Is(err, keys.ErrNotFound) {
					errs <- fmt.Errorf("random key: %v, want ErrNotFound", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// A flood of random keys costs at most the lookup budget in store
// queries: UnknownKeyBurst at once, UnknownKeyLookups per second after.
func TestVerifier_RandomKeysCauseBoundedStoreQueries(t *testing.T) {
	st := &countingStore{}
	_, _, _ = keys.Issue(ctx, st, keys.Key{Name: "real"})
	v := newVerifier(t, st, "")
	now := time.Now()
	var mu sync.Mutex
	keys.SetClock(v, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	v0, l0 := st.versions.Load(), st.lists.Load()
	if err := flood(v, 32, 100); err != nil {
		t.Fatal(err)
	}
	first := st.versions.Load() - v0
	if first < 1 || first > keys.UnknownKeyBurst || st.lists.Load() != l0 {
		t.Fatalf("3200 random keys caused %d version queries and %d reloads; want 1..%d and none",
			first, st.lists.Load()-l0, keys.UnknownKeyBurst)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if err := flood(v, 32, 100); err != nil {
		t.Fatal(err)
	}
	second := st.versions.Load() - v0 - first
	if second > keys.UnknownKeyLookups {
		t.Fatalf("a second later, 3200 more random keys caused %d version queries; want at most %d", second, keys.UnknownKeyLookups)
	}
	t.Logf("6400 random keys over 1s of clock: %d + %d store queries", first, second)
}

// Unknown keys arriving while a lookup runs share the next one: 50 at once
// cost two queries, not 50.
func TestVerifier_ConcurrentUnknownKeysShareOneLookup(t *testing.T) {
	st := &countingStore{}
	v := newVerifier(t, st, "")
	st.block = make(chan struct{})
	v0 := st.versions.Load()
	done := make(chan error, 50)
	go func() { _, err := v.Verify("sk-lg-first"); done <- err }()
	waitUntil(t, "the first lookup runs", func() bool { return st.versions.Load() == v0+1 })
	for i := 0; i < 49; i++ {
		go func() { _, err := v.Verify(fmt.Sprint("sk-lg-other-", i)); done <- err }()
	}
	waitUntil(t, "49 callers wait for the next lookup", func() bool { return keys.LookupWaiters(v) == 49 })
	close(st.block)
	for i := 0; i < 50; i++ {
		if err := <-done; !errors.Is(err, keys.ErrNotFound) {
			t.Fatalf("unknown key: %v", err)
		}
	}
	if n := st.versions.Load() - v0; n != 2 {
		t.Fatalf("%d store lookups for 50 concurrent unknown keys, want 2", n)
	}
}
