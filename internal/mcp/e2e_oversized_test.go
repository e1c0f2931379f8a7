package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"llmgate/internal/testenv"
)

// oversized returns a tools/call line of n bytes (with its newline) whose
// id comes first, as clients write it.
func oversized(id string, n int) []byte {
	head := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"chat","arguments":{"prompt":"`
	tail := `"}}}` + "\n"
	b := make([]byte, 0, n)
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte("x"), n-len(head)-len(tail))...)
	return append(b, tail...)
}

// The real "llmgate mcp" process, sent one 20 MB JSON-RPC line between two
// requests: it answers that line with a JSON-RPC error and the next request
// with its result, and exits cleanly at the end of its input. (It used to
// exit on the long line, leaving the client without a server.)
func TestE2E_OversizedLineGetsAnErrorAndTheProcessKeepsServing(t *testing.T) {
	cmd := exec.Command(llmgateBinary(t), "mcp")
	cmd.Env = append(os.Environ(), "LLMGATE_BASE_URL=http://127.0.0.1:9", "LLMGATE_API_KEY=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testenv.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	answers := make(chan map[string]any, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				answers <- m
			}
		}
		close(answers)
	}()
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case m, ok := <-answers:
			if !ok {
				t.Fatalf("%s: llmgate mcp closed its output (exited); stderr:\n%s", what, stderr)
			}
			return m
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer; stderr:\n%s", what, stderr)
		}
		return nil
	}
	go func() {
		_, _ = stdin.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"))
		_, _ = stdin.Write(oversized("7", 20<<20))
		_, _ = stdin.Write([]byte(`{"jsonrpc":"2.0","id":8,"method":"tools/list"}` + "\n"))
	}()
	if m := next("initialize"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	m := next("the 20 MB line")
	e, _ := m["error"].(map[string]any)
	if m["id"] != float64(7) || e == nil || e["code"] != float64(-32600) {
		t.Fatalf("answer to the 20 MB line: %v, want a JSON-RPC error for id 7", m)
	}
	m = next("tools/list after it")
	b, _ := json.Marshal(m["result"])
	if m["id"] != float64(8) || !strings.Contains(string(b), "list_models") {
		t.Fatalf("tools/list after the 20 MB line: %v, want the tool list", m)
	}
	stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("llmgate mcp exited with %v at the end of its input; stderr:\n%s", err, stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("llmgate mcp did not exit at the end of its input")
	}
}
