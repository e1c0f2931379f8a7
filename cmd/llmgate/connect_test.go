package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConnect_AKeyTheGatewayRefusesFailsAndWritesNothing(t *testing.T) {
	cleanCLIEnv(t)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-lg-good" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"invalid API key","type":"authentication_error"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m","max_model_len":32768}]}`))
	}))
	defer gw.Close()
	for _, target := range []string{"codex", "claude-code", "cline", "opencode"} {
		file := filepath.Join(t.TempDir(), "config")
		_, stderr, err := runCLI(t, "connect", target, "--base-url", gw.URL, "--api-key", "sk-lg-refused", "--model", "m", "--file", file)
		if err == nil || !strings.Contains(err.Error(), "refused the API key (401") || !strings.Contains(err.Error(), "nothing was written") {
			t.Errorf("connect %s with a refused key: err = %v\n%s", target, err, stderr)
		}
		if _, statErr := os.Stat(file); !os.IsNotExist(statErr) {
			t.Errorf("connect %s wrote %s with a refused key", target, file)
		}
		// The right key writes.
		if _, stderr, err := runCLI(t, "connect", target, "--base-url", gw.URL, "--api-key", "sk-lg-good", "--model", "m", "--file", file); err != nil {
			t.Errorf("connect %s with a good key: %v\n%s", target, err, stderr)
		}
	}
}
