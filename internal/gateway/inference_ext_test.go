package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"llmgate/internal/keys"
)

// A backend with inference_extension gets the fairness id (the key's id,
// "master" for the master key) and the key's objective; one without gets
// neither; a client's own copies, in any case, reach no backend.
func TestInferenceExtension_HeadersFromTheKeyAndClientCopiesDropped(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]http.Header{}
	record := func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			mu.Lock()
			seen[u.name] = r.Header.Clone()
			mu.Unlock()
		}
		answer(u, w, r)
	}
	pool, plain := newUpstream(t, "pool", record), newUpstream(t, "plain", record)
	f := startFaultGW(t, `
backends:
  pool: {url: "`+pool.URL+`/v1", inference_extension: true, headers: {x-gateway-inference-objective: from-config}}
  plain: {url: "`+plain.URL+`/v1"}
models:
  p: {backend: pool}
  q: {backend: plain}
`)
	ctx := context.Background()
	withObj, secret, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "svc", Objective: "critical"})
	if err != nil {
		t.Fatal(err)
	}
	_, bare, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "bare"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(model, key string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+f.g.Addr+"/v1/chat/completions", strings.NewReader(chatBody(model, false, "")))
		req.Header.Set("Authorization", "Bearer "+key)
		// The client's own copies, in several spellings.
		req.Header["x-gateway-inference-objective"] = []string{"stolen"}
		req.Header["X-GATEWAY-INFERENCE-FAIRNESS-ID"] = []string{"someone-else"}
		req.Header.Add("X-Gateway-Inference-Objective", "stolen-too")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s with %s…: %d", model, key[:10], resp.StatusCode)
		}
	}
	get := func(name string) (fair, obj []string) {
		mu.Lock()
		defer mu.Unlock()
		h := seen[name]
		for k, v := range h {
			switch strings.ToLower(k) {
			case "x-gateway-inference-fairness-id":
				fair = append(fair, v...)
			case "x-gateway-inference-objective":
				obj = append(obj, v...)
			}
		}
		return fair, obj
	}

	send("p", secret)
	if fair, obj := get("pool"); strings.Join(fair, ",") != withObj.ID || strings.Join(obj, ",") != "critical" {
		t.Errorf("key with an objective: fairness %v objective %v; want [%s] [critical]", fair, obj, withObj.ID)
	}
	send("p", bare)
	if fair, obj := get("pool"); len(fair) != 1 || fair[0] == "someone-else" || len(obj) != 0 {
		t.Errorf("key without an objective: fairness %v objective %v; want its id and no objective (not the client's, nor the config's)", fair, obj)
	}
	send("p", testMaster)
	if fair, obj := get("pool"); strings.Join(fair, ",") != "master" || len(obj) != 0 {
		t.Errorf("master key: fairness %v objective %v; want [master] and none", fair, obj)
	}
	send("q", secret)
	if fair, obj := get("plain"); len(fair) != 0 || len(obj) != 0 {
		t.Errorf("inference_extension off: fairness %v objective %v; want neither header", fair, obj)
	}
}
