package console

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"llmgate/internal/keys"
)

// cookieOf returns the client's session cookie value.
func (cl *client) cookieOf() string {
	cl.f.t.Helper()
	v := cl.jar[cookieName]
	if v == "" {
		cl.f.t.Fatalf("no session cookie in %v", cl.jar)
	}
	return v
}

func TestConsole_SessionIsADatabaseRowHoldingTheCookieHashAndNoSecret(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	id, secret := f.createKey(admin, `{"name":"row"}`)
	user, r := f.signIn(secret)
	if r.status != 200 {
		t.Fatalf("sign-in: %d %s", r.status, r.body)
	}
	ctx := context.Background()
	cookie := user.cookieOf()
	row, err := f.st.GetSession(ctx, hashID(cookie), time.Now())
	if err != nil || row == nil {
		t.Fatalf("no session row for the cookie's hash: %v %v", row, err)
	}
	if row.Master || row.KeyID != id || row.CSRF != user.csrf || !row.ExpiresAt.After(time.Now().Add(11*time.Hour)) {
		t.Fatalf("session row %+v, want key %s, the CSRF token and a 12h expiry", row, id)
	}
	if m, _ := f.st.GetSession(ctx, hashID(admin.cookieOf()), time.Now()); m == nil || !m.Master || m.KeyID != "" {
		t.Fatalf("master session row %+v, want the master flag", m)
	}
	// Neither key's secret nor a live cookie is anywhere in the database
	// files, while the cookie's hash is (so the scan reads the right bytes).
	var all []byte
	for _, name := range []string{f.dbPath, f.dbPath + "-wal"} {
		b, _ := os.ReadFile(name)
		all = append(all, b...)
	}
	if !bytes.Contains(all, []byte(hashID(cookie))) {
		t.Fatal("the session's cookie hash is not in the database files: the scan read nothing useful")
	}
	for what, v := range map[string]string{"the key's secret": secret, "the master key": master, "the user's cookie": cookie, "the admin's cookie": admin.cookieOf()} {
		if bytes.Contains(all, []byte(v)) {
			t.Errorf("the database files hold %s", what)
		}
	}
}

func TestConsole_SecondReplicaAcceptsTheCookieAndSignOutEndsItOnBoth(t *testing.T) {
	f := newFixture(t)
	b := f.replica()
	admin, _ := f.signIn(master)
	onB := admin.at(b)
	if r := onB.do(http.MethodGet, "/ui/api/me", ""); r.status != 200 || !strings.Contains(r.body, `"role":"admin"`) {
		t.Fatalf("replica B with replica A's cookie: %d %s", r.status, r.body)
	}
	// The CSRF token issued by A is good on B: state changes work there.
	_, secret := f.createKey(onB, `{"name":"from-b","models":["alpha"]}`)
	user, _ := f.signIn(secret)
	if r := user.at(b).do(http.MethodGet, "/ui/api/me", ""); r.status != 200 || !strings.Contains(r.body, `"key_name":"from-b"`) {
		t.Fatalf("user on replica B: %d %s", r.status, r.body)
	}
	// Signing out on B ends the session on A too.
	if r := onB.post("/ui/api/logout", ""); r.status != 200 {
		t.Fatalf("logout on B: %d %s", r.status, r.body)
	}
	if r := admin.do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("replica A after sign-out on B: %d, want 401", r.status)
	}
	// The user's session is untouched, and expires on every replica.
	if r := user.do(http.MethodGet, "/ui/api/me", ""); r.status != 200 {
		t.Fatalf("another session after the admin's sign-out: %d", r.status)
	}
	f.mu.Lock()
	f.now = f.now.Add(12*time.Hour + time.Second)
	f.mu.Unlock()
	for _, cl := range []*client{user, user.at(b)} {
		if r := cl.do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized {
			t.Fatalf("expired session on %s: %d, want 401", cl.url(), r.status)
		}
	}
}

func TestConsole_KeyChangesApplyToItsSessionsAtOnceOnEveryReplica(t *testing.T) {
	f := newFixture(t)
	b := f.replica()
	ctx := context.Background()
	admin, _ := f.signIn(master)
	id, secret := f.createKey(admin, `{"name":"changing","models":["alpha"]}`)
	user, _ := f.signIn(secret)
	if m := user.at(b).do(http.MethodGet, "/ui/api/models", "").body; strings.Contains(m, `"beta"`) {
		t.Fatalf("key limited to alpha sees: %s", m)
	}
	// An allow-list change made elsewhere (another replica, the CLI) shows
	// on the next request: the key is read again each time.
	k, err := f.st.GetKey(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	k.Models = []string{"alpha", "beta"}
	if err := f.st.UpdateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if m := user.do(http.MethodGet, "/ui/api/models", "").body; !strings.Contains(m, `"beta"`) {
		t.Fatalf("after widening the allow-list the key sees: %s", m)
	}
	// Rotating the key outside the console ends its sessions.
	if _, err := keys.Rotate(ctx, f.st, id); err != nil {
		t.Fatal(err)
	}
	if r := user.at(b).do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "rotated") {
		t.Fatalf("session of a rotated key: %d %s, want 401", r.status, r.body)
	}
	// Revoking through replica B ends the key's sessions on A at once, and
	// deletes their rows.
	id2, secret2 := f.createKey(admin, `{"name":"revoked"}`)
	u1, _ := f.signIn(secret2)
	u2, _ := f.signIn(secret2)
	if r := admin.at(b).post("/ui/api/keys/"+id2+"/revoke", ""); r.status != 200 {
		t.Fatalf("revoke on B: %d %s", r.status, r.body)
	}
	for _, cl := range []*client{u1, u2} {
		if row, _ := f.st.GetSession(ctx, hashID(cl.cookieOf()), time.Now()); row != nil {
			t.Errorf("a revoked key's session row is still stored: %+v", row)
		}
		if r := cl.do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized {
			t.Errorf("session of a revoked key on A: %d, want 401", r.status)
		}
	}
	// A key revoked straight in the store (the CLI) is refused too.
	id3, secret3 := f.createKey(admin, `{"name":"cli-revoked"}`)
	u3, _ := f.signIn(secret3)
	if err := f.st.RevokeKey(ctx, id3, time.Now()); err != nil {
		t.Fatal(err)
	}
	if r := u3.at(b).do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "revoked") {
		t.Fatalf("session of a key revoked in the store: %d %s, want 401", r.status, r.body)
	}
}

func TestConsole_SessionsPerKeyAreCapped(t *testing.T) {
	f := newFixture(t)
	first, _ := f.signIn(master)
	var last *client
	for i := 0; i < maxSessionsPerKey; i++ {
		f.mu.Lock()
		f.now = f.now.Add(time.Millisecond) // distinct creation times: the oldest is well defined
		f.mu.Unlock()
		last, _ = f.signIn(master)
	}
	if r := first.do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("the oldest of %d sign-ins: %d, want 401 (over the cap)", maxSessionsPerKey+1, r.status)
	}
	if r := last.do(http.MethodGet, "/ui/api/me", ""); r.status != 200 {
		t.Fatalf("the newest sign-in: %d", r.status)
	}
}

// Admin sessions are bound to the master key they signed in with: a replica
// (or a restart) with another master key refuses them, so replacing a
// leaked master key ends every admin session at once.
func TestConsole_ChangedMasterKeyEndsAdminSessions(t *testing.T) {
	f := newFixture(t)
	admin, r := f.signIn(master)
	if r.status != 200 {
		t.Fatalf("sign-in: %d %s", r.status, r.body)
	}
	if r := admin.do(http.MethodGet, "/ui/api/me", ""); r.status != 200 {
		t.Fatalf("admin session: %d", r.status)
	}
	// The same database, served with a new master key.
	ver, err := keys.NewVerifier(context.Background(), f.st, keys.HashBytes("sk-lg-the-new-master-key"), f.log)
	if err != nil {
		t.Fatal(err)
	}
	f.ver = ver
	restarted := f.replica()
	if r := admin.at(restarted).do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "master key was changed") {
		t.Fatalf("old admin session with a new master key: %d %s, want 401", r.status, r.body)
	}
}
