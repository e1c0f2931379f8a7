package provider

import (
	"context"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/dialect"
)

// A replica found by DNS is dialled at its address but named, in the Host
// header and the TLS server name, as the URL named it.
func TestBackend_DiscoveredReplicaKeepsTheNameForHostAndTLS(t *testing.T) {
	b := NewBackend(&config.Backend{Name: "pool@10.0.0.1:8443", BaseURL: "https://10.0.0.1:8443/v1", Dialect: dialect.OpenAI,
		HostName: "vllm.ns.svc:8443", Address: "10.0.0.1:8443"})
	req, err := b.NewRequest(context.Background(), "/chat/completions", []byte(`{}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if req.URL.Host != "10.0.0.1:8443" || req.Host != "vllm.ns.svc:8443" {
		t.Fatalf("URL host %q, Host %q", req.URL.Host, req.Host)
	}
	if b.tr.TLSClientConfig == nil || b.tr.TLSClientConfig.ServerName != "vllm.ns.svc" {
		t.Fatalf("TLS server name = %+v", b.tr.TLSClientConfig)
	}
	plain := NewBackend(&config.Backend{Name: "x", BaseURL: "https://api.example.com/v1", Dialect: dialect.OpenAI})
	if r, _ := plain.NewRequest(context.Background(), "/x", nil, ""); r.Host != "api.example.com" || plain.tr.TLSClientConfig != nil {
		t.Fatalf("a configured URL is sent as is: Host %q, TLS %+v", r.Host, plain.tr.TLSClientConfig)
	}
}
