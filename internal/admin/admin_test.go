package admin_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"llmgate/internal/admin"
	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/ledger"
	"llmgate/internal/testenv"
	"llmgate/internal/testenv/testdb"
	"llmgate/internal/usage"
)

const master = "sk-lg-admin-test-master"

func startGateway(t *testing.T) (*gateway.Gateway, string) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":2000,"total_tokens":3000}}`)
	}))
	t.Cleanup(up.Close)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf(`
backends:
  up: {url: %q}
models:
  m: {backend: up, input_price: 0.5, output_price: 1.5}
  tight: {backend: up, rpm: 1}
`, up.URL+"/v1")), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database, cfg.Listen = testdb.SQLite(t, t.TempDir(), "g.db"), "127.0.0.1:0"
	g, err := gateway.Start(context.Background(), gateway.Options{Config: cfg, MasterKey: master,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g, "http://" + g.Addr
}

func call(t *testing.T, base, key, model string) *http.Response {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":10}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func body(r *http.Response) string { b, _ := io.ReadAll(r.Body); return string(b) }

func TestAdmin_KeyLifecycleThroughTheAPI(t *testing.T) {
	_, base := startGateway(t)
	c := admin.NewClient(base+"/v1", master) // a /v1 suffix is tolerated
	ctx := context.Background()
	rpm, budget, period := 2, 10.0, "monthly"
	is, err := c.CreateKey(ctx, admin.KeySpec{Name: ptr("app"), Owner: ptr("ml"), Models: &[]string{"m", "tight"}, RPM: &rpm,
		BudgetUSD: &budget, BudgetPeriod: &period, Metadata: &map[string]string{"env": "test"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(is.Secret, "sk-lg-") || is.Key.RPM != 2 || is.Key.BudgetPeriod != "monthly" || is.Key.Status != "active" {
		t.Fatalf("created = %+v", is)
	}
	// The new key works at once on this replica, and its RPM is enforced.
	for i := 0; i < 2; i++ {
		if r := call(t, base, is.Secret, "m"); r.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, r.StatusCode, body(r))
		}
	}
	r := call(t, base, is.Secret, "m")
	if r.StatusCode != 429 || r.Header.Get("x-ratelimit-limit-requests") != "2" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("third call: %d %v", r.StatusCode, r.Header)
	}
	if b := body(r); !strings.Contains(b, `key \"app\"`) || !strings.Contains(b, "2 requests per minute") {
		t.Fatalf("429 message must name the key and the limit: %s", b)
	}
	// Raising the limit applies immediately.
	rpm = 100
	if _, err := c.UpdateKey(ctx, is.Key.ID, admin.KeySpec{RPM: &rpm}); err != nil {
		t.Fatal(err)
	}
	if r := call(t, base, is.Secret, "m"); r.StatusCode != 200 {
		t.Fatalf("after raising RPM: %d %s", r.StatusCode, body(r))
	}
	// Show reports the spend of the period: 3 calls x (1000*0.5 + 2000*1.5)/1M.
	k := eventually(t, func() (*admin.Key, bool) { // the ledger writes asynchronously
		k, err := c.GetKey(ctx, is.Key.ID)
		return k, err == nil && k.SpentUSD != nil && *k.SpentUSD >= 3*0.0035-1e-9
	})
	if k.SpentUSD == nil || *k.SpentUSD < 3*0.0035-1e-9 || *k.SpentUSD > 3*0.0035+1e-9 {
		t.Fatalf("spent = %v, want $0.0105", k.SpentUSD)
	}
	// Rotation: the old secret stops working, the new one works.
	rot, err := c.RotateKey(ctx, is.Key.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := call(t, base, is.Secret, "m"); r.StatusCode != 401 {
		t.Fatalf("old secret after rotation: %d", r.StatusCode)
	}
	if r := call(t, base, rot.Secret, "m"); r.StatusCode != 200 {
		t.Fatalf("new secret: %d %s", r.StatusCode, body(r))
	}
	// Revocation.
	if _, err := c.RevokeKey(ctx, is.Key.ID); err != nil {
		t.Fatal(err)
	}
	if r := call(t, base, rot.Secret, "m"); r.StatusCode != 401 {
		t.Fatalf("revoked key: %d", r.StatusCode)
	}
	ks, err := c.ListKeys(ctx)
	if err != nil || len(ks) != 1 || ks[0].Status != "revoked" || ks[0].Metadata["env"] != "test" {
		t.Fatalf("list = %+v %v", ks, err)
	}
}

// TestAdmin_ShowSpendIsWhatTheBudgetIsEnforcedAgainst: right after a
// budget refusal, before the ledger has necessarily written anything, "show"
// reports the spend the refusal names, and nothing reserved.
func TestAdmin_ShowSpendIsWhatTheBudgetIsEnforcedAgainst(t *testing.T) {
	_, base := startGateway(t)
	c := admin.NewClient(base, master)
	ctx := context.Background()
	budget := 0.01
	is, err := c.CreateKey(ctx, admin.KeySpec{Name: ptr("budgeted"), BudgetUSD: &budget})
	if err != nil {
		t.Fatal(err)
	}
	// Each call reserves little (max_tokens 10) and costs $0.0035: three
	// pass, the fourth finds $0.0105 of $0.01 spent.
	for i := 0; i < 3; i++ {
		if r := call(t, base, is.Secret, "m"); r.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, r.StatusCode, body(r))
		}
	}
	r := call(t, base, is.Secret, "m")
	if b := body(r); r.StatusCode != 429 || !strings.Contains(b, "$0.0105 of $0.01 spent or reserved") {
		t.Fatalf("fourth call: %d %s", r.StatusCode, b)
	}
	k, err := c.GetKey(ctx, is.Key.ID)
	if err != nil {
		t.Fatal(err)
	}
	if k.SpentUSD == nil || k.ReservedUSD == nil || *k.SpentUSD < 0.0105-1e-9 || *k.SpentUSD > 0.0105+1e-9 || *k.ReservedUSD != 0 {
		t.Fatalf("show: spent %v reserved %v, want $0.0105 and $0 - the figures the refusal was made on", k.SpentUSD, k.ReservedUSD)
	}
}

func TestAdmin_ModelRPMNamesTheModel(t *testing.T) {
	_, base := startGateway(t)
	c := admin.NewClient(base, master)
	is, err := c.CreateKey(context.Background(), admin.KeySpec{Name: ptr("x")})
	if err != nil {
		t.Fatal(err)
	}
	if r := call(t, base, is.Secret, "tight"); r.StatusCode != 200 {
		t.Fatalf("first: %d", r.StatusCode)
	}
	r := call(t, base, is.Secret, "tight")
	if b := body(r); r.StatusCode != 429 || !strings.Contains(b, `model \"tight\"`) {
		t.Fatalf("second: %d %s", r.StatusCode, b)
	}
}

func TestAdmin_UsageAsJSONAndCSV(t *testing.T) {
	_, base := startGateway(t)
	for i := 0; i < 3; i++ {
		if r := call(t, base, master, "m"); r.StatusCode != 200 {
			t.Fatalf("%d", r.StatusCode)
		}
	}
	c := admin.NewClient(base, master)
	rows := eventually(t, func() ([]usage.SummaryRow, bool) {
		rows, err := c.Usage(context.Background(), admin.UsageQuery{Since: "1h", By: []string{"model", "backend", "day"}})
		return rows, err == nil && len(rows) == 1 && rows[0].Requests == 3
	})
	if len(rows) != 1 || rows[0].Model != "m" || rows[0].Backend != "up" || rows[0].Requests != 3 || rows[0].PromptTokens != 3000 ||
		rows[0].Day != time.Now().UTC().Format("2006-01-02") || rows[0].CostUSD < 0.0105-1e-9 || rows[0].P95LatencyMS <= 0 {
		t.Fatalf("rows = %+v", rows)
	}
	var buf bytes.Buffer
	if err := c.UsageCSV(context.Background(), admin.UsageQuery{Since: "1h", By: []string{"key"}}, &buf); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	// Grouped by key: the key's columns, filled, and no empty model,
	// backend or day columns.
	if err != nil || len(recs) != 2 || strings.Join(recs[0][:3], ",") != "key_id,key_name,requests" || recs[1][0] != "master" ||
		recs[1][1] != "(master key)" || recs[1][2] != "3" {
		t.Fatalf("csv = %q %v", recs, err)
	}
	if _, err := c.Usage(context.Background(), admin.UsageQuery{By: []string{"colour"}}); err == nil || !strings.Contains(err.Error(), "unknown group") {
		t.Fatalf("bad group: %v", err)
	}
}

func TestAdmin_RefusesVirtualKeysAndAnonymous(t *testing.T) {
	_, base := startGateway(t)
	is, err := admin.NewClient(base, master).CreateKey(context.Background(), admin.KeySpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.NewClient(base, is.Secret).ListKeys(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("virtual key: %v", err)
	}
	if _, err := admin.NewClient(base, "").ListKeys(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("no key: %v", err)
	}
	bad := -1
	if _, err := admin.NewClient(base, master).CreateKey(context.Background(), admin.KeySpec{RPM: &bad}); err == nil || !strings.Contains(err.Error(), "rpm must be 0") {
		t.Fatalf("negative rpm: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// eventually polls f until it reports done (the ledger is asynchronous).
func eventually[T any](t *testing.T, f func() (T, bool)) T {
	t.Helper()
	var v T
	testenv.Poll(10*time.Second, func() (ok bool) {
		v, ok = f()
		return ok
	})
	return v
}

// A key's objective is set on create and update, shown, cleared with "",
// and refused (400, saying what a valid name is) when it cannot name an
// InferenceObjective.
func TestAdmin_KeyObjectiveIsStoredShownAndChecked(t *testing.T) {
	_, base := startGateway(t)
	c := admin.NewClient(base, master)
	ctx := context.Background()
	is, err := c.CreateKey(ctx, admin.KeySpec{Name: ptr("svc"), Objective: ptr("critical")})
	if err != nil || is.Key.Objective != "critical" {
		t.Fatalf("create: %+v, %v", is, err)
	}
	if k, err := c.UpdateKey(ctx, is.Key.ID, admin.KeySpec{Objective: ptr("batch.low-1")}); err != nil || k.Objective != "batch.low-1" {
		t.Fatalf("update: %+v, %v", k, err)
	}
	list, err := c.ListKeys(ctx)
	if err != nil || len(list) != 1 || list[0].Objective != "batch.low-1" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	for _, bad := range []string{"Critical", "-x", "a_b", strings.Repeat("a", 254)} {
		_, err := c.UpdateKey(ctx, is.Key.ID, admin.KeySpec{Objective: ptr(bad)})
		if err == nil || !strings.Contains(err.Error(), "InferenceObjective") {
			t.Errorf("objective %q: err = %v, want a refusal naming InferenceObjective", bad, err)
		}
	}
	if k, err := c.UpdateKey(ctx, is.Key.ID, admin.KeySpec{Objective: ptr("")}); err != nil || k.Objective != "" {
		t.Fatalf("clear: %+v, %v", k, err)
	}
}

func TestAdmin_KeyPriorityIsStoredDefaultsToOneAndIsBounded(t *testing.T) {
	_, base := startGateway(t)
	c := admin.NewClient(base, master)
	ctx := context.Background()
	is, err := c.CreateKey(ctx, admin.KeySpec{Name: ptr("plain")})
	if err != nil {
		t.Fatal(err)
	}
	if is.Key.Priority != 1 {
		t.Fatalf("a key without a priority shows %d, want 1", is.Key.Priority)
	}
	p := 3
	if _, err := c.UpdateKey(ctx, is.Key.ID, admin.KeySpec{Priority: &p}); err != nil {
		t.Fatal(err)
	}
	if k, err := c.GetKey(ctx, is.Key.ID); err != nil || k.Priority != 3 {
		t.Fatalf("after update to 3: %+v %v", k, err)
	}
	for _, bad := range []int{0, -1, 101} {
		_, err := c.UpdateKey(ctx, is.Key.ID, admin.KeySpec{Priority: &bad})
		if err == nil || !strings.Contains(err.Error(), "priority must be 1") {
			t.Errorf("priority %d: err %v, want a refusal naming the range", bad, err)
		}
	}
}
