package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"llmgate/internal/sse"
)

// startServer runs a simulator behind an httptest server for one test.
func startServer(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		s.Close()
	})
	return s, hs.URL
}

// post sends a JSON body and returns status, headers and body.
func post(t *testing.T, url, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// streamEvent is one SSE data event with its arrival time.
type streamEvent struct {
	at   time.Time
	data []byte
}

// streamResult is a whole stream as a client saw it.
type streamResult struct {
	start  time.Time
	events []streamEvent
	done   bool  // saw data: [DONE]
	err    error // read error (e.g. the stream was cut)
}

// stream posts body and reads the SSE stream, timestamping each event at
// the byte read, before JSON parsing.
func stream(t *testing.T, url, body string) streamResult {
	t.Helper()
	res := streamResult{start: time.Now()}
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	r := sse.NewReader(resp.Body, 0)
	for {
		ev, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				res.err = err
			}
			return res
		}
		if ev.Done() {
			res.done = true
			continue
		}
		res.events = append(res.events, streamEvent{at: time.Now(), data: bytes.Clone(ev.Data)})
	}
}

// chunkInfo is what tests read from a chat or completion chunk.
type chunkInfo struct {
	Choices []struct {
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func parseChunk(t *testing.T, b []byte) chunkInfo {
	t.Helper()
	var c chunkInfo
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("bad chunk %s: %v", b, err)
	}
	return c
}

// tokenTimes returns the arrival times of content-bearing chunks (the role
// chunk and the usage chunk excluded).
func (r streamResult) tokenTimes(t *testing.T) []time.Time {
	var out []time.Time
	for _, ev := range r.events {
		c := parseChunk(t, ev.data)
		if len(c.Choices) == 1 && c.Choices[0].Delta.Role == "" {
			out = append(out, ev.at)
		}
	}
	return out
}
