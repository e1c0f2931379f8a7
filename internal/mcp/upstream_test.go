package mcpserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"llmgate/internal/apierror"
)

func newTestClient(t *testing.T, g *fakeGateway, key string, timeout time.Duration) *Client {
	t.Helper()
	base, err := NormalizeBaseURL(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(Config{BaseURL: base, APIKey: key, Timeout: timeout}, nil, nil)
}

func errCode(t *testing.T, err error) *apierror.Error {
	t.Helper()
	var ae *apierror.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *apierror.Error", err, err)
	}
	return ae
}

func TestClientChat_StreamsWithUsageAndMeasuresTTFT(t *testing.T) {
	g := newFakeGateway(t)
	c := newTestClient(t, g, g.key, 10*time.Second)
	temp := 0.2
	res, err := c.Chat(context.Background(), ChatParams{Model: "model-a", System: "be brief", Prompt: "hello there world", MaxTokens: 50, Temperature: &temp})
	if err != nil {
		t.Fatal(err)
	}
	want := answerFor("model-a", "hello there world")
	if res.Answer != want {
		t.Errorf("answer = %q, want %q", res.Answer, want)
	}
	if res.PromptTokens != 5 || res.CompletionTokens != len(strings.Fields(want)) || res.TokensEstimated {
		t.Errorf("tokens = %d prompt, %d completion, estimated %v; want the gateway's usage 5, %d",
			res.PromptTokens, res.CompletionTokens, res.TokensEstimated, len(strings.Fields(want)))
	}
	if !res.Streamed || res.TTFT <= 0 || res.TTFT > res.Latency {
		t.Errorf("streamed %v, TTFT %v, latency %v: TTFT must be measured and within the latency", res.Streamed, res.TTFT, res.Latency)
	}
	if res.FinishReason != "stop" || res.TokensPerSecond() <= 0 {
		t.Errorf("finish %q, tokens/s %v", res.FinishReason, res.TokensPerSecond())
	}
	reqs := g.chatRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if !r.Stream || r.StreamOptions == nil || !r.StreamOptions.IncludeUsage {
		t.Errorf("request did not stream with include_usage: %+v", r)
	}
	if r.MaxTokens == nil || *r.MaxTokens != 50 || r.Temperature == nil || *r.Temperature != 0.2 {
		t.Errorf("max_tokens/temperature not forwarded: %v %v", r.MaxTokens, r.Temperature)
	}
	roles := []string{r.Messages[0].Role, r.Messages[1].Role}
	if !reflect.DeepEqual(roles, []string{"system", "user"}) || r.Messages[0].Content.String() != "be brief" {
		t.Errorf("messages = %+v", r.Messages)
	}
}

func TestClientChat_OmitsUnsetOptionsSoTheEndpointDefaultsApply(t *testing.T) {
	g := newFakeGateway(t)
	c := newTestClient(t, g, g.key, 10*time.Second)
	if _, err := c.Chat(context.Background(), ChatParams{Model: "model-a", Prompt: "hi"}); err != nil {
		t.Fatal(err)
	}
	r := g.chatRequests()[0]
	if r.MaxTokens != nil || r.Temperature != nil || len(r.Messages) != 1 {
		t.Errorf("unset options were sent: max_tokens %v temperature %v messages %d", r.MaxTokens, r.Temperature, len(r.Messages))
	}
}

func TestClientChat_RetriesWithoutStreamOptionsWhenRejectedAndRemembers(t *testing.T) {
	g := newFakeGateway(t)
	g.rejectStreamOptions = true
	c := newTestClient(t, g, g.key, 10*time.Second)
	res, err := c.Chat(context.Background(), ChatParams{Model: "model-b", Prompt: "one two"})
	if err != nil {
		t.Fatal(err)
	}
	want := answerFor("model-b", "one two")
	if res.Answer != want || !res.Streamed || res.TTFT <= 0 {
		t.Errorf("answer %q streamed %v ttft %v", res.Answer, res.Streamed, res.TTFT)
	}
	// Without usage the count is one token per content chunk, marked estimated.
	if !res.TokensEstimated || res.CompletionTokens != len(strings.Fields(want)) {
		t.Errorf("completion tokens %d estimated %v, want %d estimated", res.CompletionTokens, res.TokensEstimated, len(strings.Fields(want)))
	}
	if _, err := c.Chat(context.Background(), ChatParams{Model: "model-b", Prompt: "again"}); err != nil {
		t.Fatal(err)
	}
	reqs := g.chatRequests()
	if len(reqs) != 3 || reqs[2].StreamOptions != nil || !reqs[2].Stream {
		t.Errorf("want 2 requests for the first call and 1 streaming one without stream_options for the second; got %d", len(reqs))
	}
}

func TestClientChat_FallsBackToNonStreamingWhenStreamingIsRejected(t *testing.T) {
	g := newFakeGateway(t)
	g.rejectStream = true
	c := newTestClient(t, g, g.key, 10*time.Second)
	for range 2 {
		res, err := c.Chat(context.Background(), ChatParams{Model: "model-a", Prompt: "p q"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Answer != answerFor("model-a", "p q") || res.Streamed || res.TokensEstimated {
			t.Errorf("result %+v", res)
		}
	}
	reqs := g.chatRequests()
	// The streaming request is refused and retried whole; the second call goes straight to whole.
	if len(reqs) != 3 || !reqs[0].Stream || reqs[1].Stream || reqs[2].Stream {
		t.Errorf("%d requests; the last streamed = %v", len(reqs), len(reqs) > 0 && reqs[len(reqs)-1].Stream)
	}
}

func TestClientChat_CollectsReasoningFromBothFieldNames(t *testing.T) {
	g := newFakeGateway(t)
	c := newTestClient(t, g, g.key, 10*time.Second)
	res, err := c.Chat(context.Background(), ChatParams{Model: "stream-reasoner", Prompt: "why"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reasoning != "thinking hard" || res.Answer != answerFor("stream-reasoner", "why") {
		t.Errorf("reasoning %q answer %q", res.Reasoning, res.Answer)
	}
}

func TestClientChat_AcceptsAWholeJSONAnswerWhenTheEndpointDoesNotStream(t *testing.T) {
	g := newFakeGateway(t)
	g.ignoreStream = true
	c := newTestClient(t, g, g.key, 10*time.Second)
	res, err := c.Chat(context.Background(), ChatParams{Model: "model-c", Prompt: "x y"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != answerFor("model-c", "x y") || res.Streamed || res.TTFT != 0 || res.TokensEstimated || res.CompletionTokens != 4 {
		t.Errorf("result %+v", res)
	}
	if res.TokensPerSecond() <= 0 {
		t.Errorf("tokens/s %v: a non-streamed answer still has a speed over its latency", res.TokensPerSecond())
	}
}

func TestClientChat_ExplainsEndpointFailures(t *testing.T) {
	g := newFakeGateway(t)
	tests := []struct {
		model, key string
		timeout    time.Duration
		code       string
		want       []string
	}{
		{"model-a", "sk-wrong", 10 * time.Second, "invalid_api_key", []string{"API key was rejected (401: invalid API key", "LLMGATE_API_KEY"}},
		{"gpt-9", g.key, 10 * time.Second, "model_not_found", []string{`model "gpt-9" is not served`, `the model "gpt-9" does not exist`, "list_models"}},
		{"error-200", g.key, 10 * time.Second, "upstream_error", []string{"answered 200 but reported an error", "engine crashed while loading weights"}},
		{"stream-error", g.key, 10 * time.Second, "upstream_unavailable", []string{"ran out of KV cache"}},
		{"stream-cut", g.key, 10 * time.Second, "stream_cut", []string{"stopped before it was complete"}},
		{"slow", g.key, 300 * time.Millisecond, "timeout", []string{`no complete answer from model "slow"`, "within 300ms", "--timeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.model+"/"+tc.code, func(t *testing.T) {
			c := newTestClient(t, g, tc.key, tc.timeout)
			_, err := c.Chat(context.Background(), ChatParams{Model: tc.model, Prompt: "a b c d e"})
			if err == nil {
				t.Fatal("no error")
			}
			ae := errCode(t, err)
			if ae.Code != tc.code {
				t.Errorf("code = %s, want %s: %s", ae.Code, tc.code, ae.Message)
			}
			mustContain(t, ae.Message, tc.want...)
		})
	}
}

func TestClientListModels_ReturnsTheEndpointsModels(t *testing.T) {
	g := newFakeGateway(t)
	ms, err := newTestClient(t, g, g.key, 10*time.Second).ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
		if m.MaxModelLen != 8192 || m.OwnedBy != "llmgate" {
			t.Errorf("model %+v lost fields", m)
		}
	}
	if !reflect.DeepEqual(ids, g.models) {
		t.Errorf("ids = %v, want %v", ids, g.models)
	}
}

func TestClientListModels_ExplainsABaseURLThatIsNotTheAPI(t *testing.T) {
	g := newFakeGateway(t)
	c := NewClient(Config{BaseURL: g.URL + "/api", APIKey: g.key}, nil, nil)
	_, err := c.ListModels(context.Background())
	mustContain(t, errCode(t, err).Message, g.URL+"/api has no OpenAI-compatible API", "LLMGATE_BASE_URL")

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<!doctype html><title>Open WebUI</title>"))
	}))
	defer web.Close()
	c = NewClient(Config{BaseURL: web.URL + "/v1"}, nil, nil)
	_, err = c.ListModels(context.Background())
	mustContain(t, errCode(t, err).Message, "answered 200 but not with OpenAI JSON", "text/html", "Open WebUI", "LLMGATE_BASE_URL")
}

func TestClientListModels_ExplainsAClosedPort(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL + "/v1"
	srv.Close() // the port is now closed: connection refused
	_, err := NewClient(Config{BaseURL: base}, nil, nil).ListModels(context.Background())
	ae := errCode(t, err)
	if ae.Code != "connection_refused" {
		t.Errorf("code %s: %s", ae.Code, ae.Message)
	}
	mustContain(t, ae.Message, "could not connect to "+base, "LLMGATE_BASE_URL")
}
