package provider

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"llmgate/internal/config"
)

// TestNewRequest_URLAsParsed holds the request URL built from the parsed
// base to what parsing BaseURL+path gives, and checks which pairs take
// the parsed base at all.
func TestNewRequest_URLAsParsed(t *testing.T) {
	bases := map[string]bool{ // base -> parsed once
		"http://127.0.0.1:8000/v1":                          true,
		"http://127.0.0.1:8000":                             true,
		"https://api.openai.com/v1":                         true,
		"http://host/":                                      true,
		"http://user:pw@host:1/v1":                          true,
		"http://[::1]:8080/v1":                              true,
		"http://HOST.example:80/A/b.c~d_e-f":                true,
		"http://host:8000/v1?api-version=1":                 false,
		"http://host/p%20q":                                 false,
		"http://host:/v1":                                   false,
		"http://host/v1#frag":                               false,
		"unix:/var/run/x":                                   false,
		"http://host/v1/":                                   true,
		"https://dashscope.aliyuncs.com/compatible-mode/v1": true,
	}
	paths := map[string]bool{ // path -> plain
		"": true, "/chat/completions": true, "/models": true, "/v1/messages": true, "/tokenize": true, "/v1/models/Qwen3-8B.gguf": true,
		"/a b": false, "/x?y=1": false, "/%41": false, "/é": false, "#x": false,
	}
	ctx := context.Background()
	for base, simple := range bases {
		b := NewBackend(&config.Backend{Name: "b", BaseURL: base})
		for path, plain := range paths {
			if _, pre := b.requestURL(path); pre != (simple && plain) {
				t.Errorf("%q + %q: parsed base used %v, want %v", base, path, pre, simple && plain)
			}
			for _, body := range [][]byte{nil, []byte(`{}`)} {
				got, gerr := b.NewRequestGiving(ctx, path, body, "")
				method := http.MethodGet
				if body != nil {
					method = http.MethodPost
				}
				want, werr := http.NewRequestWithContext(ctx, method, base+path, nil)
				if (gerr != nil) != (werr != nil) {
					t.Errorf("%q + %q: error %v, want %v", base, path, gerr, werr)
					continue
				}
				if werr != nil {
					continue
				}
				if !reflect.DeepEqual(got.URL, want.URL) || got.Host != want.Host || got.Method != method {
					t.Errorf("%q + %q: URL %#v host %q, want %#v host %q", base, path, got.URL, got.Host, want.URL, want.Host)
				}
				if got.URL == b.base {
					t.Errorf("%q + %q: the request holds the backend's own URL, not a copy", base, path)
				}
				if body != nil && got.ContentLength != int64(len(body)) {
					t.Errorf("%q + %q: ContentLength %d", base, path, got.ContentLength)
				}
			}
		}
	}
	// A BaseURL changed after the backend was built is not served from the
	// old parse.
	b := NewBackend(&config.Backend{Name: "b", BaseURL: "http://127.0.0.1:1/v1"})
	b.BaseURL = "http://127.0.0.1:2/v1"
	req, err := b.NewRequestGiving(ctx, "/models", nil, "")
	if err != nil || req.URL.String() != "http://127.0.0.1:2/v1/models" {
		t.Fatalf("after BaseURL changed: %v %v", req.URL, err)
	}
}
