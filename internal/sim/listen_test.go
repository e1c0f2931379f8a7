package sim

import (
	"context"
	"llmgate/internal/testenv"
	"net/http"
	"testing"
	"time"
)

func TestListen_ServesUntilContextIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := Listen(ctx, "127.0.0.1:0", fastConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if code, b := get(t, "http://"+addr+"/v1/models"); code != 200 {
		t.Fatalf("models: %d %s", code, b)
	}
	if code, _, b := post(t, "http://"+addr+"/v1/chat/completions", chatBody); code != 200 {
		t.Fatalf("chat: %d %s", code, b)
	}
	cancel()
	testenv.Eventually(t, 5*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	}, "server stops answering after its context was cancelled")
	stop() // idempotent after the context already stopped it
}

func TestListen_ReportsBadAddressesAndConfigs(t *testing.T) {
	if _, _, err := Listen(context.Background(), "127.0.0.1:0", Config{}); err == nil {
		t.Error("empty config accepted")
	}
	if _, _, err := Listen(context.Background(), "256.0.0.1:1", fastConfig()); err == nil {
		t.Error("bad address accepted")
	}
}

func TestClose_EndsInFlightRequests(t *testing.T) {
	cfg := fastConfig()
	cfg.Models[0].DecodeBase = 5 * time.Millisecond
	s, url := startServer(t, cfg)
	done := make(chan int, 1)
	go func() {
		code, _, _ := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":1000,"ignore_eos":true}`)
		done <- code
	}()
	waitLoad(t, s, 1, 0)
	s.Close()
	select {
	case code := <-done:
		if code != http.StatusServiceUnavailable {
			t.Errorf("in-flight request got %d after Close, want 503", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("in-flight request still waiting after Close")
	}
	if code, _, _ := post(t, url+"/v1/chat/completions", chatBody); code != http.StatusServiceUnavailable {
		t.Errorf("request after Close got %d, want 503", code)
	}
}
