package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/ledger"
	"llmgate/internal/store/postgres"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

func TestLedger_DatabaseOutageMidLoadLosesAndDuplicatesNothing(t *testing.T) {
	pg := testenv.Postgres(t)
	u, _ := url.Parse(pg)
	px := newProxy(t, u.Host)
	u.Host = px.addr
	viaProxy := u.String()
	up := newUpstream(t, 0, 12)

	spool := filepath.Join(t.TempDir(), "spool")
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  up: {url: %q}\nmodels:\n  m: {backend: up, input_price: 1}\n", up.URL+"/v1")), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database, cfg.Listen, cfg.SpoolDir = viaProxy, "127.0.0.1:0", spool
	g, err := gateway.Start(context.Background(), gateway.Options{Config: cfg, MasterKey: master,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 20 * time.Millisecond, MaxBatch: 50}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = g.Close(context.Background())
		}
	})
	base := "http://" + g.Addr
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`

	var (
		mu   sync.Mutex
		ids  = map[string]bool{}
		sent atomic.Int64
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && sent.Load() < 20000 {
				r := chat(t, base, master, body)
				if r.status != 200 {
					t.Errorf("status %d during outage test: %s", r.status, r.body)
					return
				}
				sent.Add(1)
				mu.Lock()
				ids[r.header.Get("X-Request-Id")] = true
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // the load's pace
			}
		}()
	}
	// The subject is load before, during and after a 2s outage: the
	// sleeps below are the phases' lengths.
	time.Sleep(400 * time.Millisecond)
	before := sent.Load()
	px.Cut() // PostgreSQL unreachable mid-load
	outage := time.Now()
	// The ledger sees the outage; records wait in the spool.
	_, spooled := testenv.Poll(2*time.Second, func() bool { return g.Ledger.Healthy() != nil })
	time.Sleep(time.Until(outage.Add(2 * time.Second)))
	during := sent.Load() - before
	px.Restore()
	time.Sleep(400 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if err := g.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	closed = true
	if !spooled {
		t.Fatal("the ledger never reported the outage (Healthy): the outage path was not exercised")
	}
	if during == 0 {
		t.Fatal("no requests were served during the outage")
	}

	st, err := postgres.Open(context.Background(), pg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, distinct, err := st.CountUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests (%d during a 2s outage); ledger has %d rows, %d distinct", len(ids), during, rows, distinct)
	if rows != int64(len(ids)) || distinct != rows {
		t.Fatalf("ledger has %d rows (%d distinct) for %d requests: want every record exactly once", rows, distinct, len(ids))
	}
	recent, err := st.Recent(context.Background(), len(ids)+10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recent {
		if !ids[r.ID] && !ids[r.ClientRequestID] { // the echoed X-Request-Id: the record's id or the client's
			t.Fatalf("ledger record %s matches no request", r.ID)
		}
	}
	sum, err := st.Summary(context.Background(), usage.Filter{GroupBy: []string{"model"}})
	if err != nil || len(sum) != 1 || sum[0].Requests != int64(len(ids)) {
		t.Fatalf("rollups = %+v (%v), want %d requests: rollups must count each record once", sum, err, len(ids))
	}
	if left, _ := filepath.Glob(filepath.Join(spool, "*.jsonl")); len(left) != 0 {
		t.Fatalf("spool files left after the database returned: %v", left)
	}
}
