package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"llmgate/internal/config"
	"llmgate/internal/dnsdisc"
	"llmgate/internal/ledger"
	"llmgate/internal/sim"
	"llmgate/internal/testenv"
)

// fakeDNS is a resolver whose answer a test changes: SRV records (target
// 127.0.0.1, a port each) or a failure.
type fakeDNS struct {
	mu    sync.Mutex
	ports []int
	err   error
}

func (f *fakeDNS) set(err error, ports ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ports, f.err = ports, err
}

func (f *fakeDNS) LookupHost(ctx context.Context, host string) ([]string, error) {
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (f *fakeDNS) LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", nil, f.err
	}
	if len(f.ports) == 0 {
		return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	var out []*net.SRV
	for _, p := range f.ports {
		out = append(out, &net.SRV{Target: "127.0.0.1.", Port: uint16(p)})
	}
	return "", out, nil
}

func startDiscoveryGW(t *testing.T, src string, r dnsdisc.Resolver) *faultGW {
	t.Helper()
	cfg, err := config.Load(strings.NewReader(src), "discovery.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = filepath.Join(t.TempDir(), "llmgate.db")
	cfg.Listen = "127.0.0.1:0"
	opt := Options{Config: cfg, MasterKey: testMaster,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}}
	if r != nil {
		opt.Resolver = func(*config.Backend) dnsdisc.Resolver { return r }
	}
	g, err := Start(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return &faultGW{t: t, g: g}
}

func portOf(t *testing.T, u *faultUpstream) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(u.URL, "http://"))
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// addresses reports the replicas the model's route has now.
func addresses(g *Gateway, model string) []string {
	r, err := g.Tables.Load().Route(model)
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range r.Deployments {
		out = append(out, d.Backend.Address)
	}
	return out
}

// waitUntil polls cond until it holds; the deadline is only a guard
// against a hang.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, cond, what)
}

// A replica added to the answer gets traffic and one removed gets no new
// request, without a reload; a request in flight on the removed one
// finishes; no request fails meanwhile.
func TestDiscovery_TrafficFollowsTheAnswerAndNoRequestFails(t *testing.T) {
	hold := make(chan struct{})
	var held atomic.Pointer[faultUpstream]
	holding := func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" && r.Header.Get("X-Request-Id") == "hold-me" {
			held.Store(u)
			<-hold
		}
		answer(u, w, r)
	}
	a, b, c := newUpstream(t, "a", holding), newUpstream(t, "b", holding), newUpstream(t, "c", holding)
	dns := &fakeDNS{}
	dns.set(nil, portOf(t, a), portOf(t, b))
	f := startDiscoveryGW(t, `
backends:
  pool: {url: "http://vllm.models.svc.cluster.local/v1", discovery: srv, discovery_interval: 10ms}
models:
  m: {backend: pool}
`, dns)
	if got := addresses(f.g, "m"); len(got) != 2 {
		t.Fatalf("replicas at start = %v, want a and b", got)
	}
	for i := 0; i < 20; i++ {
		if code, _, body := f.chat("m", i%2 == 0); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Fatalf("hits a=%d b=%d: both replicas should serve", a.hits.Load(), b.hits.Load())
	}

	// A request held by one replica, which then leaves the answer as c joins.
	heldDone := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+f.g.Addr+"/v1/chat/completions", strings.NewReader(chatBody("m", true, "")))
		req.Header.Set("Authorization", "Bearer "+testMaster)
		req.Header.Set("X-Request-Id", "hold-me")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			heldDone <- 0
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "[DONE]") {
			heldDone <- -1
			return
		}
		heldDone <- resp.StatusCode
	}()
	waitUntil(t, "the held request to reach a replica", func() bool { return held.Load() != nil })
	gone, stays := a, b
	if held.Load() == b {
		gone, stays = b, a
	}
	goneAddr := "127.0.0.1:" + strconv.Itoa(portOf(t, gone))
	dns.set(nil, portOf(t, stays), portOf(t, c))
	waitUntil(t, "the table to follow the answer", func() bool {
		got := addresses(f.g, "m")
		return len(got) == 2 && !strings.Contains(strings.Join(got, " "), goneAddr)
	})
	goneHits, cHits := gone.hits.Load(), c.hits.Load()
	for i := 0; i < 20; i++ {
		if code, _, body := f.chat("m", i%2 == 0); code != 200 {
			t.Fatalf("request %d after the change: %d %s", i, code, body)
		}
	}
	if gone.hits.Load() != goneHits {
		t.Errorf("the removed replica got %d new requests", gone.hits.Load()-goneHits)
	}
	if c.hits.Load() == cHits {
		t.Error("the new replica got no request")
	}
	close(hold)
	if code := <-heldDone; code != 200 {
		t.Fatalf("the request in flight on the removed replica ended with %d, want 200 and a whole stream", code)
	}
	code, _, body := f.request("GET", "/v1/models?health=1", "")
	if code != 200 || !strings.Contains(body, `"address": "127.0.0.1:`+strconv.Itoa(portOf(t, c))+`"`) {
		t.Errorf("health = %d %s, want the discovered addresses", code, body)
	}
}

// A failed lookup keeps the last addresses (and counts the error); a name
// that no longer exists is no replica: a 503 in the dialect's envelope
// naming the name and what to check.
func TestDiscovery_FailureKeepsTheLastSetAndNoAddressIsA503(t *testing.T) {
	a := newUpstream(t, "a", answer)
	dns := &fakeDNS{}
	dns.set(nil, portOf(t, a))
	f := startDiscoveryGW(t, `
backends:
  pool: {url: "http://vllm.models.svc.cluster.local/v1", discovery: srv, discovery_srv: openai, discovery_interval: 10ms}
models:
  m: {backend: pool}
`, dns)
	dns.set(&net.DNSError{Err: "i/o timeout", Name: "_openai._tcp.vllm.models.svc.cluster.local", IsTimeout: true})
	waitUntil(t, "a counted resolution error", func() bool {
		_, _, body := f.request("GET", "/metrics", "")
		return strings.Contains(body, `llmgate_discovery_errors_total{backend="pool"} `) &&
			!strings.Contains(body, `llmgate_discovery_errors_total{backend="pool"} 0`)
	})
	if code, _, body := f.chat("m", false); code != 200 || !strings.Contains(body, "from a") {
		t.Fatalf("after a failed lookup: %d %s, want the last replica to serve", code, body)
	}
	_, _, metrics := f.request("GET", "/metrics", "")
	if !strings.Contains(metrics, `llmgate_discovery_addresses{backend="pool"} 1`) {
		t.Errorf("metrics lack the address count:\n%s", grepLines(metrics, "discovery"))
	}

	dns.set(nil) // NXDOMAIN: the Service has no ready pod
	waitUntil(t, "the replica to leave", func() bool { return addresses(f.g, "m")[0] == "" })
	code, _, body := f.chat("m", false)
	if code != 503 || !strings.Contains(body, `"error":{`) || !strings.Contains(body, "_openai._tcp.vllm.models.svc.cluster.local") ||
		!strings.Contains(body, "kubectl get endpointslices") {
		t.Fatalf("no address: %d %s, want a 503 naming the name and what to check", code, body)
	}
	req, _ := http.NewRequest("POST", "http://"+f.g.Addr+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", testMaster)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(raw), `"type":"error"`) {
		t.Fatalf("Messages client: %d %s, want a 503 in Anthropic's envelope", resp.StatusCode, raw)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// dnsServer answers A queries for one name with the given addresses (and
// every other query with no answer) over UDP on loopback.
func dnsServer(t *testing.T, name string, addrs ...[4]byte) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			b.EnableCompression()
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Type == dnsmessage.TypeA && strings.EqualFold(q.Name.String(), name+".") {
				for _, a := range addrs {
					_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}, dnsmessage.AResource{A: a})
				}
			}
			msg, err := b.Finish()
			if err == nil {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// End to end: one name resolving (through a DNS server named by
// discovery_resolver) to 127.0.0.1 and 127.0.0.2, a simulator on each at
// the same port: both get traffic.
func TestDiscovery_OneNameTwoLoopbackSimulatorsBothServe(t *testing.T) {
	mc := sim.ModelConfig{Name: "sim-m", MaxNumSeqs: 8, MaxModelLen: 4096, PrefillBase: time.Millisecond,
		DecodeBase: time.Millisecond, MeanOutputTokens: 4}
	var hits [2]atomic.Int64
	var port string
	for i, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		s, err := sim.New(sim.Config{Models: []sim.ModelConfig{mc}, Seed: int64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		addr := ip + ":0"
		if port != "" {
			addr = net.JoinHostPort(ip, port)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("cannot listen on %s (is 127.0.0.2 loopback here?): %v", addr, err)
		}
		_, port, _ = net.SplitHostPort(ln.Addr().String())
		n := &hits[i]
		srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/chat/completions" {
				n.Add(1)
			}
			s.ServeHTTP(w, r)
		})}}
		srv.Start()
		t.Cleanup(func() { srv.Close(); s.Close() })
	}
	resolver := dnsServer(t, "sims.llmgate.test", [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2})
	f := startDiscoveryGW(t, fmt.Sprintf(`
backends:
  sims: {url: "http://sims.llmgate.test:%s/v1", discovery: dns, discovery_resolver: %q}
models:
  m: {backend: sims, upstream_model: sim-m}
`, port, resolver), nil)
	if got := addresses(f.g, "m"); strings.Join(got, " ") != "127.0.0.1:"+port+" 127.0.0.2:"+port {
		t.Fatalf("replicas = %v, want both loopback addresses", got)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, _ := f.chat("m", false); code != 200 {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || hits[0].Load() == 0 || hits[1].Load() == 0 {
		t.Fatalf("failed=%d, hits 127.0.0.1=%d 127.0.0.2=%d: want no failure and traffic on both", failed.Load(), hits[0].Load(), hits[1].Load())
	}
}

// A config reload that leaves the backend as it was keeps its replicas,
// with their connections, breakers and health (the same backends); one
// that changes it resolves again before the new table serves.
func TestDiscovery_ReloadKeepsTheReplicasOfAnUnchangedBackend(t *testing.T) {
	a, b := newUpstream(t, "a", answer), newUpstream(t, "b", answer)
	dns := &fakeDNS{}
	dns.set(nil, portOf(t, a), portOf(t, b))
	src := `
backends:
  pool: {url: "http://vllm.models.svc.cluster.local/v1", discovery: srv, discovery_interval: 1h%s}
models:
  m: {backend: pool}
`
	f := startDiscoveryGW(t, fmt.Sprintf(src, ""), dns)
	before := f.g.Tables.Load().Backend("pool@127.0.0.1:" + strconv.Itoa(portOf(t, a)))
	if before == nil {
		t.Fatal("no replica backend for a")
	}
	reload := func(extra string) {
		cfg, err := config.Load(strings.NewReader(fmt.Sprintf(src, extra)), "discovery.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Database, cfg.Listen = f.g.Config.Database, f.g.Config.Listen
		f.g.swapTable(cfg)
	}
	reload("")
	if got := f.g.Tables.Load().Backend("pool@127.0.0.1:" + strconv.Itoa(portOf(t, a))); got != before {
		t.Fatal("an unchanged backend's replica was rebuilt on reload: its breaker, health and connections are lost")
	}
	dns.set(nil, portOf(t, b)) // the next lookup sees only b: a settings change resolves at once
	reload(", timeout: 30s")
	if got := addresses(f.g, "m"); len(got) != 1 || got[0] != "127.0.0.1:"+strconv.Itoa(portOf(t, b)) {
		t.Fatalf("after a reload that changed the backend: replicas %v, want b only (resolved again at once)", got)
	}
	if code, _, body := f.chat("m", false); code != 200 || !strings.Contains(body, "from b") {
		t.Fatalf("%d %s", code, body)
	}
}
