package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/testenv"
)

// tls_cert_file/tls_key_file serve HTTPS (HTTP/2 and HTTP/1.1), and a
// renewed certificate is picked up without a restart.
func TestGateway_TLS(t *testing.T) {
	old := certCheckEvery
	certCheckEvery = 0 // check the files at every handshake
	defer func() { certCheckEvery = old }()
	dir := t.TempDir()
	certFile, keyFile, pool := testenv.TLSCert(t, dir, 1)
	e := startEnv(t, func(c *config.Config) {
		c.TLSCertFile, c.TLSKeyFile = certFile, keyFile
	})
	if !strings.HasPrefix(e.g.URL(), "https://") {
		t.Fatalf("URL %s, want https", e.g.URL())
	}
	get := func(pool *x509.CertPool) (*http.Response, string, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", e.g.URL()+"/models", nil)
		req.Header.Set("Authorization", "Bearer "+testMaster)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), nil
	}
	resp, body, err := get(pool)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(body, `"qwen"`) {
		t.Fatalf("GET /v1/models over TLS: %v %v %s", err, resp, body)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
	}
	if serial := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); serial != 1 {
		t.Fatalf("certificate serial %d, want 1", serial)
	}
	// Plain HTTP to the TLS port: a 400 that says to use https.
	if resp, err := http.Get("http://" + e.g.Addr + "/healthz"); err != nil || resp.StatusCode != 400 {
		t.Fatalf("plain HTTP to the TLS listener: %v %v, want a 400", err, resp)
	} else if b, _ := io.ReadAll(resp.Body); !strings.Contains(strings.ToLower(string(b)), "https") {
		t.Fatalf("plain HTTP to the TLS listener: %s, want a message naming https", b)
	}

	// Renewal: new files in place; the next handshake serves them.
	_, _, pool2 := testenv.TLSCert(t, dir, 2)
	future := time.Now().Add(time.Minute) // a modification time the reloader cannot miss
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, future, future); err != nil {
			t.Fatal(err)
		}
	}
	resp, _, err = get(pool2)
	if err != nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 2 {
		t.Fatalf("after renewal: %v %v, want the certificate with serial 2", err, resp)
	}
	// A half-written renewal keeps the loaded certificate.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if resp, _, err = get(pool2); err != nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 2 {
		t.Fatalf("after a broken key file: %v %v, want serial 2 still served", err, resp)
	}
}

func TestConfig_TLSNeedsBothFilesThatLoad(t *testing.T) {
	dir := t.TempDir()
	certFile, _, _ := testenv.TLSCert(t, dir, 1)
	for _, c := range []struct{ src, want string }{
		{"tls_cert_file: " + certFile + "\n", "tls_key_file: is required with tls_cert_file"},
		{"tls_cert_file: " + certFile + "\ntls_key_file: " + dir + "/missing.pem\n", "tls_cert_file: cannot load the certificate and key"},
	} {
		_, err := config.Load(strings.NewReader(c.src), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.src, err, c.want)
		}
	}
}
