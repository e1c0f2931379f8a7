package gateway

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// certCheckEvery is how often, at most, a TLS handshake checks whether the
// certificate files changed (a renewal by certbot or cert-manager is then
// picked up without a restart).
var certCheckEvery = 10 * time.Second

// certReloader serves the listener's certificate and reloads it when its
// files change. A pair that fails to load (for example a renewal caught
// half-written) is logged and the previous certificate kept.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // modification times and sizes the current cert was loaded at
	checked time.Time
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	stamp, err := r.fileStamp()
	if err == nil {
		err = r.load(stamp)
	}
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s / key %s: %w", certFile, keyFile, err)
	}
	return r, nil
}

func (r *certReloader) fileStamp() (string, error) {
	var stamp string
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%d/%d ", fi.ModTime().UnixNano(), fi.Size())
	}
	return stamp, nil
}

func (r *certReloader) load(stamp string) error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.cert, r.stamp, r.checked = &c, stamp, time.Now()
	return nil
}

// get is tls.Config.GetCertificate.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < certCheckEvery {
		return r.cert, nil
	}
	r.checked = time.Now()
	stamp, err := r.fileStamp()
	if err != nil {
		r.log.Warn("TLS certificate files unreadable; serving the loaded certificate", "cert", r.certFile, "key", r.keyFile, "err", err)
		return r.cert, nil
	}
	if stamp == r.stamp {
		return r.cert, nil
	}
	if err := r.load(stamp); err != nil {
		r.log.Warn("TLS certificate changed but does not load; serving the previous one", "cert", r.certFile, "err", err)
		return r.cert, nil
	}
	r.log.Info("TLS certificate reloaded", "cert", r.certFile)
	return r.cert, nil
}

// tlsConfig is the listener's TLS configuration; protos are the
// application protocols the HTTP server speaks (ALPN).
func (r *certReloader) tlsConfig(protos ...string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get, NextProtos: protos}
}

// tlsStdServer serves HTTPS (HTTP/2 and HTTP/1.1) with net/http.
type tlsStdServer struct{ *http.Server }

func (s tlsStdServer) Serve(ln net.Listener) error { return s.ServeTLS(ln, "", "") }
