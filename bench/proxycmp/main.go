// Command proxycmp compares llmgate with a direct call and with a tuned
// bare httputil.ReverseProxy in one run, on loopback, and prints the ratios.
//
//	go run ./bench/proxycmp            (or bench/gateway.sh)
//	bench/gateway.sh -duration 24s -b-rev ef4e37c   (A/B against a commit)
//
// It starts, as separate processes: a fixed-answer upstream, a plain TCP
// forwarder (the floor of any hop), a minimal HTTP/1.1 forwarder (one
// goroutine per connection, http.ReadRequest, no auth or accounting: the
// floor of an HTTP hop written with the standard library), a bare
// standard-library reverse proxy tuned as a user who measured would tune
// it (a keep-alive pool larger than the connections used), and `llmgate
// serve` (auth and ledger on); with -b or -b-rev, a second llmgate build
// beside it for an A/B of a change. Throughput at 16 connections is
// measured with wrk when installed (a closed-loop Go generator otherwise);
// latency at a fixed request rate with a wrk2-style open-loop generator that
// measures from the scheduled send time. In both tests the targets take
// turns in short slices (A/B/A/B), so that all of them see the same machine.
// For each hop it also prints CPU time and context switches per request,
// read from /proc, and the machine's load average before and after.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const fixedAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, this is a fixed answer."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"total_tokens":20,"completion_tokens":9}}`

const reqBody = `{"model":"m","messages":[{"role":"user","content":"Say hello to the benchmark"}],"max_tokens":16}`

const masterKey = "sk-lg-proxycmp-master"

type envList []string

func (e *envList) String() string     { return strings.Join(*e, " ") }
func (e *envList) Set(v string) error { *e = append(*e, v); return nil }

var gwEnv, gwEnvB envList

var compareBin, compareRev, mainBin string

// gwYAML holds extra top-level config lines for gateway a and b.
var gwYAML = map[string]*string{"a": new(string), "b": new(string)}

var gwOnly bool

func main() {
	role := flag.String("role", "", "upstream | revproxy | tcpfwd | leanfwd (internal), or load: -target URL at -rate for -duration")
	addr := flag.String("addr", "127.0.0.1:0", "listen address for a role")
	target := flag.String("target", "", "revproxy target URL")
	duration := flag.Duration("duration", 10*time.Second, "length of each measurement")
	conns := flag.Int("c", 16, "connections for the throughput test")
	rate := flag.Int("rate", 1000, "requests per second for the latency test")
	skipTP := flag.Bool("skip-throughput", false, "only run the latency test")
	flag.Var(&gwEnv, "gw-env", "extra NAME=VALUE for the gateway process only (repeatable), e.g. GOMAXPROCS=1")
	flag.Var(&gwEnvB, "b-env", "extra NAME=VALUE for the -b gateway only (repeatable; with -b the same binary, an A/B of two environments)")
	dump := flag.String("dump", "", "with -role load: write each request's scheduled time and latency (ms), one per line, to this file")
	flag.StringVar(&compareBin, "b", "", "a second llmgate binary to measure beside this checkout's, interleaved (A/B of a change)")
	flag.StringVar(&compareRev, "b-rev", "", "a git revision of this repository to build and measure as the second llmgate (instead of -b)")
	flag.StringVar(gwYAML["a"], "a-yaml", "", `extra top-level config lines for the llmgate build, e.g. "spool_fsync: true" (separate lines with \n)`)
	flag.StringVar(gwYAML["b"], "b-yaml", "", "extra top-level config lines for the -b build (with -b the same binary, an A/B of two settings)")
	flag.StringVar(&mainBin, "a", "", "measure this llmgate binary instead of building the checkout")
	flag.BoolVar(&gwOnly, "gw-only", false, "only the latency test, of the direct call and the llmgate build(s) (quicker A/B runs)")
	flag.Parse()
	if gwOnly {
		*skipTP = true
	}
	var err error
	switch *role {
	case "upstream":
		err = serveUpstream(*addr)
	case "revproxy":
		err = serveRevProxy(*addr, *target)
	case "tcpfwd":
		err = serveTCPForward(*addr, *target)
	case "leanfwd":
		err = serveLeanForward(*addr, *target)
	case "load":
		// Open-loop load on one target, for profiling a hop by hand.
		lats, errs, lag := openLoop(*target, *rate, *duration)
		if *dump != "" {
			var b strings.Builder
			for i, l := range lastLoop {
				fmt.Fprintf(&b, "%.3f %.3f\n", float64(i)*1000/float64(*rate), ms(l))
			}
			if err := os.WriteFile(*dump, []byte(b.String()), 0o644); err != nil {
				log.Fatal(err)
			}
		}
		r := summarize(lats, *duration, errs, lag)
		fmt.Printf("%.0f req/s   p50 %.3f ms   p99 %.3f ms   errors %d   max dispatch lag %.3f ms\n", r.rps, ms(r.p50), ms(r.p99), r.errors, ms(r.lag))
	case "":
		err = orchestrate(*duration, *conns, *rate, *skipTP)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxycmp:", err)
		os.Exit(1)
	}
}

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Println("LISTEN", ln.Addr().String()) // read by the orchestrator
	return ln, nil
}

func serveUpstream(addr string) error {
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	body := []byte(fixedAnswer)
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
}

// serveRevProxy is the bare baseline: httputil.ReverseProxy in five
// lines, with the one setting anyone who measures it changes: a keep-alive
// pool to the upstream larger than the connections used (the default
// Transport keeps 2 idle connections per host, so at 16 connections most
// requests would dial anew).
func serveRevProxy(addr, target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	rp.Transport = tr
	// wrk drops its connections mid-request when it stops; that is not news.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	return http.Serve(ln, rp)
}

// serveTCPForward is the floor of any hop: bytes copied between two TCP
// connections, no HTTP parsing at all.
func serveTCPForward(addr, target string) error {
	return forwardEach(addr, target, func(c, up net.Conn) {
		go io.Copy(up, c)
		io.Copy(c, up)
	})
}

// serveLeanForward is the floor of an HTTP hop: each client connection gets
// one upstream connection and one goroutine that parses a request with
// http.ReadRequest, forwards it and copies the answer back.
func serveLeanForward(addr, target string) error {
	return forwardEach(addr, target, func(c, up net.Conn) {
		br, bw := bufio.NewReader(c), bufio.NewWriter(c)
		ubr, ubw := bufio.NewReader(up), bufio.NewWriter(up)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(req.Body)
			fmt.Fprintf(ubw, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", req.URL.Path, up.RemoteAddr(), len(body))
			ubw.Write(body)
			ubw.Flush()
			resp, err := http.ReadResponse(ubr, nil)
			if err != nil {
				return
			}
			rb, _ := io.ReadAll(resp.Body)
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(rb))
			bw.Write(rb)
			bw.Flush()
		}
	})
}

// forwardEach accepts connections on addr and runs serve for each with a
// connection of its own to target; both are closed when serve returns.
func forwardEach(addr, target string, serve func(c, up net.Conn)) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				return
			}
			defer up.Close()
			serve(c, up)
		}()
	}
}

type proc struct {
	cmd  *exec.Cmd
	addr string
}

func start(name string, args []string, env []string) (*proc, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	p := &proc{cmd: cmd}
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
			p.addr = a
			break
		}
	}
	go io.Copy(io.Discard, out)
	if p.addr == "" {
		cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not report its address", name)
	}
	return p, nil
}

func (p *proc) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
	}
}

func freePort() string {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	return ln.Addr().String()
}

func waitUp(url string) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not come up", url)
}

func orchestrate(dur time.Duration, conns, rate int, skipTP bool) error {
	dir, err := os.MkdirTemp("", "proxycmp")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bin := mainBin
	if bin == "" {
		bin = filepath.Join(dir, "llmgate")
		fmt.Println("building llmgate ...")
		build := exec.Command("go", "build", "-o", bin, "./cmd/llmgate")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build llmgate (run from the repository root): %w", err)
		}
	}
	if compareRev != "" {
		if compareBin, err = buildRev(compareRev, dir); err != nil {
			return err
		}
	}
	up, err := start(self, []string{"-role", "upstream"}, nil)
	if err != nil {
		return err
	}
	defer up.stop()
	rp, err := start(self, []string{"-role", "revproxy", "-target", "http://" + up.addr}, nil)
	if err != nil {
		return err
	}
	defer rp.stop()
	fw, err := start(self, []string{"-role", "tcpfwd", "-target", "http://" + up.addr}, nil)
	if err != nil {
		return err
	}
	defer fw.stop()
	lf, err := start(self, []string{"-role", "leanfwd", "-target", "http://" + up.addr}, nil)
	if err != nil {
		return err
	}
	defer lf.stop()
	gwAddr, gwPid, stopGw, err := startGateway(bin, dir, "a", up.addr)
	if err != nil {
		return err
	}
	defer stopGw()
	var bAddr string
	var bPid int
	if compareBin != "" {
		var stopB func()
		bAddr, bPid, stopB, err = startGateway(compareBin, dir, "b", up.addr)
		if err != nil {
			return fmt.Errorf("-b %s: %w", compareBin, err)
		}
		defer stopB()
	}
	targets := []struct{ name, url string }{
		{"direct", "http://" + up.addr + "/v1/chat/completions"},
		{"reverseproxy", "http://" + rp.addr + "/v1/chat/completions"},
		{"tcpforward", "http://" + fw.addr + "/v1/chat/completions"},
		{"leanfwd", "http://" + lf.addr + "/v1/chat/completions"},
		{"llmgate", "http://" + gwAddr + "/v1/chat/completions"},
	}
	if bAddr != "" {
		targets = append(targets, struct{ name, url string }{"llmgate-b", "http://" + bAddr + "/v1/chat/completions"})
	}
	for _, t := range targets { // sanity and warm-up
		if err := check(t.url); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	fmt.Printf("machine load before: %s\n", loadAvg())
	wrk, _ := exec.LookPath("wrk")
	tp := map[string]result{}
	tpCPU := map[string]float64{} // µs per request at full load
	if !skipTP {
		tp, tpCPU, err = throughput(targets, pidsOf(up, fw, lf, rp, gwPid, bPid), wrk, conns, dur, dir)
		if err != nil {
			return err
		}
	} else {
		for _, t := range targets {
			tp[t.name] = result{rps: 1}
		}
	}
	// The targets take turns in short slices, so that all of them see the
	// same machine: on a shared VM conditions drift over tens of seconds
	// by more than the differences being measured.
	const slice = 500 * time.Millisecond
	rounds := max(1, int(dur/slice))
	fmt.Printf("\nLatency, open loop, %d req/s, %s each (targets interleaved in %s slices), from scheduled send time\n", rate, time.Duration(rounds)*slice, slice)
	order := []string{"direct", "tcpforward", "leanfwd", "reverseproxy", "llmgate"}
	if gwOnly {
		order = []string{"direct", "llmgate"}
	}
	pids := pidsOf(up, fw, lf, rp, gwPid, bPid)
	if bAddr != "" {
		order = append(order, "llmgate-b")
	}
	urls := map[string]string{}
	for _, x := range targets {
		urls[x.name] = x.url
	}
	type acc struct {
		lats     []time.Duration
		errs     int
		lag      time.Duration
		cpu      time.Duration
		switches int
	}
	accs := map[string]*acc{}
	for _, t := range order {
		accs[t] = &acc{}
	}
	steal0, total0 := stealTime()
	// Blocks of rounds (about 6s each) are summarised apart too, with the
	// host's steal time in each, so a run disturbed by the host in part can
	// be told from one that is slow throughout.
	const blockRounds = 12
	type block struct {
		lats         map[string][]time.Duration
		steal, total int64
	}
	var blocks []*block
	for r := 0; r < rounds; r++ {
		if r%blockRounds == 0 {
			b := &block{lats: map[string][]time.Duration{}}
			b.steal, b.total = stealTime()
			blocks = append(blocks, b)
		}
		b := blocks[len(blocks)-1]
		for _, t := range order {
			a := accs[t]
			cpu0, cs0 := cpuTime(pids[t]), ctxSwitches(pids[t])
			lats, errs, lag := openLoop(urls[t], rate, slice)
			a.cpu += cpuTime(pids[t]) - cpu0
			a.switches += ctxSwitches(pids[t]) - cs0
			a.lats = append(a.lats, lats...)
			b.lats[t] = append(b.lats[t], lats...)
			a.errs += errs
			a.lag = max(a.lag, lag)
		}
		if r%blockRounds == blockRounds-1 || r == rounds-1 {
			s1, t1 := stealTime()
			b.steal, b.total = s1-b.steal, t1-b.total
		}
	}
	lat := map[string]result{}
	for _, t := range order {
		a := accs[t]
		r := summarize(a.lats, time.Duration(rounds)*slice, a.errs, a.lag)
		lat[t] = r
		who := "upstream"
		if t != "direct" {
			who = "hop"
		}
		n := float64(len(a.lats) + a.errs)
		fmt.Printf("  %-13s %9.0f req/s   p50 %7.3f ms   p99 %7.3f ms   errors %d   max dispatch lag %.3f ms   %s CPU %.0f µs/request, %.1f context switches/request\n",
			t, r.rps, ms(r.p50), ms(r.p99), r.errors, ms(r.lag), who, float64(a.cpu.Microseconds())/n, float64(a.switches)/n)
	}
	if steal1, total1 := stealTime(); total1 > total0 {
		pct := 100 * float64(steal1-steal0) / float64(total1-total0)
		fmt.Printf("  host steal during the latency test: %.1f%% of CPU time (%s)\n", pct, stealVerdict(pct))
	}
	if len(blocks) > 1 {
		fmt.Printf("  by block of %s per target (the same runs, in time order):\n", time.Duration(blockRounds)*slice)
		var p50s, p99s, rp50s, rp99s []float64
		for i, b := range blocks {
			d, g := summarize(b.lats["direct"], 0, 0, 0), summarize(b.lats["llmgate"], 0, 0, 0)
			steal := 0.0
			if b.total > 0 {
				steal = 100 * float64(b.steal) / float64(b.total)
			}
			p50s, p99s = append(p50s, ms(g.p50-d.p50)), append(p99s, ms(g.p99-d.p99))
			line := fmt.Sprintf("    block %d: host steal %4.1f%%   llmgate adds p50 %.3f ms, p99 %.3f ms", i+1, steal, ms(g.p50-d.p50), ms(g.p99-d.p99))
			if bl := b.lats["llmgate-b"]; len(bl) > 0 {
				gb := summarize(bl, 0, 0, 0)
				line += fmt.Sprintf("   llmgate-b adds p50 %.3f ms, p99 %.3f ms", ms(gb.p50-d.p50), ms(gb.p99-d.p99))
			}
			// The bare proxy in the same block: how much of what llmgate
			// adds any HTTP hop adds on this host at that moment.
			if rl := b.lats["reverseproxy"]; len(rl) > 0 {
				rp := summarize(rl, 0, 0, 0)
				rp50s, rp99s = append(rp50s, ms(rp.p50-d.p50)), append(rp99s, ms(rp.p99-d.p99))
				line += fmt.Sprintf("   reverseproxy adds p50 %.3f ms, p99 %.3f ms", ms(rp.p50-d.p50), ms(rp.p99-d.p99))
			}
			fmt.Println(line)
		}
		line := fmt.Sprintf("    median over blocks: adds p50 %.3f ms, p99 %.3f ms", median(p50s), median(p99s))
		if len(rp50s) > 0 {
			line += fmt.Sprintf("   (reverseproxy p50 %.3f ms, p99 %.3f ms)", median(rp50s), median(rp99s))
		}
		fmt.Println(line)
	}
	fmt.Printf("machine load after: %s\n", loadAvg())
	cpuLat := func(t string) float64 {
		a := accs[t]
		return float64(a.cpu.Microseconds()) / float64(len(a.lats)+a.errs)
	}
	fmt.Printf("\nRatios (issue 25: llmgate >= 0.95x a tuned bare ReverseProxy hop at %d connections; added p50 <= 0.2 ms, p99 <= 1 ms at 1,000 req/s)\n", conns)
	builds := []string{"llmgate"}
	if bAddr != "" {
		builds = append(builds, "llmgate-b")
	}
	for _, g := range builds {
		name := g
		if g == "llmgate-b" {
			name = "llmgate-b (" + map[bool]string{true: compareRev, false: compareBin}[compareRev != ""] + ")"
		}
		fmt.Printf("  %s\n", name)
		if !skipTP {
			fmt.Printf("    throughput / reverseproxy at %d conns: %.3fx   (target >= 0.95x)   / direct: %.3fx\n", conns, tp[g].rps/tp["reverseproxy"].rps, tp[g].rps/tp["direct"].rps)
			fmt.Printf("    CPU per request at full load: %.0f µs (reverseproxy %.0f µs, ratio %.2fx)\n", tpCPU[g], tpCPU["reverseproxy"], tpCPU[g]/tpCPU["reverseproxy"])
		}
		fmt.Printf("    added p50 at %d req/s: %.3f ms   (target <= 0.2 ms)   added p99: %.3f ms   (target <= 1 ms)\n", rate, ms(lat[g].p50-lat["direct"].p50), ms(lat[g].p99-lat["direct"].p99))
		if !gwOnly {
			fmt.Printf("    CPU per request at %d req/s: %.0f µs (reverseproxy %.0f µs, ratio %.2fx)\n", rate, cpuLat(g), cpuLat("reverseproxy"), cpuLat(g)/cpuLat("reverseproxy"))
		} else {
			fmt.Printf("    CPU per request at %d req/s: %.0f µs\n", rate, cpuLat(g))
		}
	}
	if bAddr != "" {
		if !skipTP {
			fmt.Printf("  llmgate / llmgate-b throughput: %.3fx\n", tp["llmgate"].rps/tp["llmgate-b"].rps)
		}
		fmt.Printf("  llmgate / llmgate-b CPU per request at %d req/s: %.3fx\n", rate, cpuLat("llmgate")/cpuLat("llmgate-b"))
	}
	if !gwOnly {
		fmt.Printf("  for scale, the reverse proxy adds p50 %.3f ms, p99 %.3f ms\n", ms(lat["reverseproxy"].p50-lat["direct"].p50), ms(lat["reverseproxy"].p99-lat["direct"].p99))
		fmt.Printf("  and a plain TCP forwarder (no HTTP at all) adds p50 %.3f ms, p99 %.3f ms\n", ms(lat["tcpforward"].p50-lat["direct"].p50), ms(lat["tcpforward"].p99-lat["direct"].p99))
	}
	fmt.Printf("  gateway peak RSS: %.1f MB   (target <= 100 MB)\n", float64(vmHWM(gwPid))/1024)
	return nil
}

// pidsOf maps target names to the processes that serve them.
func pidsOf(up, fw, lf, rp *proc, gwPid, bPid int) map[string]int {
	m := map[string]int{"direct": up.cmd.Process.Pid, "tcpforward": fw.cmd.Process.Pid, "leanfwd": lf.cmd.Process.Pid,
		"reverseproxy": rp.cmd.Process.Pid, "llmgate": gwPid}
	if bPid != 0 {
		m["llmgate-b"] = bPid
	}
	return m
}

// tpSlice is each target's turn in the throughput test (wrk's -d is whole
// seconds).
const tpSlice = 2 * time.Second

// throughput runs the closed-loop test with the targets taking turns in
// tpSlice slices, the order rotating each round, and returns each target's
// requests per second over all its slices and its hop's CPU time per
// request.
func throughput(targets []struct{ name, url string }, pids map[string]int, wrk string, conns int, dur time.Duration, dir string) (map[string]result, map[string]float64, error) {
	rounds := max(1, int(dur/tpSlice))
	gen := "Go generator; install wrk for a lighter client"
	if wrk != "" {
		gen = "wrk -t1"
	}
	fmt.Printf("\nThroughput, closed loop, %d connections, %s per target (targets interleaved in %s slices; %s)\n", conns, time.Duration(rounds)*tpSlice, tpSlice, gen)
	type acc struct {
		reqs      float64
		p50s, p99 []time.Duration
		errs      int
		cpu       time.Duration
	}
	accs := map[string]*acc{}
	for _, t := range targets {
		accs[t.name] = &acc{}
	}
	steal0, total0 := stealTime()
	for r := 0; r < rounds; r++ {
		for k := range targets {
			t := targets[(k+r)%len(targets)]
			a := accs[t.name]
			cpu0 := cpuTime(pids[t.name])
			var res result
			var err error
			if wrk != "" {
				res, err = runWrk(wrk, t.url, conns, tpSlice, dir)
			} else {
				res, err = closedLoop(t.url, conns, tpSlice)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", t.name, err)
			}
			a.cpu += cpuTime(pids[t.name]) - cpu0
			a.reqs += res.rps * tpSlice.Seconds()
			a.p50s, a.p99 = append(a.p50s, res.p50), append(a.p99, res.p99)
			a.errs += res.errors
		}
	}
	out, cpu := map[string]result{}, map[string]float64{}
	for _, t := range targets {
		a := accs[t.name]
		med := func(xs []time.Duration) time.Duration {
			sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
			return xs[len(xs)/2]
		}
		r := result{rps: a.reqs / (float64(rounds) * tpSlice.Seconds()), p50: med(a.p50s), p99: med(a.p99), errors: a.errs}
		out[t.name] = r
		cpu[t.name] = float64(a.cpu.Microseconds()) / a.reqs
		who := "hop"
		if t.name == "direct" {
			who = "upstream"
		}
		fmt.Printf("  %-13s %9.0f req/s   p50 %7.3f ms   p99 %7.3f ms (medians of slices)   errors %d   %s CPU %.0f µs/request\n",
			t.name, r.rps, ms(r.p50), ms(r.p99), r.errors, who, cpu[t.name])
	}
	if steal1, total1 := stealTime(); total1 > total0 {
		fmt.Printf("  host steal during the throughput test: %.1f%% of CPU time\n", 100*float64(steal1-steal0)/float64(total1-total0))
	}
	return out, cpu, nil
}

// loadAvg is the machine's load average (1, 5, 15 minutes): other work on
// the machine moves every figure, so it is printed with them.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ") + fmt.Sprintf(" on %d CPUs", runtime.NumCPU())
}

// buildRev builds llmgate at a git revision of the repository in the
// working directory, for an A/B against it.
func buildRev(rev, dir string) (string, error) {
	src := filepath.Join(dir, "rev-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	fmt.Printf("building llmgate at %s ...\n", rev)
	arch := exec.Command("sh", "-c", "git archive --format=tar \"$0\" | tar -x -C \"$1\"", rev, src)
	arch.Stderr = os.Stderr
	if err := arch.Run(); err != nil {
		return "", fmt.Errorf("git archive %s (run from the repository root): %w", rev, err)
	}
	bin := filepath.Join(dir, "llmgate-b")
	build := exec.Command("go", "build", "-o", bin, "./cmd/llmgate")
	build.Dir, build.Stderr = src, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build llmgate at %s: %w", rev, err)
	}
	return bin, nil
}

// startGateway starts `llmgate serve` from bin in front of upstream, with
// auth and ledger on, and returns its address, pid and a stop function.
func startGateway(bin, dir, name, upstream string) (string, int, func(), error) {
	addr := freePort()
	cfgPath := filepath.Join(dir, "llmgate-"+name+".yaml")
	// Each gateway its own database and spool (one process per spool_dir).
	cfg := fmt.Sprintf("listen: %s\ndatabase: %s\nspool_dir: %s\nbackends:\n  up: {url: http://%s/v1}\nmodels:\n  m: {backend: up}\n",
		addr, filepath.Join(dir, "llmgate-"+name+".db"), filepath.Join(dir, "spool-"+name), upstream)
	if extra := strings.ReplaceAll(*gwYAML[name], `\n`, "\n"); extra != "" {
		cfg += extra + "\n"
		fmt.Printf("llmgate-%s config adds: %s\n", name, strings.ReplaceAll(extra, "\n", "; "))
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return "", 0, nil, err
	}
	gw := exec.Command(bin, "serve", "-c", cfgPath)
	gw.Env = append(append(os.Environ(), "LLMGATE_MASTER_KEY="+masterKey), gwEnv...)
	if name == "b" {
		gw.Env = append(gw.Env, gwEnvB...)
		if len(gwEnvB) > 0 {
			fmt.Printf("llmgate-b environment adds: %s\n", strings.Join(gwEnvB, " "))
		}
	}
	gwLog, _ := os.Create(filepath.Join(dir, "gateway-"+name+".log"))
	gw.Stdout, gw.Stderr = gwLog, gwLog
	if err := gw.Start(); err != nil {
		return "", 0, nil, err
	}
	stop := func() { gw.Process.Signal(os.Interrupt); gw.Wait() }
	if err := waitUp("http://" + addr + "/healthz"); err != nil {
		stop()
		return "", 0, nil, err
	}
	return addr, gw.Process.Pid, stop, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type result struct {
	rps      float64
	p50, p99 time.Duration
	lag      time.Duration
	errors   int
}

func newReq(u string) *http.Request {
	req, _ := http.NewRequest("POST", u, strings.NewReader(reqBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+masterKey)
	return req
}

func check(u string) error {
	resp, err := http.DefaultClient.Do(newReq(u))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"choices"`)) {
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return nil
}

func runWrk(wrk, u string, conns int, dur time.Duration, dir string) (result, error) {
	script := filepath.Join(dir, "post.lua")
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.body = %q\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.headers[\"Authorization\"] = \"Bearer %s\"\n", reqBody, masterKey)
	if err := os.WriteFile(script, []byte(lua), 0o600); err != nil {
		return result{}, err
	}
	out, err := exec.Command(wrk, "-t1", fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%ds", int(dur.Seconds())), "--latency", "-s", script, u).CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("wrk: %v: %s", err, out)
	}
	var r result
	s := string(out)
	if m := regexp.MustCompile(`Requests/sec:\s+([\d.]+)`).FindStringSubmatch(s); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	r.p50 = wrkPct(s, "50%")
	r.p99 = wrkPct(s, "99%")
	if m := regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`).FindStringSubmatch(s); m != nil {
		r.errors, _ = strconv.Atoi(m[1])
	}
	if m := regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`).FindStringSubmatch(s); m != nil {
		for _, x := range m[1:] {
			n, _ := strconv.Atoi(x)
			r.errors += n
		}
	}
	return r, nil
}

func wrkPct(s, p string) time.Duration {
	m := regexp.MustCompile(`\s` + regexp.QuoteMeta(p) + `\s+([\d.]+)(us|ms|s)`).FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "us":
		return time.Duration(v * float64(time.Microsecond))
	case "ms":
		return time.Duration(v * float64(time.Millisecond))
	}
	return time.Duration(v * float64(time.Second))
}

func client(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}, Timeout: 30 * time.Second}
}

func do(c *http.Client, u string) error {
	resp, err := c.Do(newReq(u))
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return errors.New(resp.Status)
	}
	return nil
}

func closedLoop(u string, conns int, dur time.Duration) (result, error) {
	c := client(conns)
	var mu sync.Mutex
	var lats []time.Duration
	errs := 0
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1<<16)
			e := 0
			for time.Now().Before(end) {
				t := time.Now()
				if do(c, u) != nil {
					e++
					continue
				}
				local = append(local, time.Since(t))
			}
			mu.Lock()
			lats = append(lats, local...)
			errs += e
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize(lats, dur, errs, 0), nil
}

// openLoop sends at a constant rate and measures each latency from the
// time the request was scheduled, so a stalled client cannot hide delay.
// It is built like wrk2, to keep the generator's own cost (which shares
// the two cores with the hop being measured) small: a fixed set of
// keep-alive connections, each driven by one goroutine that sleeps until
// its request's scheduled time, writes pre-serialized bytes and reads the
// answer, with no per-request goroutine or client hand-off. Request i goes
// to connection i mod conns; with 64 connections at 1,000 req/s each sees
// a request every 64 ms, far longer than an answer takes.
// lastLoop is the latest openLoop's latencies in schedule order (0 for a
// failed request), for -dump.
var lastLoop []time.Duration

func openLoop(u string, rate int, dur time.Duration) (good []time.Duration, errs int, maxLag time.Duration) {
	const conns = 64
	pu, err := url.Parse(u)
	if err != nil {
		return nil, 1, 0
	}
	raw := []byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s",
		pu.RequestURI(), pu.Host, masterKey, len(reqBody), reqBody))
	n := int(float64(rate) * dur.Seconds())
	lats := make([]time.Duration, n)
	ok := make([]bool, n)
	lags := make([]time.Duration, conns)
	interval := time.Second / time.Duration(rate)
	cs := make([]net.Conn, conns)
	for k := range cs {
		if cs[k], err = net.Dial("tcp", pu.Host); err != nil {
			return nil, n, 0
		}
		defer cs[k].Close()
	}
	start := time.Now().Add(20 * time.Millisecond)
	var wg sync.WaitGroup
	for k := range cs {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			c := cs[k]
			br := bufio.NewReader(c)
			for i := k; i < n; i += conns {
				sched := start.Add(time.Duration(i) * interval)
				if d := time.Until(sched); d > 0 {
					time.Sleep(d)
				}
				lags[k] = max(lags[k], time.Since(sched))
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.Write(raw); err != nil {
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode == http.StatusOK {
					lats[i], ok[i] = time.Since(sched), true
				}
				if resp.Close {
					return
				}
			}
		}(k)
	}
	wg.Wait()
	lastLoop = lats
	for i := range lats {
		if ok[i] {
			good = append(good, lats[i])
		} else {
			errs++
		}
	}
	for _, l := range lags {
		maxLag = max(maxLag, l)
	}
	return good, errs, maxLag
}

func summarize(lats []time.Duration, dur time.Duration, errs int, lag time.Duration) result {
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	pct := func(p float64) time.Duration {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(len(lats)-1, int(p*float64(len(lats))))]
	}
	return result{rps: float64(len(lats)) / dur.Seconds(), p50: pct(0.5), p99: pct(0.99), errors: errs, lag: lag}
}

// cpuTime returns a process's user+system CPU time so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// stealTime returns the machine's steal and total CPU time (jiffies) from
// /proc/stat: time the hypervisor gave this VM's CPUs to someone else.
func stealTime() (steal, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, x := range f[1:] {
		v, _ := strconv.ParseInt(x, 10, 64)
		if i < 8 { // user … steal; guest time is already in user
			total += v
		}
		if i == 7 {
			steal = v
		}
	}
	return steal, total
}

// ctxSwitches sums the voluntary and involuntary context switches of every
// thread of a process: on a VM each one costs more than the HTTP work.
func ctxSwitches(pid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	n := 0
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasSuffix(strings.SplitN(line, ":", 2)[0], "ctxt_switches") {
				v, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(line, ":", 2)[1]))
				n += v
			}
		}
	}
	return n
}

// vmHWM returns a process's peak resident set size in KiB.
func vmHWM(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.Atoi(f[1])
				return v
			}
		}
	}
	return 0
}

// stealVerdict says what a host's steal share means for the tails.
func stealVerdict(pct float64) string {
	if pct > 1 {
		return "a busy host: above ~1 % the tails are the host's"
	}
	return "a quiet host"
}
