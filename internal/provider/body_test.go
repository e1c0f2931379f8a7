package provider

import (
	"context"
	"io"
	"testing"

	"llmgate/internal/config"
)

// net/http's Transport may read a request body after Do returns, while the
// gateway reuses the bytes of a finished request: a backend gets a copy, so
// a later request's bytes can never reach it.
func TestNewRequest_TransportGetsItsOwnBody(t *testing.T) {
	for _, b := range []config.Backend{
		{Name: "c", URL: "https://api.example.com/v1", BaseURL: "https://api.example.com/v1"},
		{Name: "e", URL: "http://127.0.0.1:1/v1", BaseURL: "http://127.0.0.1:1/v1"},
	} {
		t.Run(b.Name, func(t *testing.T) {
			be := NewBackend(&b)
			body := []byte(`{"model":"a"}`)
			req, err := be.NewRequest(context.Background(), "/chat/completions", body, "")
			if err != nil {
				t.Fatal(err)
			}
			copy(body, `{"model":"B"}`) // the pooled buffer, reused by another request
			if got, _ := io.ReadAll(req.Body); string(got) != `{"model":"a"}` {
				t.Fatalf("body sent = %s, want its own copy", got)
			}
		})
	}
}
