package reliability_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/admin"
	"llmgate/internal/testenv"
)

// The slow-body attack and the measurement of the client beside it.
const (
	attackConns    = 50
	declaredLength = 32 << 20 // each connection declares a 32 MiB body...
	trickleBytes   = 16       // ...and sends this many bytes of it...
	trickleEvery   = 100 * time.Millisecond
	retryAfter     = time.Second // a refused connection comes back after the 429's Retry-After
	probeRequests  = 400         // requests of the other client without and with the attack
	probeWindows   = 8           // in turns: baseline, attack, baseline, attack...
	probeEvery     = 10 * time.Millisecond
	attackSettle   = 700 * time.Millisecond
	maxRSSGrowth   = 50 << 20
)

// rss returns the resident set size of process pid (Linux: VmRSS).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// probe sends n non-stream chat requests, one every period (or right after
// the previous one when it took longer), and returns their latencies.
func probe(t *testing.T, base, key string, n int, period time.Duration) []time.Duration {
	t.Helper()
	c := newClient()
	tick := time.NewTicker(period)
	defer tick.Stop()
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		<-tick.C
		start := time.Now()
		o := send(c, base, key, "", false)
		if !o.ok() {
			t.Fatalf("probe request %d: status %d, %v %s", i, o.status, o.err, o.wrong)
		}
		lat = append(lat, time.Since(start))
	}
	return lat
}

// quantile returns the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// slowConn is one attacker's connection.
type slowConn struct {
	conn   net.Conn
	opened time.Time
	status atomic.Int32 // the status of the answer, 0 while none came
}

// slowAttack keeps attackConns connections open, each sending request
// headers that declare a 32 MiB body and then a few bytes of it every
// trickleEvery. A connection that gets an answer (429 when the key is at
// max_body_reads_per_key) is replaced by a new one after the 429's
// Retry-After (1 s), so that each key always has as many bodies being
// read as the gateway lets it. Coming back sooner would be a flood of
// requests, which rpm limits (not body reading) answer, and on one
// machine the flooding client's own CPU would be measured too.
type slowAttack struct {
	addr  string
	keys  []string
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []*slowConn // the connection each attacker has now
	st    *attackStats
}

// attackStats counts the connections of attacks and their answers.
type attackStats struct {
	opened  atomic.Int64
	answers sync.Map // status -> *atomic.Int64
}

func startSlowAttack(addr string, keys []string, st *attackStats) *slowAttack {
	a := &slowAttack{addr: addr, keys: keys, stop: make(chan struct{}), conns: make([]*slowConn, attackConns), st: st}
	for i := 0; i < attackConns; i++ {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.attacker(i, keys[i%len(keys)])
		}()
	}
	return a
}

func (a *slowAttack) stopped() bool {
	select {
	case <-a.stop:
		return true
	default:
		return false
	}
}

func (a *slowAttack) attacker(i int, key string) {
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"+
		`{"model":"m","messages":[{"role":"user","content":"`, a.addr, key, declaredLength)
	chunk := bytes.Repeat([]byte("a"), trickleBytes)
	for !a.stopped() {
		conn, err := net.DialTimeout("tcp", a.addr, 5*time.Second)
		if err != nil {
			time.Sleep(trickleEvery) // the attacker's pace: dial again a tick later
			continue
		}
		sc := &slowConn{conn: conn, opened: time.Now()}
		a.mu.Lock()
		a.conns[i] = sc
		a.mu.Unlock()
		a.st.opened.Add(1)
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				return
			}
			if f := strings.Fields(line); len(f) >= 2 {
				code, _ := strconv.Atoi(f[1])
				sc.status.Store(int32(code))
				n, _ := a.st.answers.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		}()
		_ = conn.SetWriteDeadline(time.Now().Add(time.Minute))
		_, err = conn.Write([]byte(head))
		tick := time.NewTicker(trickleEvery)
	trickle:
		for err == nil {
			select {
			case <-a.stop:
				break trickle
			case <-answered:
				break trickle
			case <-tick.C:
				_, err = conn.Write(chunk)
			}
		}
		tick.Stop()
		conn.Close()
		<-answered
		select {
		case <-a.stop:
		case <-time.After(retryAfter):
		}
	}
}

// held returns the connections open for over a second with no answer (a
// refusal comes within milliseconds): the bodies the gateway is reading.
func (a *slowAttack) held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.conns {
		if c != nil && c.status.Load() == 0 && time.Since(c.opened) > time.Second {
			n++
		}
	}
	return n
}

func (st *attackStats) answered() string {
	var parts []string
	st.answers.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%d×%d", v.(*atomic.Int64).Load(), k))
		return true
	})
	slices.Sort(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (a *slowAttack) end() {
	close(a.stop)
	a.wg.Wait()
}

// Fifty connections declaring 32 MiB bodies and trickling bytes: the
// gateway's memory grows with the bytes that arrive (never with the
// declared length: allocating it would be 50 × 32 MiB = 1.6 GB), and
// another key's requests keep their latency. With one attacking key,
// max_body_reads_per_key refuses most connections at once; with fifty keys
// that cap does not apply, and the growth as bytes arrive must hold alone.
func TestSlowBodies_FiftyConnectionsDeclaring32MiB_BoundedMemoryAndOthersLatency(t *testing.T) {
	gate(t)
	for _, v := range []struct {
		name string
		keys int
	}{{"OneKey", 1}, {"FiftyKeys", attackConns}} {
		t.Run(v.name, func(t *testing.T) { slowBodies(t, v.keys) })
	}
}

func slowBodies(t *testing.T, nkeys int) {
	up := newUpstream(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "llmgate.db"), filepath.Join(dir, "spool"), up, "")
	g := testenv.StartGateway(t, bin, "gw", cfg, master)
	ad := admin.NewClient(g.Base, master)
	ctx := context.Background()
	newKey := func(name string) string {
		is, err := ad.CreateKey(ctx, admin.KeySpec{Name: &name})
		if err != nil {
			t.Fatal(err)
		}
		return is.Secret
	}
	var attackKeys []string
	for i := 0; i < nkeys; i++ {
		attackKeys = append(attackKeys, newKey(fmt.Sprintf("attacker-%d", i)))
	}
	victim := newKey("steady")

	probe(t, g.Base, victim, 100, time.Millisecond) // warm up: connections, caches, the heap
	before, err := rss(g.PID())
	if err != nil {
		t.Fatal(err)
	}
	var peak atomic.Int64
	peak.Store(before)
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for {
			if n, err := rss(g.PID()); err == nil && n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stopSampler:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// The baseline and the attack take turns, probeWindows times each, so
	// that a burst of load from elsewhere on the machine falls on both
	// rather than on one. A latency over the bound is measured once more
	// (figures of both printed): load from elsewhere can make one
	// measurement look worse, an attack that slows the gateway for others
	// does so every time.
	st := &attackStats{}
	held, latencyOK := 0, false
	for attempt := 1; attempt <= 2 && !latencyOK; attempt++ {
		var baseline, during []time.Duration
		for w := 0; w < probeWindows; w++ {
			baseline = append(baseline, probe(t, g.Base, victim, probeRequests/probeWindows, probeEvery)...)
			a := startSlowAttack(g.Addr, attackKeys, st)
			time.Sleep(attackSettle) // every connection open and trickling; refused ones coming back
			during = append(during, probe(t, g.Base, victim, probeRequests/probeWindows, probeEvery)...)
			held = max(held, a.held())
			a.end()
		}
		p50b, p99b, maxb := quantile(baseline, 0.5), quantile(baseline, 0.99), quantile(baseline, 1)
		p50d, p99d, maxd := quantile(during, 0.5), quantile(during, 0.99), quantile(during, 1)
		// p99 of 400 requests is the 396th slowest: at least five slow
		// answers must come together to move it, so one pause of the
		// machine (a GC, another process taking the CPU) cannot fail the
		// test. On loopback the baseline p99 is often under 2 ms, where a
		// single scheduler tick is a large fraction of it, so below 2 ms
		// the bound is max(2 × baseline, baseline + 5 ms): a flaky CI is
		// worse than a slightly looser bound, and what this guards
		// against (a gateway busy with the attack's bodies) costs far
		// more than 5 ms.
		bound := 2 * p99b
		if p99b < 2*time.Millisecond {
			bound = max(bound, p99b+5*time.Millisecond)
		}
		latencyOK = p99d <= bound
		t.Logf("attempt %d, other key, %d requests each: baseline p50 %v p99 %v max %v; under attack p50 %v p99 %v max %v; p99 bound %v: %s",
			attempt, probeRequests, p50b.Round(time.Microsecond), p99b.Round(time.Microsecond), maxb.Round(time.Microsecond),
			p50d.Round(time.Microsecond), p99d.Round(time.Microsecond), maxd.Round(time.Microsecond), bound.Round(time.Microsecond),
			map[bool]string{true: "within", false: "OVER"}[latencyOK])
	}
	close(stopSampler)
	<-samplerDone

	growth := peak.Load() - before
	answers := st.answered()
	t.Logf("%d connections declaring %d MiB bodies, %d bytes per %v, with %d key(s): %d connections opened, answers: %s; most bodies being read at once: %d",
		attackConns, declaredLength>>20, trickleBytes, trickleEvery, nkeys, st.opened.Load(), answers, held)
	t.Logf("gateway RSS: %.1f MiB before, %.1f MiB peak, growth %.1f MiB (bound %d MiB)",
		float64(before)/(1<<20), float64(peak.Load())/(1<<20), float64(growth)/(1<<20), maxRSSGrowth>>20)

	if nkeys == 1 {
		if held == 0 || held > 16 {
			t.Errorf("one key holds %d bodies open, want between 1 and max_body_reads_per_key (16)", held)
		}
		if answers == "none" {
			t.Errorf("no connection of the one key was refused: max_body_reads_per_key did not apply")
		}
	} else if held != attackConns {
		t.Errorf("at most %d of %d connections were being read at once: the attack did not hold the bodies open, so it proves nothing", held, attackConns)
	}
	if growth > maxRSSGrowth {
		t.Errorf("gateway RSS grew by %.1f MiB under the attack, want at most %d MiB", float64(growth)/(1<<20), maxRSSGrowth>>20)
	}
	if !latencyOK {
		t.Errorf("the other key's p99 under the attack was over the bound in both measurements")
	}
}
