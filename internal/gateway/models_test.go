package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	osdk "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"llmgate/internal/config"
	"llmgate/internal/keys"
)

// GET /v1/models/{model} (the SDKs' models.retrieve), names with "/"
// included, and a restricted key does not learn of models it may not use.
func TestModels_RetrieveOneModel(t *testing.T) {
	e := startEnv(t, func(c *config.Config) {
		c.Models["Qwen/Qwen2.5-7B-Instruct"] = &config.Model{Name: "Qwen/Qwen2.5-7B-Instruct", Backend: "vllm"}
	})
	client := osdk.NewClient(ooption.WithBaseURL(e.base+"/"), ooption.WithAPIKey(testMaster), ooption.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := client.Models.Get(ctx, "qwen")
	if err != nil || m.ID != "qwen" || m.OwnedBy != "vllm" || m.Object != "model" {
		t.Fatalf("retrieve qwen: %+v %v", m, err)
	}
	if r := e.do("GET", "/v1/models/Qwen/Qwen2.5-7B-Instruct", testMaster, ""); r.status != 200 || !strings.Contains(r.body, `"id":"Qwen/Qwen2.5-7B-Instruct"`) {
		t.Fatalf("retrieve a name with a slash: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/models/qwne", testMaster, ""); r.status != 404 || !strings.Contains(r.body, `"error"`) || !strings.Contains(r.body, `did you mean \"qwen\"`) {
		t.Fatalf("unknown model: %d %s, want 404 naming the nearest model", r.status, r.body)
	}
	_, secret, err := CreateKey(context.Background(), e.g.Store, keys.Key{Name: "narrow", Models: []string{"qwen"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.g.Verifier.Reload(context.Background())
	if r := e.do("GET", "/v1/models/embed", secret, ""); r.status != 404 {
		t.Fatalf("a model outside the key's list: %d %s, want 404", r.status, r.body)
	}
	if r := e.do("GET", "/v1/models/qwen", secret, ""); r.status != 200 {
		t.Fatalf("an allowed model: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/models/qwen", secret, "{}"); r.status != 405 {
		t.Fatalf("POST: %d, want 405", r.status)
	}
}
