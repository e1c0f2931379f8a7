package relay_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/relay"
	"llmgate/internal/router"
)

// fleetHarness is a relay in front of three OpenAI backends that answer
// every chat request and say which of them did.
type fleetHarness struct {
	srv *httptest.Server
}

func newFleetHarness(t *testing.T) *fleetHarness {
	h := &fleetHarness{}
	var src strings.Builder
	src.WriteString("backends:\n")
	for i := range 3 {
		name := fmt.Sprintf("r%d", i)
		be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"x","choices":[{"index":0,"message":{"role":"assistant","content":"served-by-%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`, name)
		}))
		t.Cleanup(be.Close)
		fmt.Fprintf(&src, "  %s: {url: %s/v1}\n", name, be.URL)
	}
	src.WriteString("models:\n")
	for _, bal := range []string{config.BalanceCacheAware, config.BalanceSession} {
		fmt.Fprintf(&src, "  %s: {balancing: %s, deployments: [{backend: r0}, {backend: r1}, {backend: r2}]}\n", bal, bal)
	}
	cfg, err := config.Load(strings.NewReader(src.String()), "hint_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	table := router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(table.Close)
	rl := relay.New(relay.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h.srv = httptest.NewServer(serveRelay(rl, table, "req-1"))
	t.Cleanup(h.srv.Close)
	return h
}

// send posts body and returns the backend that served it.
func (h *fleetHarness) send(t *testing.T, path, body string, header map[string]string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	_, after, ok := strings.Cut(string(b), "served-by-")
	if !ok || len(after) < 2 {
		t.Fatalf("answer without its backend's name: %s", b)
	}
	return after[:2]
}

// conversation is an agent's request at a turn: its own system prompt
// (long enough for many prefix blocks) and its history so far.
func conversation(model string, s, turns int, anthropic bool) string {
	sys := strings.Repeat(fmt.Sprintf("You are agent %d; follow the repository's rules. ", s), 40)
	var msgs []string
	if !anthropic {
		msgs = append(msgs, fmt.Sprintf(`{"role":"system","content":%q}`, sys))
	}
	for i := range turns {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"step %d: run the tests"}`, i), `{"role":"assistant","content":"done"}`)
	}
	msgs = append(msgs, `{"role":"user","content":"next"}`)
	if anthropic {
		return fmt.Sprintf(`{"model":%q,"max_tokens":5,"system":%q,"messages":[%s]}`, model, sys, strings.Join(msgs, ","))
	}
	return fmt.Sprintf(`{"model":%q,"max_tokens":5,"messages":[%s]}`, model, strings.Join(msgs, ","))
}

func TestRelay_CacheAwareSendsEachConversationBackToItsPrefix(t *testing.T) {
	h := newFleetHarness(t)
	for _, c := range []struct {
		path      string
		anthropic bool
	}{{"/v1/chat/completions", false}, {"/v1/messages", true}} {
		home := map[int]string{}
		for turn := range 4 {
			for s := range 6 {
				got := h.send(t, c.path, conversation(config.BalanceCacheAware, s, turn, c.anthropic), nil)
				if turn == 0 {
					home[s] = got
				} else if got != home[s] {
					t.Fatalf("%s: conversation %d turn %d went to %s, its prefix is on %s", c.path, s, turn, got, home[s])
				}
			}
		}
	}
}

func TestRelay_SessionPinsByHeaderUserOrMetadata(t *testing.T) {
	h := newFleetHarness(t)
	for _, c := range []struct {
		name, path, body string
		header           map[string]string
	}{
		{"header", "/v1/chat/completions", `{"model":"session","messages":[{"role":"user","content":"hi %d"}]}`, map[string]string{"X-Session-Id": "conv-%d"}},
		{"user field", "/v1/chat/completions", `{"model":"session","user":"conv-%d","messages":[{"role":"user","content":"hi"}]}`, nil},
		{"metadata.user_id", "/v1/messages", `{"model":"session","max_tokens":5,"metadata":{"user_id":"conv-%d"},"messages":[{"role":"user","content":"hi"}]}`, nil},
	} {
		spread := map[string]bool{}
		for s := range 8 {
			var first string
			for turn := range 3 {
				body := strings.ReplaceAll(c.body, "%d", fmt.Sprint(s))
				if c.header != nil {
					body = strings.ReplaceAll(c.body, "%d", fmt.Sprint(turn))
				}
				hdr := map[string]string{}
				for k, v := range c.header {
					hdr[k] = fmt.Sprintf(v, s)
				}
				got := h.send(t, c.path, body, hdr)
				if turn == 0 {
					first = got
					spread[got] = true
				} else if got != first {
					t.Fatalf("%s: session %d moved from %s to %s", c.name, s, first, got)
				}
			}
		}
		if len(spread) < 2 {
			t.Fatalf("%s: 8 sessions all on %v", c.name, spread)
		}
	}
}
