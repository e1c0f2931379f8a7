package keys_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/testenv"
)

// memStore is a keys.Store and keys.Updater in memory.
type memStore struct {
	mu   sync.Mutex
	keys []*keys.Key
	ver  int64
}

func (m *memStore) CreateKey(_ context.Context, k *keys.Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *k
	m.keys = append(m.keys, &c)
	m.ver++
	return nil
}

func (m *memStore) ListKeys(context.Context) ([]*keys.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*keys.Key, len(m.keys))
	for i, k := range m.keys {
		c := *k
		out[i] = &c
	}
	return out, nil
}

func (m *memStore) GetKey(_ context.Context, id string) (*keys.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		if k.ID == id {
			c := *k
			return &c, nil
		}
	}
	return nil, keys.ErrNotFound
}

func (m *memStore) RevokeKey(_ context.Context, id string, at time.Time) error {
	return m.change(id, func(k *keys.Key) { k.RevokedAt = &at })
}

func (m *memStore) UpdateKey(_ context.Context, u *keys.Key) error {
	return m.change(u.ID, func(k *keys.Key) { *k = *u })
}

func (m *memStore) RotateKey(_ context.Context, id, hash, hint string) error {
	return m.change(id, func(k *keys.Key) { k.Hash, k.Hint = hash, hint })
}

func (m *memStore) change(id string, f func(*keys.Key)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		if k.ID == id {
			f(k)
			m.ver++
			return nil
		}
	}
	return keys.ErrNotFound
}

func (m *memStore) KeysVersion(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ver, nil
}
func (m *memStore) GetSetting(context.Context, string) (string, error) { return "", nil }
func (m *memStore) SetSetting(context.Context, string, string) error   { return nil }

var ctx = context.Background()

func newVerifier(t *testing.T, st keys.Store, master string) *keys.Verifier {
	t.Helper()
	var mh [32]byte
	if master != "" {
		mh = keys.HashBytes(master)
	}
	v, err := keys.NewVerifier(ctx, st, mh, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestGenerate_FormatAndUniqueness(t *testing.T) {
	re := regexp.MustCompile(`^sk-lg-[A-Za-z0-9_-]{32}$`) // 24 random bytes, URL-safe base64
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		s, err := keys.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(s) {
			t.Fatalf("secret %q is not sk-lg- + 32 URL-safe characters", s)
		}
		if seen[s] {
			t.Fatalf("secret repeated after %d", i)
		}
		seen[s] = true
	}
	if id := keys.NewID(); !regexp.MustCompile(`^key_[0-9a-f]{12}$`).MatchString(id) {
		t.Fatalf("id %q", id)
	}
}

func TestHash_IsHexSHA256(t *testing.T) {
	// FIPS 180-2 test vector.
	if got := keys.Hash("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("Hash(abc) = %s", got)
	}
	s := "sk-lg-example"
	sum := sha256.Sum256([]byte(s))
	if keys.HashBytes(s) != sum || keys.Hash(s) != hex.EncodeToString(sum[:]) {
		t.Fatal("Hash and HashBytes disagree with SHA-256")
	}
	if !keys.Equal(keys.HashBytes(s), sum) || keys.Equal(keys.HashBytes(s), keys.HashBytes(s+"x")) {
		t.Fatal("Equal")
	}
}

func TestHint_RecognisableButUseless(t *testing.T) {
	for secret, want := range map[string]string{
		"sk-lg-abcdefghijklmnopqrstuvwxyz012345": "sk-lg-…2345",
		"sk-proj-abcdefghijklmnopqrstuvwxyz":     "…wxyz", // someone else's key
		"sk-proj-abcdefghijklmnop":               "…",     // too short to show any of it
		"hunter2-but-longer":                     "…",
		"sk-lg-short":                            "…",
		"short":                                  "…",
		"0123456789":                             "…",
	} {
		if got := keys.Hint(secret); got != want {
			t.Errorf("Hint(%q) = %q, want %q", secret, got, want)
		}
	}
}

// Issue stores only the hash and the hint: the secret is nowhere in the
// record, nor in the database file.
func TestIssue_PlaintextNeverStored(t *testing.T) {
	st := &memStore{}
	k, secret, err := keys.Issue(ctx, st, keys.Key{Name: "app", Models: []string{"qwen*"}, Metadata: map[string]string{"env": "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, keys.Prefix) || k.Hash != keys.Hash(secret) || k.Hint != keys.Hint(secret) || k.CreatedAt.IsZero() {
		t.Fatalf("issued %+v", k)
	}
	stored, _ := st.GetKey(ctx, k.ID)
	if s := fmt.Sprintf("%+v", *stored); strings.Contains(s, secret) || strings.Contains(s, secret[len(keys.Prefix):len(secret)-4]) {
		t.Fatalf("stored record holds the secret: %s", s)
	}

	// The same through the SQLite store: the file never holds the secret.
	path := filepath.Join(t.TempDir(), "keys.db")
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err = keys.Issue(ctx, db, keys.Key{Name: "db"})
	if err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, db, "")
	if p, err := v.Verify(secret); err != nil || p.Key.Name != "db" {
		t.Fatalf("issued key does not verify: %v", err)
	}
	db.Close()
	var raw []byte
	for _, f := range []string{path, path + "-wal"} {
		b, _ := os.ReadFile(f)
		raw = append(raw, b...)
	}
	if bytes.Contains(raw, []byte(secret)) || bytes.Contains(raw, []byte(secret[len(keys.Prefix):])) {
		t.Fatal("the database file holds the secret")
	}
	if !bytes.Contains(raw, []byte(keys.Hash(secret))) {
		t.Fatal("the database file does not hold the key's hash: the check above proves nothing")
	}
}

func TestVerifier_MasterVirtualUnknownRevokedExpired(t *testing.T) {
	st := &memStore{}
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	_, good, _ := keys.Issue(ctx, st, keys.Key{Name: "good"})
	_, later, _ := keys.Issue(ctx, st, keys.Key{Name: "expires-later", ExpiresAt: &future})
	_, gone, _ := keys.Issue(ctx, st, keys.Key{Name: "revoked", RevokedAt: &past})
	_, old, _ := keys.Issue(ctx, st, keys.Key{Name: "expired", ExpiresAt: &past})
	v := newVerifier(t, st, "sk-lg-the-master")

	if p, err := v.Verify("sk-lg-the-master"); err != nil || !p.Master || p.KeyID() != "master" {
		t.Fatalf("master: %+v %v", p, err)
	}
	for secret, name := range map[string]string{good: "good", later: "expires-later"} {
		if p, err := v.Verify(secret); err != nil || p.Master || p.Key.Name != name || p.KeyID() != p.Key.ID {
			t.Fatalf("%s: %+v %v", name, p, err)
		}
	}
	for secret, want := range map[string]error{
		gone: keys.ErrRevoked, old: keys.ErrExpired,
		"sk-lg-never-issued": keys.ErrNotFound, "": keys.ErrNotFound,
		good + " ": keys.ErrNotFound, strings.ToUpper(good): keys.ErrNotFound,
	} {
		if _, err := v.Verify(secret); !errors.Is(err, want) {
			t.Fatalf("Verify(%q) = %v, want %v", keys.Hint(secret), err, want)
		}
	}
}

func TestVerifier_NoMasterKeyMeansNoMasterAccess(t *testing.T) {
	v := newVerifier(t, &memStore{}, "")
	// The zero hash disables master access; no input can hash to it.
	for _, s := range []string{"", "sk-lg-anything"} {
		if p, err := v.Verify(s); err == nil || p.Master {
			t.Fatalf("Verify(%q) = %+v, %v without a master key", s, p, err)
		}
	}
}

// Stores may hand back the hash in upper case; a malformed hash is
// skipped rather than matched.
func TestVerifier_StoredHashForms(t *testing.T) {
	st := &memStore{}
	_ = st.CreateKey(ctx, &keys.Key{ID: "key_upper", Hash: strings.ToUpper(keys.Hash("sk-lg-upper"))})
	_ = st.CreateKey(ctx, &keys.Key{ID: "key_bad", Hash: "not-hex"})
	_ = st.CreateKey(ctx, &keys.Key{ID: "key_short", Hash: keys.Hash("sk-lg-short")[:10]})
	v := newVerifier(t, st, "")
	if p, err := v.Verify("sk-lg-upper"); err != nil || p.Key.ID != "key_upper" {
		t.Fatalf("upper-case hash: %v", err)
	}
	if _, err := v.Verify("sk-lg-short"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("truncated hash matched: %v", err)
	}
}

func TestUsable_ExpiryBoundaryAndRevocation(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := now
	k := keys.Key{ExpiresAt: &at}
	if err := k.Usable(now.Add(-time.Nanosecond)); err != nil {
		t.Fatalf("usable just before expiry: %v", err)
	}
	if err := k.Usable(now); !errors.Is(err, keys.ErrExpired) {
		t.Fatalf("at the expiry instant: %v, want expired", err)
	}
	k.RevokedAt = &at
	if err := k.Usable(now.Add(-time.Hour)); !errors.Is(err, keys.ErrRevoked) {
		t.Fatalf("revoked: %v", err)
	}
	if err := (&keys.Key{}).Usable(now); err != nil {
		t.Fatalf("a key without expiry: %v", err)
	}
}

func TestAllows_ModelAllowList(t *testing.T) {
	for _, c := range []struct {
		models []string
		yes    []string
		no     []string
	}{
		{nil, []string{"qwen", "anything/at-all"}, nil},
		{[]string{"*"}, []string{"qwen", "llama-3"}, nil},
		{[]string{"qwen"}, []string{"qwen"}, []string{"qwen-7b", "Qwen", "qwe", ""}},
		{[]string{"qwen*", "deepseek-chat"}, []string{"qwen", "qwen-7b", "qwen2.5-coder", "deepseek-chat"}, []string{"deepseek-coder", "my-qwen", "llama"}},
		{[]string{"gpt-4?"}, []string{"gpt-4o"}, []string{"gpt-4", "gpt-4o-mini"}},
		{[]string{"llama-[23]*"}, []string{"llama-2-7b", "llama-3"}, []string{"llama-4"}},
		{[]string{"meta-llama/*"}, []string{"meta-llama/Llama-3.1-8B"}, []string{"mistralai/Mistral-7B"}},
		// Model names are not paths: '*' and '?' match '/' too.
		{[]string{"Qwen*"}, []string{"Qwen/Qwen2.5-7B-Instruct", "Qwen3-32B"}, []string{"qwen/x", "Meta/Qwen"}},
		{[]string{"*/Llama-3*"}, []string{"meta-llama/Llama-3.1-8B", "unsloth/Llama-3-8B"}, []string{"meta-llama/Llama-2-7b"}},
		{[]string{"org?model"}, []string{"org/model", "org-model"}, []string{"org//model"}},
		// A malformed pattern matches nothing (the admin API refuses it).
		{[]string{"qwen["}, nil, []string{"qwen", "qwen-7b"}},
	} {
		k := keys.Key{Models: c.models}
		for _, m := range c.yes {
			if !k.Allows(m) {
				t.Errorf("%q should allow %q", c.models, m)
			}
		}
		for _, m := range c.no {
			if k.Allows(m) {
				t.Errorf("%q should not allow %q", c.models, m)
			}
		}
	}
}

// Rotation and revocation reach a watching verifier within its interval.
func TestVerifier_WatchPicksUpRotationAndRevocation(t *testing.T) {
	st := &memStore{}
	k, old, _ := keys.Issue(ctx, st, keys.Key{Name: "rot"})
	v := newVerifier(t, st, "")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go v.Watch(wctx, 10*time.Millisecond)

	fresh, err := keys.Rotate(ctx, st, k.ID)
	if err != nil || fresh == old || !strings.HasPrefix(fresh, keys.Prefix) {
		t.Fatalf("rotate: %q %v", keys.Hint(fresh), err)
	}
	waitUntil(t, "the rotated secret works and the old one stops", func() bool {
		_, e1 := v.Verify(fresh)
		_, e2 := v.Verify(old)
		return e1 == nil && errors.Is(e2, keys.ErrNotFound)
	})
	if err := st.RevokeKey(ctx, k.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the revocation is seen", func() bool {
		_, err := v.Verify(fresh)
		return errors.Is(err, keys.ErrRevoked)
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, cond, what)
}

// Verify runs on every request while reloads swap the key set.
func TestVerifier_VerifyDuringReload(t *testing.T) {
	st := &memStore{}
	_, secret, _ := keys.Issue(ctx, st, keys.Key{Name: "steady"})
	v := newVerifier(t, st, "")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = v.Reload(ctx)
			}
		}
	}()
	for i := 0; i < 2000; i++ {
		if _, err := v.Verify(secret); err != nil {
			t.Fatalf("verify %d during reloads: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
}

func TestBudgetPeriods_UTCBoundaries(t *testing.T) {
	at := time.Date(2026, 12, 31, 23, 30, 0, 0, time.FixedZone("UTC-5", -5*3600)) // 2027-01-01 04:30 UTC
	if got := keys.PeriodStart("daily", at); !got.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("daily start %v", got)
	}
	if got := keys.PeriodEnd("daily", at); !got.Equal(time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("daily end %v", got)
	}
	if got := keys.PeriodEnd("monthly", time.Date(2026, 12, 15, 0, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("monthly end %v", got)
	}
	for _, p := range []string{"", "none"} {
		if !keys.PeriodStart(p, at).IsZero() || !keys.PeriodEnd(p, at).IsZero() {
			t.Fatalf("period %q should never reset", p)
		}
	}
}
