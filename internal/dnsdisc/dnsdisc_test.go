package dnsdisc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"

	"llmgate/internal/config"
)

type table struct {
	hosts map[string][]string
	srv   map[string][]*net.SRV
	err   error
}

func (r *table) LookupHost(_ context.Context, host string) ([]string, error) {
	if r.err != nil {
		return nil, r.err
	}
	if a, ok := r.hosts[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *table) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	if r.err != nil {
		return "", nil, r.err
	}
	full := "_" + service + "._" + proto + "." + name
	if s, ok := r.srv[full]; ok {
		return full, s, nil
	}
	return "", nil, &net.DNSError{Err: "no such host", Name: full, IsNotFound: true}
}

func load(t *testing.T, src string) *config.Config {
	t.Helper()
	cfg, err := config.Load(strings.NewReader(src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestLookup_SRVTakesEachTargetsAddressesAndPort(t *testing.T) {
	cfg := load(t, `
backends:
  pool: {url: "https://vllm.ns.svc/v1", discovery: srv, discovery_srv: openai}
models:
  m: {backend: pool}
`)
	r := &table{
		srv: map[string][]*net.SRV{"_openai._tcp.vllm.ns.svc": {
			{Target: "pod-a.vllm.ns.svc.", Port: 8000}, {Target: "pod-b.vllm.ns.svc.", Port: 8001}, {Target: "10.0.0.9.", Port: 8002}, {Target: "gone.", Port: 1}}},
		hosts: map[string][]string{"pod-a.vllm.ns.svc": {"10.0.0.1"}, "pod-b.vllm.ns.svc": {"10.0.0.2", "fd00::2"}},
	}
	got, err := Lookup(context.Background(), r, cfg.Backends["pool"])
	want := []string{"10.0.0.1:8000", "10.0.0.2:8001", "10.0.0.9:8002", "[fd00::2]:8001"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Lookup = %v, %v; want %v", got, err, want)
	}
}

func TestLookup_DNSUsesTheURLsPortAndANameThatIsGoneIsNoAddress(t *testing.T) {
	cfg := load(t, `
backends:
  a: {url: "http://vllm.ns.svc:8000/v1", discovery: dns}
  b: {url: "https://gone.ns.svc/v1", discovery: dns}
models:
  m: {backend: a}
`)
	r := &table{hosts: map[string][]string{"vllm.ns.svc": {"10.0.0.2", "10.0.0.1", "10.0.0.2"}}}
	if got, err := Lookup(context.Background(), r, cfg.Backends["a"]); err != nil || !slices.Equal(got, []string{"10.0.0.1:8000", "10.0.0.2:8000"}) {
		t.Fatalf("Lookup = %v, %v", got, err)
	}
	if got, err := Lookup(context.Background(), r, cfg.Backends["b"]); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("a name that is gone: %v, %v; want no address and no error", got, err)
	}
	r.err = &net.DNSError{Err: "server misbehaving", Name: "vllm.ns.svc", IsTemporary: true}
	if _, err := Lookup(context.Background(), r, cfg.Backends["a"]); err == nil {
		t.Fatal("a failed lookup is not an answer")
	}
}

// Each address is a backend named name@addr with the URL's host replaced
// (the name kept for the Host header and TLS); deployments multiply; a
// failed refresh keeps the set; no address leaves the backend unavailable
// with a reason.
func TestDiscoverer_ExpandsRefreshesAndKeepsTheLastSetOnFailure(t *testing.T) {
	cfg := load(t, `
backends:
  pool: {url: "https://vllm.ns.svc:8443/v1", discovery: dns, discovery_interval: 1m}
  fixed: {url: "http://127.0.0.1:9/v1"}
models:
  m:
    deployments:
      - {backend: pool, upstream_model: up, weight: 3}
      - {backend: fixed, priority: 1}
  f: {backend: fixed}
`)
	r := &table{hosts: map[string][]string{"vllm.ns.svc": {"10.0.0.1", "10.0.0.2"}}}
	d := New(Options{Resolver: func(*config.Backend) Resolver { return r }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	d.SetConfig(cfg)
	ex := d.Expand(cfg)
	if p := ex.Backends["pool"]; p == nil || !strings.Contains(p.Unavailable, "not been resolved yet") {
		t.Fatalf("before the first answer the backend should be unavailable: %+v", p)
	}
	if !d.Refresh(context.Background(), false) {
		t.Fatal("the first answer is a change")
	}
	ex = d.Expand(cfg)
	b1 := ex.Backends["pool@10.0.0.1:8443"]
	if b1 == nil || b1.BaseURL != "https://10.0.0.1:8443/v1" || b1.HostName != "vllm.ns.svc:8443" || b1.Address != "10.0.0.1:8443" || ex.Backends["pool"] != nil {
		t.Fatalf("expanded backends: %v; pool@10.0.0.1 = %+v", keys(ex.Backends), b1)
	}
	var deps []string
	for _, dep := range ex.Models["m"].Deployments {
		deps = append(deps, dep.Backend+"/"+dep.UpstreamModel)
		if strings.HasPrefix(dep.Backend, "pool@") && dep.Weight != 3 {
			t.Errorf("replica deployment lost its weight: %+v", dep)
		}
	}
	slices.Sort(deps)
	if strings.Join(deps, " ") != "fixed/m pool@10.0.0.1:8443/up pool@10.0.0.2:8443/up" {
		t.Fatalf("deployments = %v", deps)
	}
	if cfg.Models["m"].Deployments[0].Backend != "pool" || ex.Models["f"] != cfg.Models["f"] {
		t.Fatal("Expand changed its input, or copied a model it had no need to")
	}
	if d.Refresh(context.Background(), false) {
		t.Fatal("nothing is due within the interval")
	}
	r.err = errors.New("i/o timeout")
	if d.Refresh(context.Background(), true) || len(d.Addresses()["pool"]) != 2 {
		t.Fatalf("a failure changed the set: %v", d.Addresses())
	}
	r.err, r.hosts = nil, nil
	if !d.Refresh(context.Background(), true) {
		t.Fatal("a name that went away is a change")
	}
	if p := d.Expand(cfg).Backends["pool"]; p == nil || !strings.Contains(p.Unavailable, "resolved to no addresses") {
		t.Fatalf("no address: %+v", p)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestConfig_DiscoverySettingsAreChecked(t *testing.T) {
	for _, c := range []struct{ backend, want string }{
		{`{url: "http://x.svc/v1", discovery: dsn}`, "must be dns"},
		{`{url: "http://10.0.0.1/v1", discovery: dns}`, "IP address"},
		{`{url: "http://x.svc:80/v1", discovery: srv}`, "remove the port"},
		{`{url: "http://x.svc/v1", discovery: dns, discovery_srv: http}`, "only used with discovery: srv"},
		{`{url: "http://x.svc/v1", discovery: srv, discovery_srv: "Http_1"}`, "port name"},
		{`{url: "http://x.svc/v1", discovery_interval: 5s}`, "without discovery"},
		{`{url: "http://x.svc/v1", discovery: dns, discovery_resolver: "10.0.0.10"}`, "host:port"},
	} {
		_, err := config.Load(strings.NewReader("backends:\n  b: "+c.backend+"\nmodels:\n  m: {backend: b}\n"), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.backend, err, c.want)
		}
	}
	cfg := load(t, "backends:\n  b: {url: \"http://x.svc/v1\", discovery: srv}\nmodels:\n  m: {backend: b}\n")
	if b := cfg.Backends["b"]; b.DiscoveryEvery() != config.DefaultDiscoveryInterval || b.SRVService() != "http" {
		t.Fatalf("defaults: %v %q", b.DiscoveryEvery(), b.SRVService())
	}
}

func TestConfigured_StripsOnlyAReplicasAddress(t *testing.T) {
	for in, want := range map[string]string{
		"pool@10.0.0.1:8000": "pool", "pool@[fd00::1]:8000": "pool", ReplicaName("a@b", "10.0.0.2:1"): "a@b",
		"pool": "pool", "team@prod": "team@prod", "x@host.example:80": "x@host.example:80",
	} {
		if got := Configured(in); got != want {
			t.Errorf("Configured(%q) = %q, want %q", in, got, want)
		}
	}
}
