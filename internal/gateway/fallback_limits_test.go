package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"llmgate/internal/keys"
)

// A fallback model's own limits (rpm, tpm, max_concurrency across all
// keys) apply to the requests that reach it as a fallback, as they do to
// the requests that name it: a cloud model whose rpm mirrors its
// provider's quota is not sent more because a local model failed.

// fallbackLimitsGW starts a gateway where models local and local2 (both
// on a failing upstream) fall back to cloud, whose own limits are
// cloudLimits; local falls back further to spare. It returns the gateway
// and the secret of a key without limits of its own.
func fallbackLimitsGW(t *testing.T, limiterCfg, cloudLimits string, cloud, spare *faultUpstream) (*faultGW, string) {
	t.Helper()
	down := newUpstream(t, "down", status(http.StatusInternalServerError))
	f := startFaultGW(t, limiterCfg+fmt.Sprintf(`backends:
  vllm: {url: %s/v1}
  api: {url: %s/v1}
  spare: {url: %s/v1}
models:
  local: {backend: vllm, fallbacks: [cloud, spare]}
  local2: {backend: vllm, fallbacks: [cloud]}
  cloud: {backend: api, %s}
  spare: {backend: spare}
`, down.URL, cloud.URL, spare.URL, cloudLimits))
	ctx := context.Background()
	_, secret, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.g.Verifier.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	return f, secret
}

// refusalOf decodes an OpenAI error envelope.
func refusalOf(t *testing.T, body string) (code, msg string) {
	t.Helper()
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatalf("not an OpenAI error envelope: %s", body)
	}
	return env.Error.Code, env.Error.Message
}

// TestFallback_TheFallbackModelsOwnRPMApplies: cloud allows 2 requests a
// minute. Two requests to local reach cloud; the third skips cloud for
// the next fallback, spare; a request to local2, whose only fallback is
// cloud, gets cloud's 429 naming its limit with Retry-After. (Before,
// cloud served all four.)
func TestFallback_TheFallbackModelsOwnRPMApplies(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		cloud := newUpstream(t, "cloud", answer)
		spare := newUpstream(t, "spare", answer)
		f, secret := fallbackLimitsGW(t, limiterCfg, "rpm: 2", cloud, spare)
		const req = `{"model":%q,"max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
		for i, want := range []string{"from cloud", "from cloud", "from spare"} {
			code, body := f.postAs(secret, "/v1/chat/completions", fmt.Sprintf(req, "local"))
			if code != http.StatusOK || !strings.Contains(body, want) {
				t.Fatalf("request %d to local: %d %s; want %q", i+1, code, body, want)
			}
		}
		req2, _ := http.NewRequest(http.MethodPost, "http://"+f.g.Addr+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(req, "local2")))
		req2.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req2)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		body := string(raw)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("local2 with cloud at its rpm: %d (Retry-After %q) %s; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if code, msg := refusalOf(t, body); code != "rate_limit_requests" || !strings.Contains(msg, `model "cloud"`) || !strings.Contains(msg, "2 requests per minute") {
			t.Fatalf("refusal %s / %s: want rate_limit_requests naming model cloud's 2 requests per minute", code, msg)
		}
		wantHits(t, map[*faultUpstream]int64{cloud: 2, spare: 1})
	})
}

// TestFallback_TheFallbackModelsConcurrencyIsHeldUntilTheRequestEnds:
// cloud takes one request at a time. While one request that fell back to
// it is being answered, another is refused (local2 has no other
// fallback); once the first ends, the next one is served.
func TestFallback_TheFallbackModelsConcurrencyIsHeldUntilTheRequestEnds(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		cloud, arrived, free := holdingUpstream(t, "cloud")
		defer free() // a failure must not leave the upstream's handler waiting
		spare := newUpstream(t, "spare", answer)
		f, secret := fallbackLimitsGW(t, limiterCfg, "max_concurrency: 1", cloud, spare)
		const req = `{"model":"local2","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
		var wg sync.WaitGroup
		var firstCode int
		var firstBody string
		wg.Add(1)
		go func() {
			defer wg.Done()
			firstCode, firstBody = f.postAs(secret, "/v1/chat/completions", req)
		}()
		<-arrived
		code, body := f.postAs(secret, "/v1/chat/completions", req)
		free()
		wg.Wait()
		if c, msg := refusalOf(t, body); code != http.StatusTooManyRequests || c != "rate_limit_concurrency" || !strings.Contains(msg, `model "cloud"`) {
			t.Fatalf("second request while cloud's one slot is taken: %d %s; want 429 rate_limit_concurrency naming cloud", code, body)
		}
		if firstCode != http.StatusOK || !strings.Contains(firstBody, "from cloud") {
			t.Fatalf("first request: %d %s; want cloud's answer", firstCode, firstBody)
		}
		if code, body := f.postAs(secret, "/v1/chat/completions", req); code != http.StatusOK || !strings.Contains(body, "from cloud") {
			t.Fatalf("request after the first ended: %d %s; want cloud's answer (its slot given back)", code, body)
		}
		wantHits(t, map[*faultUpstream]int64{cloud: 2, spare: 0})
	})
}

// TestFallback_TheFallbackModelsTPMIsChargedWhatItServed: cloud allows
// 100 tokens a minute; a request reserves its prompt estimate plus
// max_tokens 70 there, and is charged what cloud served (7 tokens) once
// it ends. Two such requests pass one after the other (charged their
// estimate, the second would not fit); one reserving more than is left
// is refused with rate_limit_tokens.
func TestFallback_TheFallbackModelsTPMIsChargedWhatItServed(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		cloud := newUpstream(t, "cloud", answer)
		spare := newUpstream(t, "spare", answer)
		f, secret := fallbackLimitsGW(t, limiterCfg, "tpm: 100", cloud, spare)
		const req = `{"model":"local2","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`
		for i := range 2 {
			if code, body := f.postAs(secret, "/v1/chat/completions", fmt.Sprintf(req, 70)); code != http.StatusOK || !strings.Contains(body, "from cloud") {
				t.Fatalf("request %d reserving ~75 of cloud's 100 tokens a minute: %d %s; want cloud's answer", i+1, code, body)
			}
		}
		code, body := f.postAs(secret, "/v1/chat/completions", fmt.Sprintf(req, 95))
		if c, msg := refusalOf(t, body); code != http.StatusTooManyRequests || c != "rate_limit_tokens" || !strings.Contains(msg, `model "cloud"`) {
			t.Fatalf("request reserving ~100 with 86 left: %d %s; want 429 rate_limit_tokens naming cloud", code, body)
		}
		wantHits(t, map[*faultUpstream]int64{cloud: 2, spare: 0})
	})
}

// A fallback skipped for its own limits counts in the refusals metric
// under fallback_<code>, apart from refusals before forwarding.
func TestFallback_ASkippedFallbackCountsAsAFallbackRefusal(t *testing.T) {
	cloud := newUpstream(t, "cloud", answer)
	spare := newUpstream(t, "spare", answer)
	f, secret := fallbackLimitsGW(t, "", "rpm: 1", cloud, spare)
	const req = `{"model":"local","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	for i, want := range []string{"from cloud", "from spare"} {
		if code, body := f.postAs(secret, "/v1/chat/completions", req); code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("request %d: %d %s; want %q", i+1, code, body, want)
		}
	}
	resp, err := http.Get("http://" + f.g.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	want := `llmgate_limiter_refusals_total{reason="fallback_rate_limit_requests",status="429"} 1`
	if !strings.Contains(string(b), want) {
		t.Fatalf("metrics lack %s:\n%s", want, grepLines(string(b), "llmgate_limiter_refusals_total"))
	}
}

// holdingUpstream answers like answer, but holds the first chat
// completion it gets until free is called (arrived is closed when it
// comes); the others are answered at once.
func holdingUpstream(t *testing.T, name string) (u *faultUpstream, arrived <-chan struct{}, free func()) {
	in, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var chats atomic.Int64
	u = newUpstream(t, name, func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" && chats.Add(1) == 1 {
			close(in)
			<-release
		}
		answer(u, w, r)
	})
	return u, in, func() { once.Do(func() { close(release) }) }
}

// A fallback that failed gives its concurrency slot back as soon as the
// request moves on to the next fallback, not when the request ends: while
// a request that went on from a failing cloud is held at spare, another
// request may try cloud.
func TestFallback_AFailedFallbackGivesItsSlotBackWhenTheRequestMovesOn(t *testing.T) {
	cloud := newUpstream(t, "cloud", status(http.StatusInternalServerError))
	spare, arrived, free := holdingUpstream(t, "spare")
	defer free()
	f, secret := fallbackLimitsGW(t, "", "max_concurrency: 1", cloud, spare)
	first := make(chan string, 1)
	go func() {
		code, body := f.postAs(secret, "/v1/chat/completions", `{"model":"local","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`)
		first <- fmt.Sprint(code, " ", body)
	}()
	<-arrived // the first request failed at cloud and waits at spare
	code, body := f.postAs(secret, "/v1/chat/completions", `{"model":"local2","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`)
	if c, _ := refusalOf(t, body); code == http.StatusTooManyRequests || c == "rate_limit_concurrency" {
		t.Fatalf("local2 while the first request waits at spare: %d %s; want cloud tried (its slot given back when the first moved on)", code, body)
	}
	free()
	if got := <-first; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, "from spare") {
		t.Fatalf("first request: %s; want spare's answer", got)
	}
	wantHits(t, map[*faultUpstream]int64{cloud: 2, spare: 1})
}
