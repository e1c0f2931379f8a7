package ledger_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/ledger"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/usage"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const crashChildEnv = "LLMGATE_LEDGER_CRASH_CHILD"

// TestLedgerCrashChild is the process TestLedger_SIGKILLLosesNoAcknowledgedRecord
// kills: it adds records from several goroutines as fast as it can and
// reports each ID on fd 3 once Add has returned. Without the environment
// variable it does nothing.
func TestLedgerCrashChild(t *testing.T) {
	if os.Getenv(crashChildEnv) == "" {
		t.Skip("runs only as the child of TestLedger_SIGKILLLosesNoAcknowledgedRecord")
	}
	dir := os.Getenv(crashChildEnv)
	round := os.Getenv("LLMGATE_LEDGER_CRASH_ROUND")
	acks := os.NewFile(3, "acks")
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ledger.OpenSpool(filepath.Join(dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	// Small batches and a short interval: many takes, inserts and segment
	// deletions, so kills land in every phase of the ledger's work.
	l := ledger.NewLedger(st, ledger.Options{Spool: sp, MaxBatch: 64, Interval: 5 * time.Millisecond}, quiet)
	fmt.Fprintln(acks, "ready")
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := usage.NewID()
				r := usage.Record{ID: id, ClientRequestID: fmt.Sprintf("r%s-g%d-%d", round, g, i), Time: time.Now(), KeyID: "k",
					Model: "m", Status: 200, PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.001}
				if err := l.Add(r); err != nil {
					fmt.Fprintln(acks, "error", err)
					return
				}
				// One write(2) per line: atomic on a pipe, so lines
				// written before the kill arrive whole.
				if _, err := acks.Write([]byte(id + "\n")); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A gateway killed with SIGKILL under load loses no record whose Add had
// returned, and the replay at the next start stores each exactly once: the
// ledger's rows match its hourly rollups (a replayed record counted twice
// would show there; the primary key alone would hide it).
func TestLedger_SIGKILLLosesNoAcknowledgedRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills child processes")
	}
	dir := t.TempDir()
	const rounds = 5
	acked := map[string]bool{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 19))
	for round := 1; round <= rounds; round++ {
		ids := runAndKill(t, dir, round, time.Duration(20+rng.IntN(280))*time.Millisecond)
		for _, id := range ids {
			acked[id] = true
		}
		t.Logf("round %d: killed after %d acknowledged records", round, len(ids))
	}
	// The next start replays what the last kill left in the spool.
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sp, err := ledger.OpenSpool(filepath.Join(dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.NewLedger(st, ledger.Options{Spool: sp}, quiet)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rows, distinct, err := st.CountUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedIDs(t, filepath.Join(dir, "ledger.db"), int(rows))
	lost := 0
	for id := range acked {
		if !stored[id] {
			lost++
		}
	}
	sum, err := st.Summary(ctx, usage.Filter{GroupBy: []string{"key"}})
	if err != nil || len(sum) != 1 {
		t.Fatalf("summary = %+v (%v)", sum, err)
	}
	t.Logf("%d rounds: %d records acknowledged, %d stored (%d distinct), %d counted in rollups, %d lost",
		rounds, len(acked), rows, distinct, sum[0].Requests, lost)
	if lost != 0 {
		t.Fatalf("%d acknowledged records missing from the ledger", lost)
	}
	if rows != distinct || sum[0].Requests != rows {
		t.Fatalf("%d rows, %d distinct, %d in rollups: a replay stored or counted a record twice", rows, distinct, sum[0].Requests)
	}
	if len(acked) < rounds*10 {
		t.Fatalf("only %d records acknowledged over %d rounds: the load did not run", len(acked), rounds)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "spool", "*.jsonl")); len(left) != 0 {
		t.Fatalf("spool files left after the replay: %v", left)
	}
}

// storedIDs reads the IDs of the ledger's records straight from its
// SQLite file: loading every record through the store (tens of thousands,
// under the race detector) takes seconds and the check needs only IDs.
func storedIDs(t *testing.T, path string, n int) map[string]bool {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id FROM usage`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ids := make(map[string]bool, n)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// runAndKill starts the child, lets it add records for about d after it is
// ready, kills it with SIGKILL and returns the IDs it acknowledged.
func runAndKill(t *testing.T, dir string, round int, d time.Duration) []string {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, "LLMGATE_LEDGER_CRASH_ROUND="+strconv.Itoa(round))
	cmd.ExtraFiles = []*os.File{pw}
	var out syncBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var ids []string
	ready := time.After(30 * time.Second)
	var kill <-chan time.Time
	for {
		select {
		case line, ok := <-lines:
			if !ok { // the child is gone and everything it wrote is read
				goto done
			}
			switch {
			case line == "ready":
				kill, ready = time.After(d), nil
			case strings.HasPrefix(line, "error "):
				cmd.Process.Kill()
				t.Fatalf("child: %s", line)
			default:
				ids = append(ids, line)
			}
		case <-kill:
			cmd.Process.Signal(syscall.SIGKILL)
			kill = nil
		case <-ready:
			cmd.Process.Kill()
			t.Fatalf("child not ready after 30s: %s", out.String())
		}
	}
done:
	err = cmd.Wait()
	pr.Close()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not by SIGKILL: %s", err, out.String())
	}
	return ids
}

type syncBuf struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}
