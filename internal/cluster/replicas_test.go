package cluster_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/admin"
	"llmgate/internal/store/postgres"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

const master = "sk-lg-cluster-test-master"

// replica is one llmgate serve process.
type replica struct {
	*testenv.Gateway
	name string
	base string
}

// buildBinary returns the llmgate binary, built once for the package.
func buildBinary(t *testing.T) string { return testenv.SharedLLMGate(t) }

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveSharedLLMGate()
	os.Exit(code)
}

// startReplica starts llmgate serve with its own spool directory; env
// entries (KEY=value) are added to the environment.
func startReplica(t *testing.T, bin, name, config string, env ...string) *replica {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "llmgate.yaml")
	config += fmt.Sprintf("spool_dir: %q\n", filepath.Join(dir, "spool"))
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	g := testenv.StartGateway(t, bin, name, cfgPath, master, env...)
	return &replica{Gateway: g, name: name, base: g.Base}
}

// stop sends SIGTERM and waits for the graceful shutdown (ledger flush).
func (r *replica) stop(t *testing.T) { r.Stop(t) }

type result struct {
	status int
	header http.Header
	body   string
}

var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func chat(t *testing.T, base, key, body string) result {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("request to %s: %v", base, err)
		return result{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// burst sends n requests from clients goroutines, alternating replicas.
func burst(t *testing.T, reps []*replica, key, body string, clients, perClient int) []result {
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perClient; i++ {
				r := chat(t, reps[(c+i)%len(reps)].base, key, body)
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

func TestReplicas_ShareLimitsAndBudgetsAndRevocationReachesBothWithinASecond(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two gateway processes")
	}
	pg := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	up := newUpstream(t, 100*time.Millisecond, 300)
	bin := buildBinary(t)
	cfg := fmt.Sprintf("database: %q\nredis: %q\nredis_prefix: %q\nbackends:\n  up: {url: %q}\nmodels:\n  m: {backend: up, input_price: 1, output_price: 3}\n",
		pg, redisURL, prefix, up.URL+"/v1")
	a := startReplica(t, bin, "A", cfg)
	b := startReplica(t, bin, "B", cfg)
	reps := []*replica{a, b}
	adminA := admin.NewClient(a.base, master)
	ctx := context.Background()
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":500}`

	// 1. RPM 60 shared by both replicas.
	rpm := 60
	is, err := adminA.CreateKey(ctx, admin.KeySpec{Name: ptr("rpm"), RPM: &rpm})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	admitted := 0
	waitKnown(t, b, is.Secret, body, &admitted) // B learns the key by polling
	results := burst(t, reps, is.Secret, body, 40, 5)
	elapsed := time.Since(start)
	refused := 0
	for _, r := range results {
		switch r.status {
		case 200:
			admitted++
		case 429:
			refused++
			if r.header.Get("Retry-After") == "" || r.header.Get("X-Ratelimit-Limit-Requests") != "60" ||
				r.header.Get("X-Ratelimit-Remaining-Requests") == "" || !strings.Contains(r.body, "60 requests per minute") {
				t.Fatalf("429 without OpenAI rate-limit headers or a message naming the limit: %v %s", r.header, r.body)
			}
		default:
			t.Fatalf("unexpected status %d: %s", r.status, r.body)
		}
	}
	// A bucket of 60 refilling at 1/s admits at most 60 + elapsed seconds.
	maxAllowed := rpm + int(math.Ceil(elapsed.Seconds()))
	t.Logf("RPM 60 across two replicas: %d admitted, %d refused in %v (bound %d)", admitted, refused, elapsed.Round(time.Millisecond), maxAllowed)
	if admitted < rpm || admitted > maxAllowed {
		t.Fatalf("admitted %d, want between %d and %d", admitted, rpm, maxAllowed)
	}

	// 2. A budget shared by both replicas, under concurrency.
	budget, period := 0.02, "daily"
	isB, err := adminA.CreateKey(ctx, admin.KeySpec{Name: ptr("budget"), BudgetUSD: &budget, BudgetPeriod: &period})
	if err != nil {
		t.Fatal(err)
	}
	waitKnown(t, b, isB.Secret, body, nil)
	up.maxSeen.Store(0)
	results = burst(t, reps, isB.Secret, body, 40, 3)
	ok := 0
	for _, r := range results {
		if r.status == 200 {
			ok++
		} else if r.status != 429 || !strings.Contains(r.body, "budget exhausted") {
			t.Fatalf("unexpected %d: %s", r.status, r.body)
		}
	}
	maxInFlight := up.maxSeen.Load()

	// 3. Revocation on A reaches B within a second.
	isR, err := adminA.CreateKey(ctx, admin.KeySpec{Name: ptr("revoke")})
	if err != nil {
		t.Fatal(err)
	}
	waitKnown(t, b, isR.Secret, body, nil)
	if _, err := adminA.RevokeKey(ctx, isR.Key.ID); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	last := 0
	if _, ok := testenv.Poll(3*time.Second, func() bool { last = chat(t, b.base, isR.Secret, body).status; return last == 401 }); !ok {
		t.Fatalf("replica B still accepts the key 3s after revocation on A (last status %d)", last)
	}
	took := time.Since(revoked)
	t.Logf("revocation on A refused on B after %v", took.Round(time.Millisecond))
	if took > time.Second {
		t.Fatalf("revocation took %v to reach replica B, want under 1s", took)
	}

	// Shut both down (flushing their ledgers) and read what they wrote.
	a.stop(t)
	b.stop(t)
	st, err := postgres.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.Summary(ctx, usage.Filter{KeyID: isB.Key.ID, GroupBy: []string{"key"}})
	if err != nil || len(rows) != 1 {
		t.Fatalf("budget key usage: %v %v", rows, err)
	}
	spent := rows[0].CostUSD
	promptEst := float64((len(body)+3)/4) * 1 / 1e6
	reserved := promptEst + 500*3/1e6
	actual := 300*1/1e6 + 500*3/1e6
	bound := budget + float64(maxInFlight)*math.Max(0, actual-reserved)
	t.Logf("budget $%.4f: %d admitted, spent $%.6f; per request reserved $%.6f, actual $%.6f; max in flight %d; documented bound $%.6f",
		budget, ok, spent, reserved, actual, maxInFlight, bound)
	if spent > bound+1e-9 {
		t.Fatalf("spent $%.6f exceeds the documented bound $%.6f", spent, bound)
	}
	if spent < budget-actual {
		t.Fatalf("spent $%.6f: the budget was not used up to within one request (refusing too early)", spent)
	}
	if rows[0].Requests != int64(len(results)+1) { // +1: the probe that waited for B
		t.Fatalf("ledger has %d records for the budget key, want %d: both replicas must record every request", rows[0].Requests, len(results)+1)
	}
	rows, err = st.Summary(ctx, usage.Filter{KeyID: is.Key.ID, GroupBy: []string{"key"}})
	if err != nil || len(rows) != 1 || rows[0].Requests != int64(admitted+refused) || rows[0].Errors != int64(refused) {
		t.Fatalf("RPM key ledger = %+v (%v), want %d records with %d errors", rows, err, admitted+refused, refused)
	}
}

// waitKnown polls a replica with a new key until it stops answering 401,
// counting an admitted probe.
func waitKnown(t *testing.T, r *replica, secret, body string, admitted *int) {
	known := func() bool {
		res := chat(t, r.base, secret, body)
		if res.status == 200 && admitted != nil {
			*admitted++
		}
		return res.status != 401
	}
	if _, ok := testenv.Poll(3*time.Second, known); !ok {
		t.Fatalf("replica %s does not know a new key after 3s", r.name)
	}
}

func ptr[T any](v T) *T { return &v }
