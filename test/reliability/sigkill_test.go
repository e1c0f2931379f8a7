package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/store/postgres"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/testenv"
)

// The load and the kills of the SIGKILL tests.
const (
	killRounds  = 5
	killClients = 8                       // concurrent clients, half their requests streamed
	loadMin     = 400 * time.Millisecond  // a round's load runs for a random time
	loadMax     = 1600 * time.Millisecond // in [loadMin, loadMax) before the kill
)

// slot is one replica position: its config and the process now serving it.
type slot struct {
	name   string
	config string
	mu     sync.Mutex
	gw     *testenv.Gateway
}

func (s *slot) base() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gw.Base
}

func (s *slot) start(t *testing.T) *testenv.Gateway {
	g := testenv.StartGateway(t, bin, s.name, s.config, master)
	s.mu.Lock()
	s.gw = g
	s.mu.Unlock()
	return g
}

// roundFigures is what one round's requests came to.
type roundFigures struct {
	victim    string
	loadFor   time.Duration
	replayed  int // records the restarted process wrote from its spool
	restarted time.Duration
	gw        *testenv.Gateway // the process started after the kill
	outcomes  []outcome
}

// killUnderLoad drives killClients clients at the slots' processes (each
// request to the next slot, a unique X-Request-Id each), SIGKILLs one
// slot's process per round at a random moment and restarts it on the same
// database and spool directory, killRounds times. It then stops every
// process gracefully and returns each round's figures.
func killUnderLoad(t *testing.T, slots []*slot) []*roundFigures {
	for _, s := range slots {
		s.start(t)
	}
	rounds := make([]*roundFigures, killRounds+1) // the last: requests after the last restart
	for i := range rounds {
		rounds[i] = &roundFigures{}
	}
	var (
		mu    sync.Mutex
		round atomic.Int32
		stop  atomic.Bool
		wg    sync.WaitGroup
		run   = testenv.Unique()
	)
	t.Cleanup(func() { stop.Store(true); wg.Wait() }) // also when a restart fails the test
	for c := 0; c < killClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := newClient()
			for i := 0; !stop.Load(); i++ {
				r := int(round.Load())
				s := slots[(c+i)%len(slots)]
				id := fmt.Sprintf("rel-%s-r%d-c%d-%d", run, r, c, i)
				o := send(cl, s.base(), master, id, (c+i)%2 == 0)
				mu.Lock()
				rounds[r].outcomes = append(rounds[r].outcomes, o)
				mu.Unlock()
				if !o.complete {
					time.Sleep(5 * time.Millisecond) // the process is down: do not spin
				}
			}
		}()
	}
	replayedRE := regexp.MustCompile(`written from the spool.*records=(\d+)|still in the spool.*written=(\d+)`)
	for r := 0; r < killRounds; r++ {
		f := rounds[r]
		victim := slots[r%len(slots)]
		f.victim = victim.name
		f.loadFor = loadMin + rand.N(loadMax-loadMin)
		time.Sleep(f.loadFor) // the subject: the kill falls at a random moment of the load
		victim.mu.Lock()
		g := victim.gw
		victim.mu.Unlock()
		g.Kill(t)
		start := time.Now()
		ng := victim.start(t)
		f.restarted = time.Since(start)
		f.gw = ng
		round.Store(int32(r + 1))
	}
	time.Sleep(300 * time.Millisecond) // some load on the last processes too
	stop.Store(true)
	wg.Wait()
	for _, s := range slots {
		s.mu.Lock()
		g := s.gw
		s.mu.Unlock()
		g.Stop(t)
	}
	// The log is written in batches: read it once the processes are gone.
	for _, f := range rounds {
		if f.gw == nil {
			continue
		}
		if m := replayedRE.FindStringSubmatch(f.gw.Log.String()); m != nil {
			f.replayed, _ = strconv.Atoi(m[1] + m[2])
		}
	}
	return rounds
}

// checkRecords matches the clients' answers with the ledger: every
// complete answer has a record, no request has two, and no record belongs
// to a request nobody sent. It prints the figures of each round.
func checkRecords(t *testing.T, rounds []*roundFigures, records map[string]int) {
	t.Helper()
	var sent, answered, found, missing, dups, cut, cutRecorded, replayed, noAnswer int
	ours := map[string]bool{}
	t.Logf("%-5s %-6s %7s %5s %8s %8s %7s %5s %9s %4s %8s %8s", "round", "killed", "load", "sent", "answers", "records", "missing", "dups", "no answer", "cut", "replayed", "restart")
	for i, f := range rounds {
		var s, a, fo, mi, du, cu, cr, na int
		for _, o := range f.outcomes {
			ours[o.id] = true
			s++
			if o.wrong != "" {
				t.Errorf("request %s: %s", o.id, o.wrong)
			}
			n := records[o.id]
			if n > 0 {
				fo++
			}
			if n > 1 {
				du += n - 1
				t.Errorf("request %s has %d records", o.id, n)
			}
			if o.complete {
				if o.status != 200 {
					t.Errorf("request %s: complete answer with status %d", o.id, o.status)
				}
				a++
				if n == 0 {
					mi++
					t.Errorf("request %s (stream %v): the client received the whole answer, but the ledger has no record", o.id, o.stream)
				}
			} else if o.status != 0 {
				cu++ // headers arrived, the rest was cut by the kill
				if n > 0 {
					cr++
				}
			} else {
				na++ // refused while the process was down, or cut before the headers
			}
		}
		name := strconv.Itoa(i + 1)
		if i == len(rounds)-1 {
			name, f.victim = "after", "-"
		}
		t.Logf("%-5s %-6s %7s %5d %8d %8d %7d %5d %9d %4d %8d %8s", name, f.victim, f.loadFor.Round(time.Millisecond), s, a, fo, mi, du, na, cu, f.replayed, f.restarted.Round(time.Millisecond))
		if i < len(rounds)-1 && a == 0 {
			t.Errorf("round %d: no answer completed: the load did not run", i+1)
		}
		sent, answered, found, missing, dups, cut, cutRecorded, replayed, noAnswer = sent+s, answered+a, found+fo, missing+mi, dups+du, cut+cu, cutRecorded+cr, replayed+f.replayed, noAnswer+na
	}
	strangers := 0
	for id, n := range records {
		if !ours[id] {
			strangers += n
			t.Errorf("%d records with client id %q, which no client sent", n, id)
		}
	}
	t.Logf("total: %d requests sent, %d answers received whole, %d requests with a record, %d missing, %d duplicate records, %d records of requests nobody sent; "+
		"%d without an answer (refused while down, or cut before the headers); %d answers cut by a kill after their headers (%d of them recorded); %d records replayed from spools after kills",
		sent, answered, found, missing, dups, strangers, noAnswer, cut, cutRecorded, replayed)
	if missing != 0 || dups != 0 || strangers != 0 {
		t.Fatalf("ledger vs answers: %d missing, %d duplicates, %d strangers; want 0 of each", missing, dups, strangers)
	}
	if replayed == 0 {
		t.Fatalf("no kill caught a record in a spool (0 replayed in %d rounds): the replay after a kill was not exercised", killRounds)
	}
}

func countByClientID(t *testing.T, st recordReader) map[string]int {
	out := map[string]int{}
	for id, rs := range recordsByClientID(t, st) {
		out[id] = len(rs)
	}
	return out
}

func TestSIGKILL_SQLite_EveryAnswerReceivedHasExactlyOneRecord(t *testing.T) {
	gate(t)
	start := time.Now()
	up := newUpstream(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "llmgate.db")
	cfg := writeConfig(t, dir, db, filepath.Join(dir, "spool"), up, "")
	rounds := killUnderLoad(t, []*slot{{name: "gw", config: cfg}})
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkRecords(t, rounds, countByClientID(t, st))
	t.Logf("SQLite, %d SIGKILLs under load of %d clients: %v", killRounds, killClients, time.Since(start).Round(time.Millisecond))
}

func TestSIGKILL_PostgresOneOfTwoReplicas_EveryAnswerReceivedHasExactlyOneRecord(t *testing.T) {
	gate(t)
	start := time.Now()
	pg := testenv.Postgres(t)
	up := newUpstream(t)
	var slots []*slot
	for _, name := range []string{"A", "B"} {
		dir := t.TempDir()
		slots = append(slots, &slot{name: name, config: writeConfig(t, dir, pg, filepath.Join(dir, "spool"), up, "")})
	}
	rounds := killUnderLoad(t, slots)
	st, err := postgres.Open(context.Background(), pg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkRecords(t, rounds, countByClientID(t, st))
	t.Logf("PostgreSQL, two replicas, one SIGKILLed per round, %d rounds under load of %d clients: %v", killRounds, killClients, time.Since(start).Round(time.Millisecond))
}
