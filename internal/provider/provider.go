// Package provider turns a configured backend into HTTP requests: URL
// joining, authentication headers, a connection pool sized for a gateway,
// time-outs, and classification of transport failures into client-safe
// errors that name the backend.
package provider

import (
	"bytes"
	"context"
	cryptotls "crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/dialect"
)

// Backend is a configured upstream, ready to send requests.
type Backend struct {
	Name    string
	BaseURL string
	Dialect dialect.Dialect
	// DropParams are top-level request members this backend never gets
	// (drop_params).
	DropParams []string
	// Engine is the backend's engine preset (engine: vllm, llamacpp, ...),
	// "" when it names none: a hint of which engine answers there.
	Engine string
	// Address is the address DNS discovery found this replica at ("" for
	// a configured URL); Unavailable, when set, says why the backend
	// takes no requests (its name resolved to no address).
	Address     string
	Unavailable string
	// InferenceExtension says the backend wants the Gateway API Inference
	// Extension's headers (inference_extension: true).
	InferenceExtension bool
	host               string // Host header to send, when the URL's host was replaced by an address
	apiKey             string
	bearer             string // "Bearer " + apiKey
	headers            map[string]string
	// tr sends the requests; client, on the same pool, the health probes
	// (which follow redirects).
	tr        *http.Transport
	client    *http.Client
	timeout   time.Duration
	idle      time.Duration
	firstByte time.Duration
	health    *config.HealthCheck
	// base is BaseURL parsed once, when it is as simple as local engines'
	// and cloud APIs' are (see parseBase); baseOf is the BaseURL it holds.
	base   *url.URL
	baseOf string
}

// NewBackend builds a Backend from configuration. Each backend owns its
// transport so that pools and time-outs do not interfere across backends.
func NewBackend(b *config.Backend) *Backend {
	tr := newTransport(b)
	return &Backend{
		Name: b.Name, BaseURL: b.BaseURL, Dialect: b.Dialect, apiKey: b.APIKey, bearer: "Bearer " + b.APIKey, DropParams: b.DropParams, Engine: b.Engine,
		Address: b.Address, Unavailable: b.Unavailable, InferenceExtension: b.InferenceExtension, host: b.HostName,
		headers: b.Headers, tr: tr, client: &http.Client{Transport: tr}, timeout: time.Duration(b.Timeout),
		idle: time.Duration(b.IdleTimeout), firstByte: time.Duration(b.FirstByte), health: b.HealthCheck,
		base: parseBase(b.BaseURL), baseOf: b.BaseURL,
	}
}

// parseBase parses a base URL once for every request's URL, or returns
// nil for one that url.Parse would not simply extend with a path (a
// query, a fragment, escapes in its path, an empty port), which are then
// parsed with each request.
func parseBase(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || u.RawPath != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" ||
		u.Host == "" || strings.HasSuffix(u.Host, ":") || !plainPath(u.Path) {
		return nil
	}
	return u
}

// plainPath reports whether path holds only characters a URL path holds
// as they are: letters, digits and / - _ . ~
func plainPath(path string) bool {
	for i := 0; i < len(path); i++ {
		c := path[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
			return false
		}
	}
	return true
}

// requestURL is url.Parse(BaseURL+path) without the parse, for a path of
// plain characters (every API path the gateway sends is one); ok is false
// otherwise.
func (b *Backend) requestURL(path string) (u *url.URL, ok bool) {
	if b.base == nil || b.baseOf != b.BaseURL || !plainPath(path) {
		return nil, false
	}
	v := *b.base
	v.Path += path
	return &v, true
}

// maxIdlePerHost is how many keep-alive connections a backend keeps
// open: more than the requests a gateway has in flight to one engine, so
// that a burst does not end with connections closed and dialled again.
const maxIdlePerHost = 512

// newTransport returns net/http's Transport tuned for one backend. Two
// kinds differ: a plain http:// backend (a local engine) speaks
// HTTP/1.1 only, whatever the Transport's defaults may try one day; an
// https:// one (a cloud API) negotiates HTTP/2 or HTTP/1.1 with ALPN.
// Both go through a proxy when HTTP_PROXY / HTTPS_PROXY / NO_PROXY say so
// (read once, at the first request), as they always have.
func newTransport(b *config.Backend) *http.Transport {
	connect := time.Duration(b.ConnectTimeout)
	if connect <= 0 {
		connect = 5 * time.Second
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	tls := strings.HasPrefix(b.BaseURL, "https://")
	if tls {
		protocols.SetHTTP2(true)
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          2 * maxIdlePerHost,
		MaxIdleConnsPerHost:   maxIdlePerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: time.Duration(b.FirstByte),
		ExpectContinueTimeout: time.Second,
		// Bodies are inspected for usage; ask upstreams for identity encoding.
		DisableCompression: true,
		ForceAttemptHTTP2:  tls,
		Protocols:          &protocols,
		WriteBufferSize:    32 << 10,
		ReadBufferSize:     32 << 10,
	}
	if b.TLS != nil {
		tr.TLSClientConfig = b.TLS.Clone()
	}
	if tls && b.HostName != "" {
		// A replica found by DNS is dialled at its address, and its
		// certificate is checked against the name the URL had.
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &cryptotls.Config{}
		}
		name := b.HostName
		if h, _, err := net.SplitHostPort(name); err == nil {
			name = h
		}
		tr.TLSClientConfig.ServerName = name
	}
	return tr
}

// Close releases idle connections.
func (b *Backend) Close() {
	b.tr.CloseIdleConnections()
}

// Timeout is the whole-request time-out, zero for none.
func (b *Backend) Timeout() time.Duration { return b.timeout }

// IdleTimeout bounds the gap between two stream events, zero for none.
func (b *Backend) IdleTimeout() time.Duration { return b.idle }

// FirstByteTimeout bounds the wait for response headers and, for a stream,
// for its first event (engines send stream headers at once and the first
// token only after queueing and prefill); zero for none.
func (b *Backend) FirstByteTimeout() time.Duration { return b.firstByte }

// NewRequest builds a POST (or GET when body is nil) to BaseURL+path with the
// backend's credentials. The request has its own copy of body: net/http's
// Transport may still read a body after RoundTrip returns (an early
// answer, a cut connection).
func (b *Backend) NewRequest(ctx context.Context, path string, body []byte, requestID string) (*http.Request, error) {
	if body != nil {
		body = bytes.Clone(body)
	}
	return b.NewRequestGiving(ctx, path, body, requestID)
}

// NewRequestGiving is NewRequest without the copy: body is given to the
// Transport, which may read it after RoundTrip returns, so the caller must
// neither change nor reuse it afterwards (a pooled buffer is dropped, not
// put back).
func (b *Backend) NewRequestGiving(ctx context.Context, path string, body []byte, requestID string) (*http.Request, error) {
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		// A *bytes.Reader: the Transport sends the headers and a small
		// body in one write.
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	// The URL is BaseURL+path, parsed once per backend rather than per
	// request where the two are plain (TestNewRequest_URLAsParsed).
	u, pre := b.requestURL(path)
	target := ""
	if !pre {
		target = b.BaseURL + path
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	if pre {
		req.URL, req.Host = u, u.Host
	}
	if b.host != "" {
		req.Host = b.host
	}
	h := req.Header
	if body != nil {
		h["Content-Type"] = jsonCT
	}
	if b.apiKey != "" {
		if b.Dialect == dialect.Anthropic {
			h["X-Api-Key"] = []string{b.apiKey}
		} else {
			h["Authorization"] = []string{b.bearer}
		}
	}
	if b.Dialect == dialect.Anthropic {
		h["Anthropic-Version"] = anthropicVersion
	}
	if requestID != "" {
		h["X-Request-Id"] = []string{requestID}
	}
	if req.URL.Scheme == "http" {
		// A local engine closes idle keep-alive connections on its own
		// clock (uvicorn after 5 s): a request sent on one as it closes
		// is sent again on a fresh connection when no byte of an answer
		// came back. The Transport does that for requests it deems
		// idempotent; a nil Idempotency-Key says so without sending it.
		h["Idempotency-Key"] = nil
	}
	for k, v := range b.headers {
		h.Set(k, v)
	}
	return req, nil
}

var anthropicVersion = []string{"2023-06-01"}

var jsonCT = []string{"application/json"}

// Do sends the request, as a proxy does: straight to the Transport, so a
// redirect is the backend's answer rather than followed (and no headers
// are copied for one). Transport failures come back as *apierror.Error
// that say which backend failed and how.
func (b *Backend) Do(req *http.Request) (*http.Response, error) {
	resp, err := b.tr.RoundTrip(req)
	if err != nil {
		return nil, b.Classify(req.Context(), err)
	}
	return resp, nil
}

// headerTimeoutText is how net/http's Transport words its
// ResponseHeaderTimeout (set from first_byte_timeout); the error type is
// unexported, so the text is what tells it from other timeouts.
const headerTimeoutText = "timeout awaiting response headers"

// Classify turns a transport error into a client-facing error.
func (b *Backend) Classify(ctx context.Context, err error) *apierror.Error {
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return ae
	}
	if ctx.Err() == context.Canceled {
		return apierror.ClientClosed(err)
	}
	var ne net.Error
	if b.firstByte > 0 && strings.Contains(err.Error(), headerTimeoutText) {
		return apierror.Newf(http.StatusGatewayTimeout, apierror.KindTimeout, "backend_timeout",
			"backend %q (%s) sent no response headers within first_byte_timeout (%s): it may be queueing or overloaded; raise backends.%s.first_byte_timeout if the model is slow to start",
			b.Name, b.BaseURL, b.firstByte, b.Name).Wrap(err)
	}
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return apierror.Newf(http.StatusGatewayTimeout, apierror.KindTimeout, "backend_timeout",
			"backend %q (%s) did not answer in time; check that it is not overloaded, or raise backends.%s.timeout / first_byte_timeout",
			b.Name, b.BaseURL, b.Name).Wrap(err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_unavailable",
			"backend %q refused the connection at %s: is the server running and listening on that port?", b.Name, b.BaseURL).Wrap(err)
	}
	var opErr *net.OpError
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknownCA):
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_tls_error",
			"backend %q (%s) presented a certificate signed by an authority this machine does not trust: set backends.%s.ca_file to that CA's certificate (PEM)",
			b.Name, b.BaseURL, b.Name).Wrap(err)
	case errors.As(err, &badHost):
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_tls_error",
			"backend %q: its certificate is not valid for %s (%v); use the host name the certificate names in backends.%s.url",
			b.Name, badHost.Host, err, b.Name).Wrap(err)
	case errors.As(err, &invalid):
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_tls_error",
			"backend %q (%s) presented an invalid certificate: %v", b.Name, b.BaseURL, invalid).Wrap(err)
	case errors.As(err, &opErr) && opErr.Op == "remote error": // a TLS alert from the backend (crypto/tls's wrapping)
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_tls_error",
			"backend %q (%s) refused the TLS handshake (%s): if it requires a client certificate, set backends.%s.client_cert_file and client_key_file (and check that the certificate is one it accepts)",
			b.Name, b.BaseURL, shortErr(err), b.Name).Wrap(err)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_unavailable",
			"backend %q: cannot resolve host %q; check backends.%s.url", b.Name, dnsErr.Name, b.Name).Wrap(err)
	}
	return apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "backend_error",
		"backend %q (%s) failed: %s", b.Name, b.BaseURL, shortErr(err)).Wrap(err)
}

// shortErr keeps the last part of a wrapped network error, which is the
// informative one ("connection reset by peer"), without internal URLs twice.
func shortErr(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		// The innermost operation is the informative one ("write:
		// connection reset by peer", not "readfrom tcp …: write tcp …").
		for {
			var inner *net.OpError
			if !errors.As(oe.Err, &inner) || inner.Err == nil {
				break
			}
			oe = inner
		}
		return fmt.Sprintf("%s: %v", oe.Op, oe.Err)
	}
	return err.Error()
}
