package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"

	"llmgate/internal/relay"
)

// A request is bounded on its way through the gateway by what the client
// sent: the tool definitions tool_reference blocks bring in, and the body
// sent to a backend's /tokenize (issue 24: a 30 MB Messages body of one
// deferred tool of '<' characters and one tool_reference took 2.7 GB and
// sent 371 MB upstream; a 1 MB count_tokens body became a 13 MB /tokenize).

// tokenizingBackend is a vLLM-like backend that counts prompts at /tokenize
// and answers chat; it reads and discards bodies, keeping their sizes.
type tokenizingBackend struct {
	*httptest.Server
	mu       sync.Mutex
	tokenize []int // sizes of the /tokenize bodies received
	chat     []int // sizes of the chat bodies received
}

func newTokenizingBackend(t *testing.T) *tokenizingBackend {
	b := &tokenizingBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		b.mu.Lock()
		defer b.mu.Unlock()
		switch r.URL.Path {
		case "/tokenize":
			b.tokenize = append(b.tokenize, int(n))
			fmt.Fprint(w, `{"count":100,"max_model_len":4096,"tokens":[]}`)
		case "/v1/chat/completions":
			b.chat = append(b.chat, int(n))
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *tokenizingBackend) sizes() (tokenize, chat []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.tokenize...), append([]int(nil), b.chat...)
}

// toolReferenceBody is a Messages body whose one deferred tool has a
// description of size copies of c, loaded by one tool_reference.
func toolReferenceBody(size int, c string, stream bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":"m","max_tokens":16,"stream":%v,"tools":[{"name":"big","description":"`, stream)
	b.WriteString(strings.Repeat(c, size))
	b.WriteString(`","input_schema":{"type":"object"},"defer_loading":true}],"messages":[` +
		`{"role":"user","content":"find a tool"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"tool_search","input":{"q":"big"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"tool_reference","tool_name":"big"}]}]}]}`)
	return b.Bytes()
}

func post(t *testing.T, f *faultGW, path string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+f.g.Addr+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testMaster)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(out)
}

func expansionGW(t *testing.T) (*faultGW, *tokenizingBackend) {
	up := newTokenizingBackend(t)
	return startFaultGW(t, fmt.Sprintf("backends:\n  up: {url: %s/v1}\nmodels:\n  m: {backend: up, context_window: 1000000000}\n", up.URL)), up
}

// TestExpansion_ToolReferenceBeyondTheBodyIsRefused: a tool_reference that
// would bring in a definition larger than the request allows is a 400 in
// the client's envelope, for Messages and count_tokens, and nothing is
// built or sent upstream.
func TestExpansion_ToolReferenceBeyondTheBodyIsRefused(t *testing.T) {
	t.Parallel()
	f, up := expansionGW(t)
	body := toolReferenceBody(3<<20, "<", false)
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		status, _, out := post(t, f, path, body)
		if status != 400 || !strings.Contains(out, `"type":"invalid_request_error"`) || !strings.Contains(out, "tool_reference") ||
			!strings.Contains(out, "load fewer or smaller deferred tools") {
			t.Fatalf("%s with a 3 MB referenced tool: %d %.300s, want a 400 in Anthropic's envelope saying what to do", path, status, out)
		}
	}
	if tok, chat := up.sizes(); len(chat) != 0 || len(tok) != 0 {
		t.Fatalf("the backend got /tokenize bodies %v and chat bodies %v; want nothing", tok, chat)
	}
	// A tool search that loads a small definition is served as before.
	if status, _, out := post(t, f, "/v1/messages", toolReferenceBody(2000, "<", false)); status != 200 {
		t.Fatalf("a 2 KB referenced tool: %d %s", status, out)
	}
}

// TestExpansion_TokenizeBodyBoundedByWhatTheClientSent: a count_tokens body
// whose /tokenize form would be more than twice its size plus 1 MiB (the
// JSON encoding writes '<' as \u003c, and a tool_reference copies the tool)
// is counted by the estimate instead of being sent.
func TestExpansion_TokenizeBodyBoundedByWhatTheClientSent(t *testing.T) {
	t.Parallel()
	f, up := expansionGW(t)
	for _, body := range [][]byte{
		toolReferenceBody(1<<20, "<", false),
		[]byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("<", 1<<20) + `"}]}`),
	} {
		status, h, out := post(t, f, "/v1/messages/count_tokens", body)
		if status != 200 || h.Get(relay.TokenCountHeader) != "estimate" {
			t.Fatalf("count_tokens of %d bytes: %d %s %s, want an estimate", len(body), status, h.Get(relay.TokenCountHeader), out)
		}
		tok, _ := up.sizes()
		for _, n := range tok {
			if n > 2*len(body)+1<<20 {
				t.Fatalf("a %d-byte count_tokens body sent a %d-byte /tokenize body", len(body), n)
			}
		}
	}
	// A count of an ordinary request still asks the tokenizer.
	status, h, _ := post(t, f, "/v1/messages/count_tokens", []byte(`{"model":"m","messages":[{"role":"user","content":"hi <b>there</b>"}]}`))
	if status != 200 || h.Get(relay.TokenCountHeader) != "tokenizer" {
		t.Fatalf("count_tokens of a small request: %d %s, want the tokenizer's count", status, h.Get(relay.TokenCountHeader))
	}
}

// procStatusKB reads a line of /proc/self/status (VmRSS, VmHWM) in KiB.
func procStatusKB(t *testing.T, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status: memory is measured on Linux")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Skip("no " + field + " in /proc/self/status")
	return 0
}

// TestExpansion_ToolReferenceMemoryWithinFourTimesTheBody: serving the
// 30 MB tool_reference body of issue 24 grows the process's peak resident
// memory by at most four times the body (it grew by 2.7 GB, 93 times, and
// 3.5 GB streamed). The peak is the kernel's (VmHWM, reset through
// /proc/self/clear_refs), from a collected heap; not measured under the
// race detector, which multiplies memory.
func TestExpansion_ToolReferenceMemoryWithinFourTimesTheBody(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("memory is measured without the race detector and -short")
	}
	f, up := expansionGW(t)
	for _, stream := range []bool{false, true} {
		body := toolReferenceBody(30_000_000, "<", stream)
		runtime.GC()
		debug.FreeOSMemory()
		before := procStatusKB(t, "VmRSS")
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			t.Skipf("cannot reset the peak resident size: %v", err)
		}
		status, _, out := post(t, f, "/v1/messages", body)
		growth := (procStatusKB(t, "VmHWM") - before) << 10
		tok, chat := up.sizes()
		t.Logf("stream=%v: %d-byte body: %d, peak RSS growth %d MB (%.1f× the body); /tokenize bodies %v, chat bodies %v",
			stream, len(body), status, growth>>20, float64(growth)/float64(len(body)), tok, chat)
		if status != 400 || !strings.Contains(out, "tool_reference") {
			t.Fatalf("stream=%v: %d %.200s, want the 400 for a too large tool_reference", stream, status, out)
		}
		if growth > 4*int64(len(body)) {
			t.Fatalf("stream=%v: serving a %d MB body grew memory by %d MB, more than 4× the body", stream, len(body)>>20, growth>>20)
		}
	}
}
