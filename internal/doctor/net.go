package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpproxy"

	"llmgate/internal/redact"
)

// proxyConfig reads the proxy variables the way net/http does (upper case
// first, then lower case), but from the injected environment.
func (d *diagnosis) proxyConfig() *httpproxy.Config {
	get := func(names ...string) string {
		for _, n := range names {
			if v, ok := d.env(n); ok && v != "" {
				return v
			}
		}
		return ""
	}
	return &httpproxy.Config{
		HTTPProxy:  get("HTTP_PROXY", "http_proxy"),
		HTTPSProxy: get("HTTPS_PROXY", "https_proxy"),
		NoProxy:    get("NO_PROXY", "no_proxy"),
	}
}

// proxyFor returns the proxy a Go client would use for target, or nil.
func (d *diagnosis) proxyFor(target *url.URL) (*url.URL, error) {
	return d.proxyConfig().ProxyFunc()(target)
}

func (d *diagnosis) transport() *http.Transport {
	return &http.Transport{
		Proxy: func(r *http.Request) (*url.URL, error) {
			if d.direct {
				return nil, nil
			}
			return d.proxyFor(r.URL)
		},
		DialContext:           d.dial,
		TLSClientConfig:       d.tlsConfig(),
		TLSHandshakeTimeout:   d.connectTimeout(),
		ResponseHeaderTimeout: d.opts.Timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
	}
}

func (d *diagnosis) tlsConfig() *tls.Config {
	if d.opts.TLSConfig != nil {
		return d.opts.TLSConfig.Clone()
	}
	return &tls.Config{}
}

// dial resolves with the injected resolver so tests can use host names.
func (d *diagnosis) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) != nil || d.opts.LookupHost == nil {
		return d.dialer.DialContext(ctx, network, addr)
	}
	addrs, err := d.lookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	var last error
	for _, a := range addrs {
		c, err := d.dialer.DialContext(ctx, network, net.JoinHostPort(a, port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

func (d *diagnosis) lookupHost(ctx context.Context, host string) ([]string, error) {
	if d.opts.LookupHost != nil {
		return d.opts.LookupHost(ctx, host)
	}
	return net.DefaultResolver.LookupHost(ctx, host)
}

// setProxyVars lists the proxy variables that are set, for the report.
func (d *diagnosis) setProxyVars() []string {
	var out []string
	for _, n := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"} {
		if v, ok := d.env(n); ok && v != "" {
			out = append(out, n+"="+redact.Secrets(v))
		}
	}
	return out
}

// checkProxy decides whether requests to the endpoint go through a proxy,
// and when they do and the proxy fails, retries directly and says so.
func (d *diagnosis) checkProxy(ctx context.Context) {
	c := Check{ID: "env.proxy", Title: "proxy", Status: StatusPass}
	defer func() { d.add(c) }()
	target, _ := url.Parse(d.api)
	vars := d.setProxyVars()
	proxy, err := d.proxyFor(target)
	if err != nil {
		c.Status, c.Detail = StatusFail, "proxy variable is not a valid URL: "+err.Error()
		c.Fix = "Fix or unset the proxy variable (" + strings.Join(vars, ", ") + ")."
		return
	}
	host := target.Hostname()
	if proxy == nil {
		if len(vars) == 0 {
			c.Detail = "no proxy variables set"
			return
		}
		c.Detail = "requests to " + host + " bypass the proxy (" + strings.Join(vars, ", ") + ")"
		_, all := d.lookup("ALL_PROXY")
		_, all2 := d.lookup("all_proxy")
		explicit := d.proxyConfig().HTTPProxy != "" || d.proxyConfig().HTTPSProxy != ""
		if (explicit || all || all2) && !noProxyLists(d.proxyConfig().NoProxy, host) {
			c.Status = StatusWarn
			if isLoopback(host) {
				c.Detail += "; Go exempts loopback addresses, but other HTTP libraries may send " + host + " to the proxy"
			} else {
				c.Detail += "; ALL_PROXY is ignored by Go but used by curl and by Rust clients such as Codex"
			}
			c.Fix = "Add " + host + " to NO_PROXY (export NO_PROXY=" + host + ",$NO_PROXY) so every client connects directly."
		}
		return
	}
	pshow := redact.Secrets(proxy.String())
	pctx, cancel := context.WithTimeout(ctx, d.connectTimeout()+time.Second)
	defer cancel()
	start := time.Now()
	r := d.do(pctx, http.MethodGet, d.api+"/models", d.bearer(d.keyForRequests), nil)
	c.DurationMS = ms(time.Since(start))
	if r.err == nil && r.status != http.StatusProxyAuthRequired {
		c.Detail = "requests to " + host + " go through proxy " + pshow + " (HTTP " + fmt.Sprint(r.status) + " through it)"
		return
	}
	why := "HTTP 407 Proxy Authentication Required"
	if r.err != nil {
		why = shortErr(r.err)
	}
	d.direct = true
	dctx, dcancel := context.WithTimeout(ctx, d.connectTimeout()+time.Second)
	defer dcancel()
	rd := d.do(dctx, http.MethodGet, d.api+"/models", d.bearer(d.keyForRequests), nil)
	c.Status = StatusFail
	if rd.err == nil {
		c.Detail = fmt.Sprintf("proxy %s failed (%s); the endpoint answers directly (HTTP %d), so the checks below bypass the proxy", pshow, why, rd.status)
		c.Fix = "Add " + host + " to NO_PROXY (export NO_PROXY=" + host + ",$NO_PROXY) or fix the proxy at " + pshow + "."
		return
	}
	c.Detail = fmt.Sprintf("proxy %s failed (%s), and a direct request failed too (%s)", pshow, why, shortErr(rd.err))
	c.Fix = "Fix or unset the proxy at " + pshow + "; the checks below show why the endpoint does not answer directly."
}

// noProxyLists reports whether host appears in a NO_PROXY list literally,
// which is what the least capable clients understand.
func noProxyLists(list, host string) bool {
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "*" || strings.EqualFold(strings.TrimPrefix(e, "."), host) {
			return true
		}
		if h, _, err := net.SplitHostPort(e); err == nil && strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// checkNetwork runs DNS, TCP and TLS separately so a failure names its layer.
func (d *diagnosis) checkNetwork(ctx context.Context) {
	ids := []struct{ id, title string }{{"net.dns", "DNS"}, {"net.tcp", "TCP connect"}, {"net.tls", "TLS"}}
	if d.blocked != "" {
		for _, x := range ids {
			d.skip(x.id, x.title)
		}
		return
	}
	u, _ := url.Parse(d.api)
	if p, _ := d.proxyFor(u); p != nil && !d.direct {
		for _, x := range ids {
			d.add(Check{ID: x.id, Title: x.title, Status: StatusSkip, Detail: "requests go through proxy " + redact.Secrets(p.String()) + ", which connects for us"})
		}
		return
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	// DNS.
	dns := Check{ID: "net.dns", Title: "DNS"}
	var addrs []string
	if net.ParseIP(host) != nil {
		dns.Status, dns.Detail = StatusPass, host+" is an IP address; no lookup needed"
		addrs = []string{host}
	} else {
		lctx, cancel := context.WithTimeout(ctx, d.connectTimeout())
		start := time.Now()
		var err error
		addrs, err = d.lookupHost(lctx, host)
		cancel()
		dns.DurationMS = ms(time.Since(start))
		if err != nil || len(addrs) == 0 {
			dns.Status, dns.Detail = StatusFail, "cannot resolve "+host+": "+shortErr(err)
			dns.Fix = "Check the host name's spelling, /etc/hosts and the DNS server; Docker service names resolve only inside their compose network."
			d.add(dns)
			d.blocked = "DNS"
			d.skip("net.tcp", "TCP connect")
			d.skip("net.tls", "TLS")
			return
		}
		dns.Status, dns.Detail = StatusPass, host+" → "+strings.Join(addrs, ", ")
	}
	d.add(dns)
	// TCP: try each address, because "localhost" often resolves to ::1 first
	// while the server listens on 127.0.0.1 only.
	tcp := Check{ID: "net.tcp", Title: "TCP connect"}
	var conn net.Conn
	var firstErr error
	start := time.Now()
	for i, a := range addrs {
		cctx, cancel := context.WithTimeout(ctx, d.connectTimeout())
		c, err := d.dialer.DialContext(cctx, "tcp", net.JoinHostPort(a, port))
		cancel()
		if err == nil {
			conn = c
			tcp.Status, tcp.Detail = StatusPass, "connected to "+net.JoinHostPort(a, port)
			if i > 0 {
				tcp.Status = StatusWarn
				tcp.Detail += " after " + net.JoinHostPort(addrs[0], port) + " failed (" + shortErr(firstErr) + ")"
				tcp.Fix = "Use " + a + " instead of " + host + " in the base URL, or make the server listen on " + addrs[0] + " too."
			}
			break
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	tcp.DurationMS = ms(time.Since(start))
	if conn == nil {
		tcp.Status = StatusFail
		tcp.Detail = "cannot connect to " + net.JoinHostPort(host, port) + ": " + shortErr(firstErr)
		switch {
		case errors.Is(firstErr, syscall.ECONNREFUSED):
			tcp.Fix = "Nothing listens on " + net.JoinHostPort(host, port) + ": start the server (llmgate serve listens on 127.0.0.1:4000) or correct the port."
		case isTimeout(firstErr):
			tcp.Fix = "Check firewalls and that the server binds an address reachable from here (0.0.0.0 inside containers, not 127.0.0.1)."
		default:
			tcp.Fix = "Check that the host is reachable from this machine and the port is right."
		}
		d.add(tcp)
		d.blocked = "TCP"
		d.skip("net.tls", "TLS")
		return
	}
	d.add(tcp)
	defer conn.Close()
	d.checkTLS(ctx, conn, u)
}

func (d *diagnosis) checkTLS(ctx context.Context, conn net.Conn, u *url.URL) {
	c := Check{ID: "net.tls", Title: "TLS"}
	if u.Scheme != "https" {
		c.Status, c.Detail = StatusSkip, "plain http; no TLS"
		d.add(c)
		return
	}
	conf := d.tlsConfig()
	conf.ServerName = u.Hostname()
	tc := tls.Client(conn, conf)
	hctx, cancel := context.WithTimeout(ctx, d.connectTimeout())
	defer cancel()
	start := time.Now()
	err := tc.HandshakeContext(hctx)
	c.DurationMS = ms(time.Since(start))
	if err != nil {
		c.Status, c.Detail = StatusFail, "handshake failed: "+shortErr(err)
		var unknown x509.UnknownAuthorityError
		var host x509.HostnameError
		var invalid x509.CertificateInvalidError
		var record tls.RecordHeaderError
		switch {
		case errors.As(err, &unknown):
			c.Fix = "Trust the server's CA: SSL_CERT_FILE for Go and Codex, NODE_EXTRA_CA_CERTS for Node clients, REQUESTS_CA_BUNDLE for Python."
		case errors.As(err, &host):
			c.Fix = "Use a host name the certificate covers (" + strings.Join(host.Certificate.DNSNames, ", ") + ") or reissue the certificate."
		case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
			c.Fix = "Renew the server's certificate; it has expired."
		case errors.As(err, &record):
			c.Fix = "The server speaks plain HTTP on this port: use http:// in the base URL."
		default:
			c.Fix = "Check the server's TLS setup (certificate chain, protocol versions)."
		}
		d.add(c)
		d.blocked = "TLS"
		return
	}
	st := tc.ConnectionState()
	c.Status = StatusPass
	c.Detail = tls.VersionName(st.Version)
	if len(st.PeerCertificates) > 0 {
		leaf := st.PeerCertificates[0]
		left := time.Until(leaf.NotAfter)
		c.Detail += fmt.Sprintf(", certificate valid until %s", leaf.NotAfter.UTC().Format("2006-01-02"))
		if left < 14*24*time.Hour {
			c.Status = StatusWarn
			c.Fix = "Renew the certificate; it expires in less than 14 days."
		}
	}
	d.add(c)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// shortErr drops the repetitive "Get "http://…":" prefix of url.Error.
func shortErr(err error) string {
	if err == nil {
		return "no error"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
