package provider

import (
	"context"
	"io"
	"testing"

	"llmgate/internal/config"
)

// net/http's Transport may read a request body after Do returns, while the
// gateway reuses the bytes of a finished request: a backend on the
// Transport gets a copy, so a later request's bytes can never reach it.
func TestNewRequest_TransportGetsItsOwnBody(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    config.Backend
		own  bool
	}{
		{"https", config.Backend{Name: "c", URL: "https://api.example.com/v1", BaseURL: "https://api.example.com/v1"}, true},
		{"stdlib client", config.Backend{Name: "s", URL: "http://127.0.0.1:1/v1", BaseURL: "http://127.0.0.1:1/v1", UpstreamClient: config.UpstreamClientStdlib}, true},
		{"builtin client", config.Backend{Name: "b", URL: "http://127.0.0.1:1/v1", BaseURL: "http://127.0.0.1:1/v1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := NewBackend(&tc.b)
			body := []byte(`{"model":"a"}`)
			req, err := be.NewRequest(context.Background(), "/chat/completions", body, "")
			if err != nil {
				t.Fatal(err)
			}
			copy(body, `{"model":"B"}`) // the pooled buffer, reused by another request
			got, _ := io.ReadAll(req.Body)
			if own := string(got) == `{"model":"a"}`; own != tc.own {
				t.Fatalf("body sent = %s; own copy %v, want %v", got, own, tc.own)
			}
		})
	}
}
