// Package storetest is the one test suite every store implementation must
// pass (SQLite and PostgreSQL run the same cases).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/store"
	"llmgate/internal/usage"
)

// Store is what the suite exercises: the full store plus key updates,
// retention and an exactly-once count.
type Store interface {
	store.Store
	keys.Updater
	usage.Retainer
	CountUsage(ctx context.Context) (rows, distinct int64, err error)
	ByClientRequestID(ctx context.Context, id string, limit int) ([]usage.Record, error)
	ledger.HealthChecker
	usage.RateReader
}

// Run runs the suite; open returns a fresh, empty store for each case.
func Run(t *testing.T, open func(t *testing.T) Store) {
	cases := []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"Keys_CreateGetList", testKeysCreateGetList},
		{"Keys_UpdateBumpsVersion", testKeysUpdate},
		{"Keys_RotateReplacesSecret", testKeysRotate},
		{"Keys_RevokeKeepsFirstTime", testKeysRevoke},
		{"Settings_RoundTrip", testSettings},
		{"Usage_ReplayedBatchWritesOnce", testUsageExactlyOnce},
		{"Usage_ReplaysAnywhereInABatchWriteOnce", testUsageReplayPositions},
		{"Usage_SameClientRequestIDIsSeparateRecords", testUsageClientIDNotUnique},
		{"Health_HealthyWhileOpen", testHealthy},
		{"Usage_SummaryMatchesRawRecords", testSummaryMatchesRaw},
		{"Usage_SummaryGroupsByDay", testSummaryByDay},
		{"Usage_RetentionKeepsRollups", testRetention},
		{"Usage_RecentNewestFirst", testRecent},
		{"Usage_BatchKeepsEveryColumn", testBatchColumns},
		{"Usage_UseSinceBySecondWithoutRefusals", testUseSince},
		{"Sessions_CreateGetDelete", testSessionsCreateGetDelete},
		{"Sessions_KeyPurgeTrim", testSessionsKeyPurgeTrim},
		{"Responses_ChainOwnerExpiry", testResponsesChain},
		{"Responses_BrokenChainDeletePurge", testResponsesBrokenDeletePurge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

func newKey(name string) *keys.Key {
	return &keys.Key{ID: keys.NewID(), Name: name, Owner: "team-a", Hash: keys.Hash("secret-" + name + keys.NewID()), Hint: "sk-lg-…abcd",
		Models: []string{"qwen*"}, RPM: 60, TPM: 1000, MaxConc: 2, Priority: 3, BudgetUSD: 1.5, BudgetPeriod: "daily",
		Metadata: map[string]string{"app": name}, Objective: "critical", CreatedAt: time.UnixMilli(time.Now().UnixMilli())}
}

func testKeysCreateGetList(t *testing.T, s Store) {
	ctx := context.Background()
	a, b := newKey("a"), newKey("b")
	b.CreatedAt = a.CreatedAt.Add(time.Second)
	for _, k := range []*keys.Key{a, b} {
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetKey(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "a" || got.Owner != "team-a" || got.RPM != 60 || got.TPM != 1000 || got.MaxConc != 2 || got.Priority != 3 || got.BudgetUSD != 1.5 ||
		got.BudgetPeriod != "daily" || got.Metadata["app"] != "a" || len(got.Models) != 1 || got.Models[0] != "qwen*" ||
		!got.CreatedAt.Equal(a.CreatedAt) || got.Hash != a.Hash || got.Objective != "critical" {
		t.Fatalf("key did not round-trip: %+v", got)
	}
	list, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != b.ID {
		t.Fatalf("list = %d keys, first %v; want 2, newest (b) first", len(list), list[0].ID)
	}
	if _, err := s.GetKey(ctx, "key_missing"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("missing key: err = %v, want ErrNotFound", err)
	}
}

func testKeysUpdate(t *testing.T, s Store) {
	ctx := context.Background()
	k := newKey("u")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	v0, _ := s.KeysVersion(ctx)
	exp := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	k.Name, k.RPM, k.TPM, k.MaxConc, k.BudgetUSD, k.BudgetPeriod, k.Models, k.ExpiresAt, k.Objective = "renamed", 5, 50, 1, 9, "monthly", nil, &exp, "batch.low"
	k.Priority = 5
	if err := s.UpdateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetKey(ctx, k.ID)
	if got.Name != "renamed" || got.RPM != 5 || got.TPM != 50 || got.MaxConc != 1 || got.Priority != 5 || got.BudgetUSD != 9 || got.BudgetPeriod != "monthly" ||
		len(got.Models) != 0 || got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) || got.Objective != "batch.low" {
		t.Fatalf("update not stored: %+v", got)
	}
	if v1, _ := s.KeysVersion(ctx); v1 <= v0 {
		t.Fatalf("version %d -> %d: an update must bump it so replicas reload", v0, v1)
	}
	missing := newKey("missing")
	if err := s.UpdateKey(ctx, missing); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("update of unknown key: err = %v, want ErrNotFound", err)
	}
}

func testKeysRotate(t *testing.T, s Store) {
	ctx := context.Background()
	k := newKey("r")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	v0, _ := s.KeysVersion(ctx)
	secret, err := keys.Rotate(ctx, s, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetKey(ctx, k.ID)
	if got.Hash != keys.Hash(secret) || got.Hash == k.Hash || got.Hint != keys.Hint(secret) {
		t.Fatal("rotate did not replace the hash and hint")
	}
	if v1, _ := s.KeysVersion(ctx); v1 <= v0 {
		t.Fatal("rotate must bump the key version")
	}
	if err := s.RevokeKey(ctx, k.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Rotate(ctx, s, k.ID); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("rotating a revoked key: err = %v, want ErrNotFound", err)
	}
}

func testKeysRevoke(t *testing.T, s Store) {
	ctx := context.Background()
	k := newKey("v")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	first := time.UnixMilli(time.Now().UnixMilli())
	if err := s.RevokeKey(ctx, k.ID, first); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, k.ID, first.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetKey(ctx, k.ID)
	if got.RevokedAt == nil || !got.RevokedAt.Equal(first) {
		t.Fatalf("revoked_at = %v, want the first revocation %v", got.RevokedAt, first)
	}
	if err := s.RevokeKey(ctx, "key_nope", first); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("revoke unknown: err = %v", err)
	}
}

func testSettings(t *testing.T, s Store) {
	ctx := context.Background()
	if v, err := s.GetSetting(ctx, "x"); err != nil || v != "" {
		t.Fatalf("unset setting = %q, %v", v, err)
	}
	for _, v := range []string{"1", "2"} {
		if err := s.SetSetting(ctx, "x", v); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := s.GetSetting(ctx, "x"); v != "2" {
		t.Fatalf("setting = %q, want 2", v)
	}
}

// records returns n records spread over the given span ending at end.
func records(n int, end time.Time, span time.Duration, prefix string) []usage.Record {
	out := make([]usage.Record, n)
	for i := range out {
		out[i] = usage.Record{
			ID: fmt.Sprintf("%s-%d", prefix, i), Time: end.Add(-span + time.Duration(i)*span/time.Duration(n)),
			KeyID: []string{"key_a", "key_b", "master"}[i%3], Model: []string{"qwen", "llama"}[i%2], Backend: []string{"vllm", "sglang"}[i%5/3],
			Endpoint: "chat", Status: []int{200, 200, 200, 429, 502}[i%5], PromptTokens: 10 + i%7, CachedTokens: i % 5, CompletionTokens: 20 + i%11,
			Latency: time.Duration(1000+37*i%9000) * time.Microsecond, CostUSD: float64(i%4) * 0.001, Estimated: i%13 == 0,
		}
	}
	return out
}

func testUsageExactlyOnce(t *testing.T, s Store) {
	ctx := context.Background()
	recs := records(300, time.Now(), 3*time.Hour, "x")
	if err := s.InsertUsage(ctx, recs[:200]); err != nil {
		t.Fatal(err)
	}
	// A replayed batch overlapping the first, with a duplicate inside it.
	replay := append(append([]usage.Record{}, recs[100:]...), recs[250])
	if err := s.InsertUsage(ctx, replay); err != nil {
		t.Fatal(err)
	}
	rows, distinct, err := s.CountUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rows != 300 || distinct != 300 {
		t.Fatalf("rows = %d distinct = %d, want 300 each", rows, distinct)
	}
	sum, err := s.Summary(ctx, usage.Filter{GroupBy: []string{"model"}})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, r := range sum {
		total += r.Requests
	}
	if total != 300 {
		t.Fatalf("summary counts %d requests, want 300: rollups must not count replays", total)
	}
}

// A store may write a batch in multi-row statements while it holds only
// new records (SQLite does, 32 rows to a statement); a record stored
// already, wherever it sits in the batch (inside a full statement, in the
// remainder, twice in the batch), must still be written and counted once.
func testUsageReplayPositions(t *testing.T, s Store) {
	ctx := context.Background()
	recs := records(200, time.Now(), time.Hour, "p")
	if err := s.InsertUsage(ctx, recs[:10]); err != nil {
		t.Fatal(err)
	}
	batches := [][]usage.Record{
		append(append([]usage.Record{}, recs[10:74]...), recs[3]),              // 64 new, then a stored one in the remainder
		append(append([]usage.Record{}, recs[74:90]...), recs[20:36]...),       // 16 new and 16 stored in one statement's worth
		append(append([]usage.Record{}, recs[90:140]...), recs[100]),           // a record twice in a batch of new ones
		append(append([]usage.Record{recs[140]}, recs[141:172]...), recs[140]), // twice, 32 apart
		recs[172:200], // 28 new: the remainder only
	}
	for i, b := range batches {
		if err := s.InsertUsage(ctx, b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	rows, distinct, err := s.CountUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rows != 200 || distinct != 200 {
		t.Fatalf("rows = %d distinct = %d, want 200 each", rows, distinct)
	}
	sum, err := s.Summary(ctx, usage.Filter{GroupBy: []string{"model"}})
	if err != nil {
		t.Fatal(err)
	}
	var total, prompt int64
	for _, r := range sum {
		total += r.Requests
		prompt += r.PromptTokens
	}
	var wantPrompt int64
	for _, r := range recs {
		wantPrompt += int64(r.PromptTokens)
	}
	if total != 200 || prompt != wantPrompt {
		t.Fatalf("summary counts %d requests and %d prompt tokens, want 200 and %d: rollups must count each record once", total, prompt, wantPrompt)
	}
}

type want struct {
	req, errs, pt, cached, ct, est int64
	cost                           float64
	lats                           []int64
}

func testSummaryMatchesRaw(t *testing.T, s Store) {
	ctx := context.Background()
	end := time.Now().Truncate(time.Minute)
	recs := records(2000, end, 5*time.Hour, "s")
	if err := s.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	// A range that starts and ends mid-hour exercises rollups and raw edges.
	since, until := end.Add(-4*time.Hour-17*time.Minute), end.Add(-23*time.Minute)
	exp := map[string]*want{}
	for _, r := range recs {
		if r.Time.Before(since) || !r.Time.Before(until) || r.Model != "qwen" {
			continue
		}
		k := r.KeyID + "/" + r.Backend
		w := exp[k]
		if w == nil {
			w = &want{}
			exp[k] = w
		}
		w.req++
		if r.Status >= 400 {
			w.errs++
		}
		w.pt += int64(r.PromptTokens)
		w.cached += int64(r.CachedTokens)
		w.ct += int64(r.CompletionTokens)
		if r.Estimated {
			w.est++
		}
		w.cost += r.CostUSD
		w.lats = append(w.lats, r.Latency.Microseconds())
	}
	rows, err := s.Summary(ctx, usage.Filter{Since: since, Until: until, Model: "qwen", GroupBy: []string{"key", "backend"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(exp) {
		t.Fatalf("%d rows, want %d", len(rows), len(exp))
	}
	for _, r := range rows {
		w := exp[r.KeyID+"/"+r.Backend]
		if w == nil {
			t.Fatalf("unexpected row %+v", r)
		}
		if r.Requests != w.req || r.Errors != w.errs || r.PromptTokens != w.pt || r.CachedTokens != w.cached || r.CompletionTokens != w.ct || r.Estimated != w.est ||
			math.Abs(r.CostUSD-w.cost) > 1e-9 {
			t.Fatalf("row %s/%s = %+v, want %+v", r.KeyID, r.Backend, r, *w)
		}
		sort.Slice(w.lats, func(i, j int) bool { return w.lats[i] < w.lats[j] })
		for _, p := range []struct {
			got float64
			q   float64
		}{{r.P50LatencyMS, 0.5}, {r.P95LatencyMS, 0.95}} {
			exact := float64(w.lats[int(math.Ceil(p.q*float64(len(w.lats))))-1]) / 1000
			if math.Abs(p.got-exact) > 0.05*exact {
				t.Fatalf("p%.0f = %.3f ms, exact %.3f ms: histogram error above 5%%", p.q*100, p.got, exact)
			}
		}
	}
	if rows[0].KeyID == "master" && rows[0].KeyName != "(master key)" {
		t.Fatalf("master key row named %q", rows[0].KeyName)
	}
}

func testSummaryByDay(t *testing.T, s Store) {
	ctx := context.Background()
	day := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	recs := []usage.Record{
		{ID: "d1", Time: day.Add(-time.Minute), KeyID: "k", Model: "m", Status: 200},
		{ID: "d2", Time: day.Add(time.Minute), KeyID: "k", Model: "m", Status: 200},
		{ID: "d3", Time: day.Add(23 * time.Hour), KeyID: "k", Model: "m", Status: 500},
	}
	if err := s.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Summary(ctx, usage.Filter{Since: day.Add(-48 * time.Hour), Until: day.Add(48 * time.Hour), GroupBy: []string{"day"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Day != "2026-03-09" || rows[0].Requests != 1 || rows[1].Day != "2026-03-10" || rows[1].Requests != 2 || rows[1].Errors != 1 {
		t.Fatalf("by day = %+v", rows)
	}
	if _, err := s.Summary(ctx, usage.Filter{GroupBy: []string{"colour"}}); err == nil {
		t.Fatal("unknown group accepted")
	}
}

func testRetention(t *testing.T, s Store) {
	ctx := context.Background()
	old := time.Now().Add(-72 * time.Hour).Truncate(time.Hour)
	recs := []usage.Record{
		{ID: "o1", Time: old.Add(time.Minute), KeyID: "k", Model: "m", Status: 200, PromptTokens: 5},
		{ID: "o2", Time: old.Add(2 * time.Minute), KeyID: "k", Model: "m", Status: 200, PromptTokens: 5},
		{ID: "n1", Time: time.Now(), KeyID: "k", Model: "m", Status: 200, PromptTokens: 5},
	}
	if err := s.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	n, err := s.DeleteUsageBefore(ctx, time.Now().Add(-24*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("deleted %d (%v), want 2", n, err)
	}
	if rows, _, _ := s.CountUsage(ctx); rows != 1 {
		t.Fatalf("%d raw rows left, want 1", rows)
	}
	sum, err := s.Summary(ctx, usage.Filter{Since: old, Until: old.Add(time.Hour), GroupBy: []string{"key"}})
	if err != nil || len(sum) != 1 || sum[0].Requests != 2 || sum[0].PromptTokens != 10 {
		t.Fatalf("whole-hour summary after retention = %+v (%v): rollups must survive", sum, err)
	}
}

func testRecent(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli())
	recs := []usage.Record{
		{ID: "r1", ClientRequestID: "client-1", Time: now.Add(-time.Second), KeyID: "k", Model: "m", Status: 200, TTFT: 5 * time.Millisecond, Latency: 9 * time.Millisecond, Stream: true},
		{ID: "r2", Time: now, KeyID: "k", Model: "m", ServedModel: "fb", Backend: "cloud", UpstreamModel: "up", Status: 200, Estimated: true, CostUSD: 0.25},
	}
	if err := s.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Recent(ctx, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("recent = %d, %v", len(got), err)
	}
	if got[0].ID != "r2" || got[0].ClientRequestID != "" || got[1].ClientRequestID != "client-1" || !got[0].Estimated || got[0].CostUSD != 0.25 || got[1].TTFT != 5*time.Millisecond || !got[1].Stream || !got[1].Time.Equal(recs[0].Time) {
		t.Fatalf("recent = %+v", got)
	}
	if r := got[0]; r.Model != "m" || r.ServedModel != "fb" || r.Backend != "cloud" || r.UpstreamModel != "up" || got[1].ServedModel != "" {
		t.Fatalf("recent = %+v; want the fallback that served r2 kept beside the model asked for", got)
	}
}

// A batch large enough for the multi-row statements stores every column
// as given, the strings the SQLite statements send as NULL when empty
// (client request id, served model, error type) included.
func testBatchColumns(t *testing.T, s Store) {
	ctx := context.Background()
	base := time.UnixMilli(time.Now().UnixMilli())
	recs := make([]usage.Record, 70)
	for i := range recs {
		r := usage.Record{ID: fmt.Sprintf("b%03d", i), Time: base.Add(time.Duration(i) * time.Millisecond), KeyID: "k", Model: "m",
			Backend: "b", UpstreamModel: "up", Endpoint: "chat", Status: 200, PromptTokens: i, CompletionTokens: 2 * i,
			CachedTokens: i % 3, TTFT: time.Duration(i) * time.Microsecond, Latency: time.Duration(i) * time.Millisecond,
			Estimated: i%2 == 0, Stream: i%3 == 0, CostUSD: float64(i) / 1000}
		if i%4 == 1 {
			r.ClientRequestID, r.ServedModel, r.ErrorType, r.Status = fmt.Sprintf("client-%d", i), "fb", "upstream_error", 502
		}
		recs[i] = r
	}
	if err := s.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Recent(ctx, 100)
	if err != nil || len(got) != len(recs) {
		t.Fatalf("recent = %d, %v", len(got), err)
	}
	for i, g := range got {
		want := recs[len(recs)-1-i]
		if !g.Time.Equal(want.Time) {
			t.Fatalf("record %s: time %v, want %v", want.ID, g.Time, want.Time)
		}
		g.Time = want.Time
		if g != want {
			t.Fatalf("record %s:\n got %+v\nwant %+v", want.ID, g, want)
		}
	}
}

// UseSince says, per key, model, model that served and second, what went
// through since a time: the gateway's own 429 refusals took nothing from a
// rate limit and are left out; a backend's error still counts.
func testUseSince(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	at := func(ms int) time.Time { return now.Add(time.Duration(ms) * time.Millisecond) }
	recs := []usage.Record{
		{ID: "old", Time: at(-61_000), KeyID: "k", Model: "m", Status: 200, PromptTokens: 1000},
		{ID: "a", Time: at(-2000), KeyID: "k", Model: "m", Status: 200, PromptTokens: 10, CompletionTokens: 5},
		{ID: "b", Time: at(-1500), KeyID: "k", Model: "m", Status: 502, PromptTokens: 7},
		{ID: "c", Time: at(-1000), KeyID: "k", Model: "m", Status: 200, PromptTokens: 1, CompletionTokens: 1},
		{ID: "d", Time: at(-1000), KeyID: "k", Model: "m", Status: 429, ErrorType: "rate_limit_requests"},
		{ID: "e", Time: at(-1000), KeyID: "k2", Model: "m", Status: 200, PromptTokens: 3},
		{ID: "f", Time: at(-1000), KeyID: "k2", Model: "m", ServedModel: "fb", Status: 200, PromptTokens: 4},
	}
	if err := s.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got, err := s.UseSince(ctx, now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool {
		if got[i].KeyID != got[j].KeyID {
			return got[i].KeyID < got[j].KeyID
		}
		if got[i].Second != got[j].Second {
			return got[i].Second < got[j].Second
		}
		return got[i].ServedModel < got[j].ServedModel
	})
	sec := now.Unix()
	want := []usage.SecondUse{
		{KeyID: "k", Model: "m", Second: sec - 2, Requests: 2, Tokens: 22},
		{KeyID: "k", Model: "m", Second: sec - 1, Requests: 1, Tokens: 2},
		{KeyID: "k2", Model: "m", Second: sec - 1, Requests: 1, Tokens: 3},
		{KeyID: "k2", Model: "m", ServedModel: "fb", Second: sec - 1, Requests: 1, Tokens: 4},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("UseSince = %+v\nwant %+v", got, want)
	}
}

// A client's X-Request-Id is its own business: five requests sending the
// same one are five records, found together by that id; only the
// server-made ID makes a write a replay.
func testUsageClientIDNotUnique(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli())
	var recs []usage.Record
	for i := 0; i < 5; i++ {
		recs = append(recs, usage.Record{ID: usage.NewID(), ClientRequestID: "same", Time: now.Add(time.Duration(i) * time.Millisecond),
			KeyID: "k", Model: "m", Status: 200, CostUSD: 0.5})
	}
	for _, r := range recs { // one batch each, as five requests are
		if err := s.InsertUsage(ctx, []usage.Record{r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.InsertUsage(ctx, recs[2:4]); err != nil { // a spool replay
		t.Fatal(err)
	}
	rows, distinct, err := s.CountUsage(ctx)
	if err != nil || rows != 5 || distinct != 5 {
		t.Fatalf("rows = %d distinct = %d (%v), want 5 each", rows, distinct, err)
	}
	got, err := s.ByClientRequestID(ctx, "same", 10)
	if err != nil || len(got) != 5 {
		t.Fatalf("records for client id = %d (%v), want 5", len(got), err)
	}
	if got[0].ID != recs[4].ID || got[0].ClientRequestID != "same" {
		t.Fatalf("newest record %+v, want %s", got[0], recs[4].ID)
	}
	sum, err := s.Summary(ctx, usage.Filter{GroupBy: []string{"key"}})
	if err != nil || len(sum) != 1 || sum[0].Requests != 5 || math.Abs(sum[0].CostUSD-2.5) > 1e-9 {
		t.Fatalf("summary = %+v (%v), want 5 requests costing 2.5", sum, err)
	}
	if none, err := s.ByClientRequestID(ctx, "other", 10); err != nil || len(none) != 0 {
		t.Fatalf("records for an unknown client id = %d (%v)", len(none), err)
	}
}

func testHealthy(t *testing.T, s Store) {
	if err := s.CheckHealth(context.Background()); err != nil {
		t.Fatalf("a freshly opened store is unhealthy: %v", err)
	}
}
