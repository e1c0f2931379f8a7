package discover

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func port(t *testing.T, url string) int {
	_, p, _ := net.SplitHostPort(url[len("http://"):])
	n, _ := strconv.Atoi(p)
	return n
}

func TestProbe_FindsEnginesAndSkipsClosedPorts(t *testing.T) {
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"object":"list","data":[{"id":"qwen2.5-7b-instruct"},{"id":"qwen3-32b"}]}`)
	}))
	defer vllm.Close()
	notAPI := httptest.NewServer(http.NotFoundHandler())
	defer notAPI.Close()
	keyed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}`)
	}))
	defer keyed.Close()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html>a web app</html>`)
	}))
	defer web.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	found, refused := Probe(context.Background(), "127.0.0.1", []LocalPort{
		{port(t, vllm.URL), "vllm", ""}, {port(t, notAPI.URL), "sglang", ""}, {closedPort, "ollama", ""},
		{port(t, keyed.URL), "llamacpp", ""}, {port(t, web.URL), "vllm", ""},
	}, 500*time.Millisecond, func(string) (string, bool) { return "", false })
	if len(found) != 1 || found[0].URL != vllm.URL+"/v1" || len(found[0].Models) != 2 {
		t.Fatalf("found %+v", found)
	}
	// A closed port says nothing; every HTTP server that answered
	// otherwise is reported with what it answered.
	reasons := map[string]string{}
	for _, r := range refused {
		reasons[r.Addr] = r.Reason
	}
	if len(refused) != 3 {
		t.Fatalf("refused %+v", refused)
	}
	for u, want := range map[string]string{notAPI.URL: "answered 404", keyed.URL: "wants an API key", web.URL: "not with an OpenAI model list"} {
		if got := reasons[u[len("http://"):]]; !strings.Contains(got, want) {
			t.Errorf("%s: reason %q, want it to say %q", u, got, want)
		}
	}
}

func TestBuild_RegistersLocalModelsAndCloudKeys(t *testing.T) {
	local := []Found{{Backend: "vllm-8000", URL: "http://127.0.0.1:8000/v1", Models: []string{"qwen2.5-7b-instruct", "deepseek-chat"}}}
	env := map[string]string{"DEEPSEEK_API_KEY": "sk-ds", "OPENAI_API_KEY": "  "}
	cfg, found := Build(local, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, DefaultClouds)
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Models["deepseek-chat"].Backend != "vllm-8000" {
		t.Errorf("a local model must win over the cloud one of the same name: %+v", cfg.Models["deepseek-chat"])
	}
	if cfg.Models["deepseek-reasoner"].Backend != "deepseek" || cfg.Backends["deepseek"].APIKey != "sk-ds" {
		t.Errorf("deepseek not registered from DEEPSEEK_API_KEY")
	}
	if _, ok := cfg.Backends["openai"]; ok {
		t.Errorf("a blank OPENAI_API_KEY must not register openai")
	}
	if len(found) != 2 {
		t.Errorf("found = %+v", found)
	}
}

func TestShortName_OnlyForFilePaths(t *testing.T) {
	for id, want := range map[string]string{
		"/root/.cache/models/qwen3-tiny-random.gguf": "qwen3-tiny-random",
		"models/Qwen3-8B-Q4_K_M.GGUF":                "Qwen3-8B-Q4_K_M",
		"Qwen3-8B-Q4_K_M.gguf":                       "Qwen3-8B-Q4_K_M",
		`C:\models\phi-4.gguf`:                       "phi-4",
		"/models/Qwen2.5-7B-Instruct":                "Qwen2.5-7B-Instruct",
		"Qwen/Qwen2.5-7B-Instruct":                   "", // a Hugging Face id, not a path
		"qwen3:8b":                                   "",
		"/models/":                                   "",
		"/models/.gguf":                              "",
		".gguf":                                      "",
		"/":                                          "",
	} {
		if got := ShortName(id); got != want {
			t.Errorf("ShortName(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestBuild_PathModelIDsGetAShortNameThatNeverShadowsAnID(t *testing.T) {
	local := []Found{
		{Backend: "llamacpp-8080", URL: "http://127.0.0.1:8080/v1", Models: []string{"/m/qwen3-8b.gguf", "/m/phi-4.gguf"}},
		{Backend: "vllm-8000", URL: "http://127.0.0.1:8000/v1", Models: []string{"/other/qwen3-8b.gguf"}},
		{Backend: "ollama-11434", URL: "http://127.0.0.1:11434/v1", Models: []string{"phi-4"}},
	}
	cfg, found := Build(local, func(string) (string, bool) { return "", false }, nil)
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := cfg.Models["qwen3-8b"]
	if m == nil || m.Backend != "llamacpp-8080" || m.UpstreamModel != "/m/qwen3-8b.gguf" {
		t.Fatalf("short name: %+v (the first backend's file must win)", m)
	}
	if id, ok := cfg.Models["/m/qwen3-8b.gguf"]; ok {
		t.Errorf("the path must give way to its short name: %+v", id)
	}
	if id := cfg.Models["/other/qwen3-8b.gguf"]; id == nil || id.Backend != "vllm-8000" {
		t.Errorf("a path whose short name is taken keeps its id: %+v", id)
	}
	if id := cfg.Models["/m/phi-4.gguf"]; id == nil || id.Backend != "llamacpp-8080" {
		t.Errorf("a path whose short name is a real id keeps its id: %+v", id)
	}
	if p := cfg.Models["phi-4"]; p == nil || p.Backend != "ollama-11434" {
		t.Errorf("a real id must win over a short name: %+v", p)
	}
	if got := strings.Join(ServedAs(cfg, found[0]), ","); got != "qwen3-8b,/m/phi-4.gguf" {
		t.Errorf("found[0] served as %s", got)
	}
	if got := strings.Join(ServedAs(cfg, found[1]), ","); got != "/other/qwen3-8b.gguf" {
		t.Errorf("found[1] served as %s", got)
	}
}

// An engine started with --api-key refuses the probe; the key variable it
// reads its key from (vLLM VLLM_API_KEY, llama.cpp LLAMA_API_KEY), set
// where the gateway starts too, is tried, and the backend keeps it.
func TestProbe_AnEngineWithAKeyIsFoundWithItsKeyVariable(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k-123" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"Unauthorized"}`)
			return
		}
		fmt.Fprint(w, `{"object":"list","data":[{"id":"qwen3-8b"}]}`)
	}))
	defer engine.Close()
	env := map[string]string{"VLLM_API_KEY": " k-123 ", "LLAMA_API_KEY": "wrong"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	p := port(t, engine.URL)

	found, refused := Probe(context.Background(), "127.0.0.1", []LocalPort{{p, "vllm", "VLLM_API_KEY"}}, 500*time.Millisecond, lookup)
	if len(found) != 1 || len(refused) != 0 || found[0].APIKey != "k-123" || !strings.Contains(found[0].Source, "key from $VLLM_API_KEY") {
		t.Fatalf("found %+v, refused %+v", found, refused)
	}
	cfg, _ := Build(found, func(string) (string, bool) { return "", false }, nil)
	if b := cfg.Backends[found[0].Backend]; b == nil || b.APIKey != "k-123" {
		t.Fatalf("backend %+v: the key must go with it", b)
	}

	// The wrong key, or no variable: refused, saying which.
	_, refused = Probe(context.Background(), "127.0.0.1", []LocalPort{{p, "llamacpp", "LLAMA_API_KEY"}}, 500*time.Millisecond, lookup)
	if len(refused) != 1 || !strings.Contains(refused[0].Reason, "also with the key in $LLAMA_API_KEY") {
		t.Fatalf("refused %+v", refused)
	}
	_, refused = Probe(context.Background(), "127.0.0.1", []LocalPort{{p, "vllm", "VLLM_API_KEY"}}, 500*time.Millisecond,
		func(string) (string, bool) { return "", false })
	if len(refused) != 1 || !strings.Contains(refused[0].Reason, "or export VLLM_API_KEY") {
		t.Fatalf("refused %+v", refused)
	}
}

func TestMerge_AddsWhatIsNewDropsWhatAnAnsweringEngineNoLongerListsKeepsASilentOne(t *testing.T) {
	a := Found{Backend: "vllm-8000", URL: "http://127.0.0.1:8000/v1", Models: []string{"m1"}}
	b := Found{Backend: "llamacpp-8080", URL: "http://127.0.0.1:8080/v1", Models: []string{"/x.gguf"}}
	merged, added, removed := Merge([]Found{a}, []Found{a})
	if len(added)+len(removed) != 0 || len(merged) != 1 {
		t.Fatalf("nothing new: merged %+v added %+v removed %+v", merged, added, removed)
	}
	a2 := a
	a2.Models = []string{"m1", "m2"}
	merged, added, removed = Merge([]Found{a}, []Found{a2, b})
	if len(merged) != 2 || len(added) != 2 || len(removed) != 0 {
		t.Fatalf("merged %+v added %+v removed %+v", merged, added, removed)
	}
	for _, f := range added {
		if f.Backend == "vllm-8000" && strings.Join(f.Models, ",") != "m2" {
			t.Errorf("added for a known backend: only its new models, got %v", f.Models)
		}
	}
	if len(a.Models) != 1 || a.Models[0] != "m1" {
		t.Errorf("Merge changed its input: %+v", a)
	}
	// b silent in a later probe (restarting): it keeps its model. The
	// llama-server on 8000 now serves another model: the old name goes.
	a3 := a
	a3.Models = []string{"m3"}
	merged, added, removed = Merge(merged, []Found{a3})
	if len(merged) != 2 || len(added) != 1 || len(removed) != 1 || strings.Join(removed[0].Models, ",") != "m1,m2" {
		t.Fatalf("merged %+v added %+v removed %+v", merged, added, removed)
	}
	for _, f := range merged {
		if f.Backend == "llamacpp-8080" && len(f.Models) != 1 || f.Backend == "vllm-8000" && strings.Join(f.Models, ",") != "m3" {
			t.Errorf("merged %+v", f)
		}
	}
}
