package provider

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// A given body is sent as it is, without a copy, whole; an empty one is
// no body.
func TestNewRequestGiving_SendsTheBodyWithoutACopy(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%d %q", r.ContentLength, b)
	}))
	defer srv.Close()
	be := NewBackend(&config.Backend{Name: "e", URL: srv.URL, BaseURL: srv.URL})
	defer be.Close()
	for _, body := range []string{`{"model":"a"}`, ``} {
		b := []byte(body)
		req, err := be.NewRequestGiving(context.Background(), "/v1/x", b, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 {
			b[len(b)-2] = 'z' // the caller's bytes are what is sent
			body = string(b)
		}
		resp, err := be.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if g, want := <-got, fmt.Sprintf("%d %q", len(body), body); g != want {
			t.Fatalf("backend got %s, want %s", g, want)
		}
	}
}
