package config

import (
	"net"
	"net/url"
	"regexp"
	"time"
)

// Discovery modes of a backend (backends.<name>.discovery).
const (
	// DiscoveryDNS resolves the URL's host to its addresses (A/AAAA), the
	// port staying the URL's: a Kubernetes headless Service.
	DiscoveryDNS = "dns"
	// DiscoverySRV looks up _<discovery_srv>._tcp.<host> and takes each
	// record's target and port: a headless Service's named port.
	DiscoverySRV = "srv"
)

// DefaultDiscoveryInterval is how often a discovered name is resolved
// again when discovery_interval is unset.
const DefaultDiscoveryInterval = 10 * time.Second

// DefaultDiscoverySRV is the SRV service discovery: srv looks up when
// discovery_srv is unset.
const DefaultDiscoverySRV = "http"

// dnsLabel is an RFC 1123 label, the shape of a Kubernetes port name.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// DiscoveryEvery is the backend's resolution interval.
func (b *Backend) DiscoveryEvery() time.Duration {
	if b.DiscoveryInterval > 0 {
		return time.Duration(b.DiscoveryInterval)
	}
	return DefaultDiscoveryInterval
}

// SRVService is the SRV service name discovery: srv looks up.
func (b *Backend) SRVService() string {
	if b.DiscoverySRV != "" {
		return b.DiscoverySRV
	}
	return DefaultDiscoverySRV
}

// validateDiscovery checks the discovery settings of a backend whose
// BaseURL is set.
func (b *Backend) validateDiscovery() *tlsSettingError {
	bad := func(key, msg string) *tlsSettingError { return &tlsSettingError{key: key, msg: msg} }
	switch b.Discovery {
	case "":
		switch {
		case b.DiscoveryInterval != 0:
			return bad(".discovery_interval", "is set without discovery: add discovery: dns (or srv) to resolve the URL's host again on that interval")
		case b.DiscoverySRV != "":
			return bad(".discovery_srv", "is set without discovery: srv")
		case b.DiscoveryResolver != "":
			return bad(".discovery_resolver", "is set without discovery: add discovery: dns (or srv)")
		}
		return nil
	case DiscoveryDNS, DiscoverySRV:
	default:
		return bad(".discovery", "must be dns (the URL's host resolves to one address per replica, as a Kubernetes headless Service does) or srv (SRV records _<discovery_srv>._tcp.<host>), not \""+b.Discovery+"\"")
	}
	if b.DiscoveryInterval < 0 {
		return bad(".discovery_interval", "must not be negative (for example 10s, the default)")
	}
	if b.DiscoverySRV != "" && b.Discovery != DiscoverySRV {
		return bad(".discovery_srv", "is only used with discovery: srv")
	}
	if b.DiscoverySRV != "" && !dnsLabel.MatchString(b.DiscoverySRV) {
		return bad(".discovery_srv", "must be a port name such as http (lower-case letters, digits and -), not \""+b.DiscoverySRV+"\"")
	}
	if b.DiscoveryResolver != "" {
		if _, port, err := net.SplitHostPort(b.DiscoveryResolver); err != nil || port == "" {
			return bad(".discovery_resolver", "must be a DNS server as host:port, such as 10.96.0.10:53, not \""+b.DiscoveryResolver+"\"")
		}
	}
	u, err := url.Parse(b.BaseURL)
	if err != nil {
		return bad(".url", err.Error())
	}
	if net.ParseIP(u.Hostname()) != nil {
		return bad(".url", "has an IP address as its host; discovery needs a DNS name that resolves to the replicas (such as a headless Service's vllm.models.svc.cluster.local)")
	}
	if b.Discovery == DiscoverySRV && u.Port() != "" {
		return bad(".url", "has a port, but discovery: srv takes each replica's port from its SRV record: remove the port")
	}
	return nil
}
