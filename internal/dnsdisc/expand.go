package dnsdisc

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"llmgate/internal/config"
)

// ReplicaName is the name of the backend a discovered address becomes:
// the configured name and the address, so that a replica whose address
// stays keeps its backend (and its connections, health and breakers)
// across table rebuilds.
func ReplicaName(backend, addr string) string { return backend + "@" + addr }

// Configured returns the configured backend of a replica's name
// (name@address), or name itself when it is not one. Metrics label
// requests with it, so that pods coming and going do not leave a trail of
// series behind.
func Configured(name string) string {
	i := strings.LastIndexByte(name, '@')
	if i < 0 {
		return name
	}
	host, _, err := net.SplitHostPort(name[i+1:])
	if err != nil || net.ParseIP(host) == nil {
		return name
	}
	return name[:i]
}

// Expand returns cfg with every backend that has discovery replaced by
// one backend per address it has now, and every deployment on such a
// backend replaced by one deployment per address. cfg is not changed. A
// backend with no address yet stays, marked unavailable with the reason,
// so that its models answer with what to check rather than vanish.
func (d *Discoverer) Expand(cfg *config.Config) *config.Config {
	if !Enabled(cfg) {
		return cfg
	}
	d.mu.Lock()
	sets := make(map[string]addrSet, len(d.sets))
	for name, s := range d.sets {
		sets[name] = *s
	}
	d.mu.Unlock()
	out := *cfg
	out.Backends = make(map[string]*config.Backend, len(cfg.Backends))
	replicas := map[string][]string{}
	for name, b := range cfg.Backends {
		if b.Discovery == "" {
			out.Backends[name] = b
			continue
		}
		s, ok := sets[name]
		if ok && !s.settings.SameSettings(*b) {
			ok = false // resolved for other settings: not this backend's answer
		}
		if !ok || len(s.addrs) == 0 {
			nb := *b
			nb.Unavailable = unavailable(b, s, ok)
			out.Backends[name] = &nb
			continue
		}
		u, err := url.Parse(b.BaseURL)
		if err != nil { // validated with the config
			out.Backends[name] = b
			continue
		}
		for _, addr := range s.addrs {
			nb := *b
			nb.Name = ReplicaName(name, addr)
			nb.Address = addr
			nb.HostName = u.Host
			ru := *u
			ru.Host = addr
			nb.BaseURL = ru.String()
			out.Backends[nb.Name] = &nb
			replicas[name] = append(replicas[name], nb.Name)
		}
	}
	out.Models = make(map[string]*config.Model, len(cfg.Models))
	for name, m := range cfg.Models {
		expand := false
		for _, dep := range m.Deployments {
			if dep != nil && replicas[dep.Backend] != nil {
				expand = true
			}
		}
		if !expand {
			out.Models[name] = m
			continue
		}
		nm := *m
		nm.Deployments = nil
		for _, dep := range m.Deployments {
			if dep == nil || replicas[dep.Backend] == nil {
				nm.Deployments = append(nm.Deployments, dep)
				continue
			}
			for _, rb := range replicas[dep.Backend] {
				nd := *dep
				nd.Backend = rb
				nm.Deployments = append(nm.Deployments, &nd)
			}
		}
		out.Models[name] = &nm
	}
	return &out
}

// unavailable says why a backend with discovery has no replica, and what
// to check.
func unavailable(b *config.Backend, s addrSet, ok bool) string {
	name := Name(b)
	switch {
	case !ok || !s.resolved && s.lastErr == "":
		return fmt.Sprintf("DNS name %s has not been resolved yet; retry in a moment", name)
	case !s.resolved:
		return fmt.Sprintf("DNS name %s could not be resolved (%s); check the name in the backend's url and that the DNS server (discovery_resolver, or the system's) answers", name, s.lastErr)
	case b.Discovery == config.DiscoverySRV:
		return fmt.Sprintf("DNS name %s has no SRV records with an address; check that the Service names its port %q and has ready pods (kubectl get endpointslices)", name, b.SRVService())
	default:
		return fmt.Sprintf("DNS name %s resolved to no addresses; check that the headless Service (clusterIP: None) has ready pods (kubectl get endpointslices)", name)
	}
}
