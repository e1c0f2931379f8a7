package gateway

import (
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/testenv"
)

// An https:// backend with a private CA: refused with a message naming
// ca_file until ca_file trusts it; a backend requiring a client
// certificate gets one from client_cert_file/client_key_file.
func TestGateway_BackendPrivateCAAndClientCert(t *testing.T) {
	dir := t.TempDir()
	clientCert, clientKey, clientPool := testenv.TLSCert(t, dir, 7)
	var sawClientCert atomic.Bool // of the last chat request (not the gateway's context-length probes)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		sawClientCert.Store(r.TLS != nil && len(r.TLS.PeerCertificates) == 1 && r.TLS.PeerCertificates[0].SerialNumber.Int64() == 7)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	var require atomic.Bool // the backend demands a client certificate
	up.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := &tls.Config{Certificates: up.TLS.Certificates, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: clientPool}
		if require.Load() {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}}
	up.StartTLS()
	defer up.Close()
	caFile := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(backend string) result {
		t.Helper()
		f := startFaultGW(t, "backends:\n  b: {url: "+up.URL+"/v1"+backend+"}\nmodels:\n  m: {backend: b}\n")
		e := &env{t: t, g: f.g}
		return e.do("POST", "/v1/chat/completions", testMaster, chatBody("m", false, ""))
	}
	if r := run(""); r.status != 502 || !strings.Contains(r.body, "backend_tls_error") || !strings.Contains(r.body, "backends.b.ca_file") {
		t.Fatalf("private CA without ca_file: %d %s, want a 502 naming backends.b.ca_file", r.status, r.body)
	}
	require.Store(true)
	if r := run(", ca_file: " + caFile); r.status != 502 || !strings.Contains(r.body, "backends.b.client_cert_file") {
		t.Fatalf("a backend requiring a client certificate, none configured: %d %s, want a 502 naming client_cert_file", r.status, r.body)
	}
	require.Store(false)
	if r := run(", ca_file: " + caFile); r.status != 200 || sawClientCert.Load() {
		t.Fatalf("with ca_file: %d %s (client cert sent: %v)", r.status, r.body, sawClientCert.Load())
	}
	if r := run(", ca_file: " + caFile + ", client_cert_file: " + clientCert + ", client_key_file: " + clientKey); r.status != 200 || !sawClientCert.Load() {
		t.Fatalf("with a client certificate: %d %s (client cert seen: %v)", r.status, r.body, sawClientCert.Load())
	}
	if r := run(", tls_skip_verify: true"); r.status != 200 {
		t.Fatalf("tls_skip_verify: %d %s", r.status, r.body)
	}
}

func TestConfig_BackendTLSSettings(t *testing.T) {
	dir := t.TempDir()
	cert, key, _ := testenv.TLSCert(t, dir, 1)
	notPEM := filepath.Join(dir, "x.txt")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for _, c := range []struct{ backend, want string }{
		{"{url: http://127.0.0.1:8000, ca_file: " + cert + "}", "apply to https:// backends only"},
		{"{url: https://x.example, ca_file: " + dir + "/missing.pem}", "backends.b.ca_file: open"},
		{"{url: https://x.example, ca_file: " + notPEM + "}", "backends.b.ca_file: " + notPEM + " holds no PEM certificate"},
		{"{url: https://x.example, client_cert_file: " + cert + "}", "backends.b.client_cert_file: client_cert_file and client_key_file go together"},
		{"{url: https://x.example, client_cert_file: " + cert + ", client_key_file: " + cert + "}", "cannot load the client certificate and key"},
	} {
		_, err := config.Load(strings.NewReader("backends:\n  b: "+c.backend+"\n"), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.backend, err, c.want)
		}
	}
	if _, err := config.Load(strings.NewReader("backends:\n  b: {url: https://x.example, ca_file: "+cert+", client_cert_file: "+cert+", client_key_file: "+key+"}\n"), "x.yaml"); err != nil {
		t.Fatal(err)
	}
}
