// Package dnsdisc finds the replicas of a backend in DNS (discovery: dns
// or srv): it resolves each such backend's name on its interval and
// expands the configuration so that every address found is a backend of
// its own, a deployment of the backend's models with its own health,
// breaker and load. The gateway rebuilds the routing table from the
// expanded configuration when an answer changes; replicas whose address
// stays keep their state across the rebuild, since their expanded backend
// keeps its name and settings.
package dnsdisc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"llmgate/internal/config"
)

// Resolver answers the lookups discovery makes; *net.Resolver is one.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// LookupTimeout bounds one backend's resolution.
const LookupTimeout = 5 * time.Second

// Options tune a Discoverer.
type Options struct {
	// Resolver returns the resolver for a backend; nil means the system's,
	// or a resolver asking the backend's discovery_resolver.
	Resolver func(b *config.Backend) Resolver
	// OnChange runs (on the discoverer's goroutine) after Run saw an
	// answer that changes some backend's addresses.
	OnChange func()
	// OnError runs after each failed resolution, with the backend's name.
	OnError func(backend string)
	Logger  *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Discoverer keeps the current addresses of every backend with
// discovery. Its methods are safe for concurrent use.
type Discoverer struct {
	opt     Options
	resolve sync.Mutex // one resolution round at a time
	wake    chan struct{}

	mu       sync.Mutex
	backends map[string]*config.Backend
	sets     map[string]*addrSet
}

// addrSet is what a backend's name resolved to.
type addrSet struct {
	settings config.Backend // the settings it was resolved for
	addrs    []string       // sorted host:port; nil before the first answer
	resolved bool           // an answer (possibly empty) came
	lastErr  string         // the last failure, "" after a success
	errors   uint64
	next     time.Time // when to resolve again
}

// New returns a discoverer with no backends; SetConfig gives it some.
func New(opt Options) *Discoverer {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &Discoverer{opt: opt, wake: make(chan struct{}, 1), backends: map[string]*config.Backend{}, sets: map[string]*addrSet{}}
}

// Enabled reports whether the configuration has a backend with discovery.
func Enabled(cfg *config.Config) bool {
	for _, b := range cfg.Backends {
		if b.Discovery != "" {
			return true
		}
	}
	return false
}

// SetConfig makes cfg's backends with discovery the ones resolved. A
// backend whose settings changed starts over (resolved again at once); the
// addresses of unchanged ones stay.
func (d *Discoverer) SetConfig(cfg *config.Config) {
	d.mu.Lock()
	d.backends = map[string]*config.Backend{}
	for name, b := range cfg.Backends {
		if b.Discovery == "" {
			continue
		}
		d.backends[name] = b
		if s := d.sets[name]; s == nil || !s.settings.SameSettings(*b) {
			d.sets[name] = &addrSet{settings: *b}
		}
	}
	for name := range d.sets {
		if d.backends[name] == nil {
			delete(d.sets, name)
		}
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Refresh resolves the backends that are due (every one when all is
// set) and reports whether some backend's addresses changed. A failed
// lookup keeps the last addresses; a name that does not exist, or has no
// address, is an answer: no addresses.
func (d *Discoverer) Refresh(ctx context.Context, all bool) (changed bool) {
	d.resolve.Lock()
	defer d.resolve.Unlock()
	now := d.opt.Now()
	d.mu.Lock()
	type job struct {
		name string
		b    *config.Backend
	}
	var jobs []job
	for name, b := range d.backends {
		if s := d.sets[name]; all || !s.resolved || !now.Before(s.next) {
			jobs = append(jobs, job{name, b})
		}
	}
	d.mu.Unlock()
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].name < jobs[j].name })
	for _, j := range jobs {
		lctx, cancel := context.WithTimeout(ctx, LookupTimeout)
		addrs, err := Lookup(lctx, d.resolver(j.b), j.b)
		cancel()
		if ctx.Err() != nil {
			return changed
		}
		d.mu.Lock()
		s := d.sets[j.name]
		if s == nil || !s.settings.SameSettings(*j.b) { // the config changed meanwhile
			d.mu.Unlock()
			continue
		}
		s.next = d.opt.Now().Add(j.b.DiscoveryEvery())
		if err != nil {
			if !s.resolved {
				// No address to keep: try again soon rather than leave
				// the models without replicas for a whole interval.
				s.next = d.opt.Now().Add(min(j.b.DiscoveryEvery(), time.Second))
			}
			s.errors++
			first := s.lastErr == ""
			s.lastErr = err.Error()
			d.mu.Unlock()
			if first {
				d.opt.Logger.Warn("DNS discovery failed: keeping the last addresses", "backend", j.name, "name", Name(j.b), "addresses", len(s.addrs), "err", err)
			}
			if d.opt.OnError != nil {
				d.opt.OnError(j.name)
			}
			continue
		}
		if s.lastErr != "" {
			d.opt.Logger.Info("DNS discovery answers again", "backend", j.name, "name", Name(j.b))
		}
		s.lastErr = ""
		if !s.resolved || !slices.Equal(s.addrs, addrs) {
			d.opt.Logger.Info("DNS discovery: replicas changed", "backend", j.name, "name", Name(j.b), "was", s.addrs, "now", addrs)
			s.addrs, s.resolved, changed = addrs, true, true
		}
		d.mu.Unlock()
	}
	return changed
}

// Run resolves each backend on its interval until ctx ends, calling
// OnChange after a round that changed some addresses.
func (d *Discoverer) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if d.Refresh(ctx, false) && d.opt.OnChange != nil {
			d.opt.OnChange()
		}
		wait := time.Hour
		now := d.opt.Now()
		d.mu.Lock()
		for name := range d.backends {
			if s := d.sets[name]; s != nil {
				wait = min(wait, max(s.next.Sub(now), 0))
			}
		}
		d.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// Addresses returns the addresses each backend with discovery has now.
func (d *Discoverer) Addresses() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string][]string, len(d.backends))
	for name := range d.backends {
		out[name] = slices.Clone(d.sets[name].addrs)
	}
	return out
}

// Name is what a backend's discovery looks up.
func Name(b *config.Backend) string {
	u, err := url.Parse(b.BaseURL)
	if err != nil {
		return b.BaseURL
	}
	if b.Discovery == config.DiscoverySRV {
		return "_" + b.SRVService() + "._tcp." + u.Hostname()
	}
	return u.Hostname()
}

// Lookup resolves one backend's replicas to sorted, distinct host:port
// addresses. A name that does not exist is no addresses, not an error.
func Lookup(ctx context.Context, r Resolver, b *config.Backend) ([]string, error) {
	u, err := url.Parse(b.BaseURL)
	if err != nil {
		return nil, err
	}
	host := u.Hostname()
	var addrs []string
	switch b.Discovery {
	case config.DiscoverySRV:
		_, srvs, err := r.LookupSRV(ctx, b.SRVService(), "tcp", host)
		if err != nil {
			if notFound(err) {
				return []string{}, nil
			}
			return nil, err
		}
		for _, s := range srvs {
			port := strconv.Itoa(int(s.Port))
			target := trimDot(s.Target)
			if net.ParseIP(target) != nil {
				addrs = append(addrs, net.JoinHostPort(target, port))
				continue
			}
			ips, err := r.LookupHost(ctx, target)
			if err != nil {
				if notFound(err) { // a replica going away between the two answers
					continue
				}
				return nil, fmt.Errorf("SRV target %s: %w", target, err)
			}
			for _, ip := range ips {
				addrs = append(addrs, net.JoinHostPort(ip, port))
			}
		}
	default:
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		ips, err := r.LookupHost(ctx, host)
		if err != nil {
			if notFound(err) {
				return []string{}, nil
			}
			return nil, err
		}
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip, port))
		}
	}
	sort.Strings(addrs)
	return slices.Compact(addrs), nil
}

func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

func trimDot(s string) string {
	if len(s) > 1 && s[len(s)-1] == '.' {
		return s[:len(s)-1]
	}
	return s
}

func (d *Discoverer) resolver(b *config.Backend) Resolver {
	if d.opt.Resolver != nil {
		if r := d.opt.Resolver(b); r != nil {
			return r
		}
	}
	return SystemResolver(b.DiscoveryResolver)
}

// SystemResolver is the system's resolver, or, given a server
// (host:port), a resolver that asks only that server.
func SystemResolver(server string) Resolver {
	if server == "" {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, network, server)
	}}
}
