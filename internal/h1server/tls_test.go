package h1server

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"llmgate/internal/testenv"
)

// Over TLS: requests carry req.TLS, keep-alive works, a plain-text client
// is refused, and a client that goes away still cancels its request (the
// watch aborts a read on the TLS connection the way net/http does).
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := testenv.TLSCert(t, t.TempDir(), 1)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	canceled := make(chan struct{})
	s := &Server{ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second, WatchAfter: 5 * time.Millisecond, Logger: quiet,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				select {
				case <-r.Context().Done():
					close(canceled)
				case <-time.After(10 * time.Second):
					t.Error("request context not canceled 10s after the TLS client left")
				}
				return
			}
			if r.TLS == nil || !r.TLS.HandshakeComplete {
				t.Errorf("request without req.TLS: %+v", r.TLS)
			}
			fmt.Fprintf(w, "tls %x", r.TLS.Version)
		})}
	addr, _ := startH1With(t, s)

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := 0; i < 3; i++ { // the same connection, kept alive
		resp, err := cl.Get("https://" + addr + "/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 1 || !strings.HasPrefix(string(b), "tls 30") || resp.TLS == nil {
			t.Fatalf("request %d: %s %d %q", i, resp.Proto, resp.StatusCode, b)
		}
	}
	if resp, err := http.Get("http://" + addr + "/x"); err != nil || resp.StatusCode != 400 {
		t.Fatalf("a plain-HTTP request to the TLS listener: %v %v, want a 400 saying to use https", err, resp)
	} else if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "use https://") {
		t.Fatalf("plain-HTTP answer %q", b)
	}

	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	c.Close()
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never saw the TLS client leave")
	}
}
