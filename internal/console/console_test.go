package console

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/testenv/testdb"
	"llmgate/internal/usage"
)

const master = "sk-lg-console-test-master"

type fixture struct {
	t      *testing.T
	st     *sqlite.Store
	dbPath string
	ver    *keys.Verifier
	log    *slog.Logger
	srv    *httptest.Server
	now    time.Time
	mu     sync.Mutex
	apiHit []string // Authorization headers the fake API saw
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dbPath := testdb.SQLite(t, t.TempDir(), "c.db")
	st, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ver, err := keys.NewVerifier(ctx, st, keys.HashBytes(master), log)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, st: st, dbPath: dbPath, ver: ver, log: log, now: time.Now()}
	f.srv = f.replica()
	return f
}

// replica starts another console on the fixture's store, as a second
// gateway replica sharing the database would.
func (f *fixture) replica() *httptest.Server {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.apiHit = append(f.apiHit, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	})
	c := New(Options{Store: f.st, Verify: f.ver.Verify, MasterHash: f.ver.MasterHash, API: api, KeysChanged: f.ver.Reload, Logger: f.log,
		Models: func() []string { return []string{"alpha", "beta"} },
		Health: func() any {
			return []map[string]any{{"model": "alpha", "healthy": true}, {"model": "beta", "healthy": false}}
		},
		Stats: func() map[string]float64 { return map[string]float64{"in_flight": 7} },
		Now: func() time.Time {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.now
		}})
	mux := http.NewServeMux()
	mux.Handle("/ui", c)
	mux.Handle("/ui/", c)
	srv := httptest.NewServer(mux)
	f.t.Cleanup(srv.Close)
	return srv
}

// client is one browser: a cookie jar and the CSRF token from sign-in.
type client struct {
	f    *fixture
	base string // the replica it talks to; "" is the fixture's first one
	jar  map[string]string
	csrf string
}

func (cl *client) url() string {
	if cl.base != "" {
		return cl.base
	}
	return cl.f.srv.URL
}

// at returns a client with the same cookie and CSRF token talking to
// another replica.
func (cl *client) at(srv *httptest.Server) *client {
	jar := map[string]string{}
	for k, v := range cl.jar {
		jar[k] = v
	}
	return &client{f: cl.f, base: srv.URL, jar: jar, csrf: cl.csrf}
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (cl *client) do(method, path, body string, hdr ...string) resp {
	cl.f.t.Helper()
	req, _ := http.NewRequest(method, cl.url()+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range cl.jar {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	r, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		cl.f.t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	for _, ck := range r.Cookies() {
		if ck.MaxAge < 0 {
			delete(cl.jar, ck.Name)
		} else {
			cl.jar[ck.Name] = ck.Value
		}
	}
	return resp{r.StatusCode, r.Header, string(b)}
}

func (f *fixture) signIn(key string) (*client, resp) {
	cl := &client{f: f, jar: map[string]string{}}
	r := cl.do(http.MethodPost, "/ui/api/login", `{"key":"`+key+`"}`, "Origin", f.srv.URL, "Sec-Fetch-Site", "same-origin")
	var m struct {
		CSRF string `json:"csrf"`
	}
	_ = json.Unmarshal([]byte(r.body), &m)
	cl.csrf = m.CSRF
	return cl, r
}

func (cl *client) post(path, body string) resp {
	return cl.do(http.MethodPost, path, body, "X-CSRF-Token", cl.csrf, "Origin", cl.url(), "Sec-Fetch-Site", "same-origin")
}

func (f *fixture) createKey(admin *client, body string) (id, secret string) {
	f.t.Helper()
	r := admin.post("/ui/api/keys", body)
	if r.status != http.StatusCreated {
		f.t.Fatalf("create key: %d %s", r.status, r.body)
	}
	var out struct {
		Key struct {
			ID string `json:"id"`
		} `json:"key"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(r.body), &out); err != nil {
		f.t.Fatal(err)
	}
	return out.Key.ID, out.Secret
}

func TestConsole_SignInSetsStrictHttpOnlySessionCookieAndPagesCarryCSP(t *testing.T) {
	f := newFixture(t)
	page := (&client{f: f, jar: map[string]string{}}).do(http.MethodGet, "/ui/", "")
	if page.status != 200 || !strings.Contains(page.body, `<script src="/ui/static/app.js"`) {
		t.Fatalf("GET /ui/: %d", page.status)
	}
	csp := page.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q is not strict", csp)
	}
	if strings.Contains(page.body, "<script>") || strings.Contains(page.body, " style=") || strings.Contains(page.body, "onclick") {
		t.Error("index.html has inline script or style, which the CSP forbids")
	}
	_, r := f.signIn(master)
	if r.status != 200 || !strings.Contains(r.body, `"role":"admin"`) {
		t.Fatalf("sign-in: %d %s", r.status, r.body)
	}
	sc := r.header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/ui", "Max-Age="} {
		if !strings.Contains(sc, want) {
			t.Errorf("session cookie %q lacks %s", sc, want)
		}
	}
	if strings.Contains(sc, master) {
		t.Error("the cookie carries the key itself")
	}
}

func TestConsole_SessionCookieIsSecureHostOnlyBehindTLS(t *testing.T) {
	f := newFixture(t)
	cl := &client{f: f, jar: map[string]string{}}
	r := cl.do(http.MethodPost, "/ui/api/login", `{"key":"`+master+`"}`, "X-Forwarded-Proto", "https")
	sc := r.header.Get("Set-Cookie")
	if !strings.HasPrefix(sc, "__Host-llmgate_session=") || !strings.Contains(sc, "Secure") || !strings.Contains(sc, "Path=/;") {
		t.Fatalf("cookie over TLS: %q, want a Secure __Host- cookie", sc)
	}
}

func TestConsole_WrongOrRevokedKeyCannotSignIn(t *testing.T) {
	f := newFixture(t)
	if _, r := f.signIn("sk-lg-wrong"); r.status != http.StatusUnauthorized || strings.Contains(r.body, "sk-lg-wrong") {
		t.Fatalf("wrong key: %d %s", r.status, r.body)
	}
	cl := &client{f: f, jar: map[string]string{}}
	if r := cl.do(http.MethodGet, "/ui/api/overview", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("API without session: %d", r.status)
	}
}

func TestConsole_StateChangesNeedTheCSRFTokenAndTheSameOrigin(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	body := `{"name":"k1"}`
	cases := []struct {
		name string
		hdr  []string
	}{
		{"no token", []string{"Origin", f.srv.URL}},
		{"wrong token", []string{"X-CSRF-Token", "nope", "Origin", f.srv.URL}},
		{"foreign origin", []string{"X-CSRF-Token", admin.csrf, "Origin", "https://evil.example"}},
		{"cross-site fetch", []string{"X-CSRF-Token", admin.csrf, "Sec-Fetch-Site", "cross-site"}},
	}
	for _, c := range cases {
		if r := admin.do(http.MethodPost, "/ui/api/keys", body, c.hdr...); r.status != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", c.name, r.status, r.body)
		}
	}
	// A forged sign-in from another site is refused too (login CSRF).
	cl := &client{f: f, jar: map[string]string{}}
	if r := cl.do(http.MethodPost, "/ui/api/login", `{"key":"`+master+`"}`, "Origin", "https://evil.example"); r.status != http.StatusForbidden {
		t.Errorf("cross-origin sign-in: %d, want 403", r.status)
	}
	if r := admin.post("/ui/api/keys", body); r.status != http.StatusCreated {
		t.Fatalf("with token: %d %s", r.status, r.body)
	}
}

func TestConsole_KeySecretIsReturnedOnceAndNeverListed(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	idAlpha, alphaSecret := f.createKey(admin, `{"name":"alpha-only","models":["alpha"]}`)
	alphaUser, _ := f.signIn(alphaSecret)
	if m := alphaUser.do(http.MethodGet, "/ui/api/models", "").body; strings.Contains(m, "beta") || !strings.Contains(m, `"alpha"`) {
		t.Errorf("key %s limited to alpha sees: %s", idAlpha, m)
	}
	id, secret := f.createKey(admin, `{"name":"team-a","models":["alpha"," "],"rpm":60,"budget_usd":5,"budget_period":"monthly","expires_in_days":30}`)
	if !strings.HasPrefix(secret, keys.Prefix) {
		t.Fatalf("secret %q", secret)
	}
	list := admin.do(http.MethodGet, "/ui/api/keys", "")
	if strings.Contains(list.body, secret) || strings.Contains(list.body, keys.Hash(secret)) {
		t.Fatal("the key list shows the secret or its hash")
	}
	if !strings.Contains(list.body, `"name":"team-a"`) || !strings.Contains(list.body, `"models":["alpha"]`) || !strings.Contains(list.body, `"rpm":60`) {
		t.Fatalf("key list: %s", list.body)
	}
	// The new key works at once (the verifier reloaded).
	if _, err := f.ver.Verify(secret); err != nil {
		t.Fatalf("new key not usable: %v", err)
	}
	// Rotation gives a new secret and retires the old one.
	rot := admin.post("/ui/api/keys/"+id+"/rotate", "")
	var out struct{ Secret string }
	_ = json.Unmarshal([]byte(rot.body), &out)
	if rot.status != 200 || out.Secret == "" || out.Secret == secret {
		t.Fatalf("rotate: %d %s", rot.status, rot.body)
	}
	if _, err := f.ver.Verify(secret); err == nil {
		t.Error("the old secret still works after rotation")
	}
	if _, err := f.ver.Verify(out.Secret); err != nil {
		t.Errorf("the rotated secret does not work: %v", err)
	}
	if r := admin.post("/ui/api/keys", `{"name":"","rpm":-1}`); r.status != http.StatusBadRequest {
		t.Errorf("invalid key request: %d", r.status)
	}
}

func TestConsole_UserKeySeesOnlyItsOwnUsageAndCannotManageKeys(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	idA, secretA := f.createKey(admin, `{"name":"a"}`)
	idB, _ := f.createKey(admin, `{"name":"b"}`)
	now := time.Now()
	recs := []usage.Record{
		{ID: "r1", Time: now, KeyID: idA, Model: "alpha", Backend: "x", Status: 200, PromptTokens: 10, CompletionTokens: 5, Latency: time.Second},
		{ID: "r2", Time: now, KeyID: idB, Model: "beta", Backend: "x", Status: 200, PromptTokens: 987654, CompletionTokens: 987654, Latency: time.Second},
	}
	if err := f.st.InsertUsage(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	user, r := f.signIn(secretA)
	if r.status != 200 || !strings.Contains(r.body, `"role":"user"`) {
		t.Fatalf("user sign-in: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/ui/api/usage?group=key,model&key=" + idB, "/ui/api/recent", "/ui/api/overview?range=7d"} {
		body := user.do(http.MethodGet, path, "").body
		if strings.Contains(body, idB) || strings.Contains(body, `"beta"`) || strings.Contains(body, "987654") {
			t.Errorf("%s shows another key's usage: %s", path, body)
		}
		if !strings.Contains(body, "10") {
			t.Errorf("%s misses the user's own usage: %s", path, body)
		}
	}
	if r := user.post("/ui/api/keys", `{"name":"mine"}`); r.status != http.StatusForbidden {
		t.Errorf("user creating a key: %d, want 403", r.status)
	}
	if r := user.post("/ui/api/keys/"+idB+"/revoke", ""); r.status != http.StatusForbidden {
		t.Errorf("user revoking a key: %d, want 403", r.status)
	}
	if keysBody := user.do(http.MethodGet, "/ui/api/keys", "").body; strings.Contains(keysBody, idB) {
		t.Errorf("user sees other keys: %s", keysBody)
	}
	if ov := user.do(http.MethodGet, "/ui/api/overview", "").body; strings.Contains(ov, "in_flight") {
		t.Errorf("user sees gateway-wide live figures: %s", ov)
	}
	if ov := admin.do(http.MethodGet, "/ui/api/overview", "").body; !strings.Contains(ov, `"in_flight":7`) {
		t.Errorf("admin overview lacks live figures: %s", ov)
	}
	// Admin revokes the user's key: the session ends at once.
	if r := admin.post("/ui/api/keys/"+idA+"/revoke", ""); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := user.do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized {
		t.Errorf("session of a revoked key: %d, want 401", r.status)
	}
}

func TestConsole_UsageCSVExportDefusesFormulas(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	id, _ := f.createKey(admin, `{"name":"=HYPERLINK(\"x\")"}`)
	if err := f.st.InsertUsage(context.Background(), []usage.Record{{ID: "r1", Time: time.Now(), KeyID: id, Model: "alpha", Status: 200,
		PromptTokens: 7, CachedTokens: 5, CompletionTokens: 3, Latency: 20 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	r := admin.do(http.MethodGet, "/ui/api/usage?group=key,model&format=csv", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") || !strings.Contains(r.header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("csv: %d %v", r.status, r.header)
	}
	lines := strings.Split(strings.TrimSpace(r.body), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "day,key_id,key_name,model") {
		t.Fatalf("csv body:\n%s", r.body)
	}
	if !strings.Contains(lines[1], `"'=HYPERLINK`) || !strings.Contains(lines[1], ",alpha,,1,0,7,5,3,") {
		t.Errorf("csv row %q: want the formula defused and the figures", lines[1])
	}
	if r := admin.do(http.MethodGet, "/ui/api/usage?group=nonsense", ""); r.status != http.StatusBadRequest {
		t.Errorf("bad group: %d", r.status)
	}
}

// The requests table shows the client's X-Request-Id; two requests that
// sent the same one are two rows, each with its own record id.
func TestConsole_RecentShowsTheClientRequestID(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	now := time.Now()
	recs := []usage.Record{
		{ID: usage.NewID(), ClientRequestID: "client-trace-7", Time: now, KeyID: "master", Model: "alpha", Status: 200, PromptTokens: 90, CachedTokens: 64},
		{ID: usage.NewID(), ClientRequestID: "client-trace-7", Time: now.Add(time.Millisecond), KeyID: "master", Model: "alpha", Status: 200},
	}
	if err := f.st.InsertUsage(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	r := admin.do(http.MethodGet, "/ui/api/recent", "")
	var got struct {
		Requests []struct {
			ID           string `json:"id"`
			RequestID    string `json:"request_id"`
			CachedTokens int    `json:"cached_tokens"`
		} `json:"requests"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || len(got.Requests) != 2 {
		t.Fatalf("recent: %d %s (%v)", r.status, r.body, err)
	}
	if got.Requests[0].RequestID != "client-trace-7" || got.Requests[1].RequestID != "client-trace-7" ||
		got.Requests[0].ID != recs[1].ID || got.Requests[1].ID != recs[0].ID {
		t.Fatalf("recent = %+v, want both records with the client's id", got.Requests)
	}
	if got.Requests[1].CachedTokens != 64 {
		t.Errorf("recent: cached_tokens %d, want the record's 64", got.Requests[1].CachedTokens)
	}
}

func TestConsole_PlaygroundCallsTheAPIInProcessAsTheSessionKey(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	_, secret := f.createKey(admin, `{"name":"pg"}`)
	user, _ := f.signIn(secret)
	r := user.post("/ui/api/chat", `{"model":"alpha","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if r.status != 200 || !strings.Contains(r.body, `"content":"hi"`) || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("playground: %d %v %s", r.status, r.header, r.body)
	}
	f.mu.Lock()
	hits := append([]string(nil), f.apiHit...)
	f.mu.Unlock()
	// No credential travels: the session's principal rides in the request
	// context (server.WithPrincipal), so the server holds no secret.
	if len(hits) != 1 || hits[0] != "POST /v1/chat/completions " {
		t.Fatalf("API saw %v, want one chat request without an Authorization header", hits)
	}
	if r := user.do(http.MethodPost, "/ui/api/chat", `{}`); r.status != http.StatusForbidden {
		t.Errorf("playground without CSRF token: %d, want 403", r.status)
	}
}

func TestConsole_SessionExpires(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	if r := admin.do(http.MethodGet, "/ui/api/me", ""); r.status != 200 {
		t.Fatalf("me: %d", r.status)
	}
	f.mu.Lock()
	f.now = f.now.Add(13 * time.Hour)
	f.mu.Unlock()
	if r := admin.do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("after the session TTL: %d, want 401", r.status)
	}
	if r := admin.post("/ui/api/logout", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("logout of an expired session: %d", r.status)
	}
}

func TestConsole_SignOutEndsTheSession(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	cookie := map[string]string{}
	for k, v := range admin.jar {
		cookie[k] = v
	}
	if r := admin.post("/ui/api/logout", ""); r.status != 200 {
		t.Fatalf("logout: %d", r.status)
	}
	replay := &client{f: f, jar: cookie}
	if r := replay.do(http.MethodGet, "/ui/api/me", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("old cookie after sign-out: %d, want 401", r.status)
	}
}

func TestConsole_DashboardSeriesHasOneBucketPerHourAndCountsRequests(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	now := time.Now()
	recs := []usage.Record{
		{ID: "r1", Time: now, KeyID: "master", Model: "alpha", Status: 200, PromptTokens: 4, CompletionTokens: 6, Latency: 100 * time.Millisecond},
		{ID: "r2", Time: now, KeyID: "master", Model: "alpha", Status: 502, Latency: 300 * time.Millisecond},
		{ID: "r3", Time: now.Add(-3 * time.Hour), KeyID: "master", Model: "beta", Status: 200, PromptTokens: 1, CompletionTokens: 1, Latency: time.Second},
	}
	if err := f.st.InsertUsage(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	var d struct {
		Series []point `json:"series"`
		Totals point   `json:"totals"`
	}
	r := admin.do(http.MethodGet, "/ui/api/overview?range=24h", "")
	if err := json.Unmarshal([]byte(r.body), &d); err != nil {
		t.Fatalf("overview: %v %s", err, r.body)
	}
	if len(d.Series) != 24 {
		t.Fatalf("24h range has %d buckets, want 24", len(d.Series))
	}
	last, earlier := d.Series[23], d.Series[20]
	// Stores answer percentiles from latency histograms in their hourly
	// rollups, so p95 is near 300 ms rather than exact.
	if last.Requests != 2 || last.Errors != 1 || last.PromptTokens != 4 || last.P95MS < 250 || last.P95MS > 350 {
		t.Errorf("current hour %+v, want 2 requests, 1 error, 4 prompt tokens, p95 near 300ms", last)
	}
	if earlier.Requests != 1 {
		t.Errorf("three hours ago %+v, want 1 request", earlier)
	}
	if d.Totals.Requests != 3 || d.Totals.Errors != 1 {
		t.Errorf("totals %+v", d.Totals)
	}
}

func TestConsole_KeysShowSpendAndAnExhaustedBudget(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	idSpent, _ := f.createKey(admin, `{"name":"spent","budget_usd":0.01,"budget_period":"monthly"}`)
	idLeft, _ := f.createKey(admin, `{"name":"left","budget_usd":5}`)
	idFree, _ := f.createKey(admin, `{"name":"free"}`)
	now := time.Now()
	recs := []usage.Record{
		{ID: "s1", Time: now, KeyID: idSpent, Model: "alpha", Backend: "x", Status: 200, PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.012, Latency: time.Second},
		{ID: "l1", Time: now, KeyID: idLeft, Model: "alpha", Backend: "x", Status: 200, PromptTokens: 10, CompletionTokens: 5, CostUSD: 1.25, Latency: time.Second},
		{ID: "f1", Time: now, KeyID: idFree, Model: "alpha", Backend: "x", Status: 200, PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.5, Latency: time.Second},
	}
	if err := f.st.InsertUsage(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Keys []struct {
			ID       string  `json:"id"`
			Status   string  `json:"status"`
			SpentUSD float64 `json:"spent_usd"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(admin.do(http.MethodGet, "/ui/api/keys", "").body), &list); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		status string
		spent  float64
	}{idSpent: {"exhausted", 0.012}, idLeft: {"active", 1.25}, idFree: {"active", 0.5}}
	for _, k := range list.Keys {
		w := want[k.ID]
		if k.Status != w.status || k.SpentUSD < w.spent-1e-9 || k.SpentUSD > w.spent+1e-9 {
			t.Errorf("key %s: status %q spent %v, want %q and %v", k.ID, k.Status, k.SpentUSD, w.status, w.spent)
		}
	}
}

func TestConsole_KeyPriorityIsCreatedShownAndBounded(t *testing.T) {
	f := newFixture(t)
	admin, _ := f.signIn(master)
	f.createKey(admin, `{"name":"batch","priority":3}`)
	f.createKey(admin, `{"name":"plain"}`)
	list := admin.do(http.MethodGet, "/ui/api/keys", "").body
	if !strings.Contains(list, `"name":"batch"`) || !strings.Contains(list, `"priority":3`) || !strings.Contains(list, `"priority":1`) {
		t.Fatalf("key list does not show priorities 3 and the default 1: %s", list)
	}
	if r := admin.post("/ui/api/keys", `{"name":"greedy","priority":1000}`); r.status != http.StatusBadRequest || !strings.Contains(r.body, "priority must be 1") {
		t.Fatalf("priority 1000: %d %s", r.status, r.body)
	}
}
