package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// "llmgate mcp" sent one 20 MB JSON-RPC line: the client gets a JSON-RPC
// error for that request (its id read from the line's first bytes), and
// the server keeps running - the next request gets its answer. (The SDK's
// stdio transport ended the session, and with it the process.)
func TestStdio_OversizedLineIsAnsweredWithAnErrorAndTheServerKeepsRunning(t *testing.T) {
	srv, err := New(Config{BaseURL: "http://127.0.0.1:9"}, "test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, StdioTransport(inR, outW, 0, nil)) }()
	answers := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				answers <- m
			}
		}
		close(answers)
	}()
	send := func(b []byte) {
		t.Helper()
		go func() { _, _ = inW.Write(b) }()
	}
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case m, ok := <-answers:
			if !ok {
				t.Fatalf("%s: the server stopped answering (session ended: %v)", what, <-done)
			}
			return m
		case err := <-done:
			t.Fatalf("%s: the server ended: %v", what, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer", what)
		}
		return nil
	}
	send([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}` + "\n"))
	if m := next("initialize"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"))

	big := oversized("7", 20<<20)
	next20 := append(big, []byte(`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`+"\n")...)
	send(next20)
	m := next("the 20 MB line")
	e, _ := m["error"].(map[string]any)
	if m["id"] != float64(7) || e == nil || e["code"] != float64(CodeMessageTooLarge) || !strings.Contains(e["message"].(string), "longer than") {
		t.Fatalf("answer to the 20 MB line: %v, want a JSON-RPC error for id 7", m)
	}
	m = next("tools/list after it")
	res, _ := m["result"].(map[string]any)
	if m["id"] != float64(8) || res == nil || !strings.Contains(func() string { b, _ := json.Marshal(res); return string(b) }(), "list_models") {
		t.Fatalf("tools/list after the 20 MB line: %v, want the tool list", m)
	}
	inW.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not end at the end of its input")
	}
}

// The guard never holds more than its limit of an oversized line, whatever
// its length, and passes the lines around it whole; an id it cannot find
// in the first bytes is null.
func TestLineGuard_HoldsAtMostItsLimitAndPassesTheOtherLines(t *testing.T) {
	const limit = 64 << 10
	var in bytes.Buffer
	in.WriteString(`{"id":"a","method":"ping"}` + "\n")
	in.Write(oversized(`"big"`, 5<<20))
	in.WriteString(`{"method":"x","params":{"p":"` + strings.Repeat("y", 2*limit) + `"},"id":3}` + "\n") // id after the cut: null
	in.WriteString(`{"id":4,"method":"ping"}`)                                                           // last line, no newline
	var out bytes.Buffer
	g := &lineGuard{in: &in, br: bufio.NewReaderSize(&in, 4096), max: limit, out: &out, log: slog.New(slog.DiscardHandler)}
	var passed bytes.Buffer
	buf := make([]byte, 1000)
	held := 0
	for {
		n, err := g.Read(buf)
		passed.Write(buf[:n])
		held = max(held, cap(g.line))
		if err != nil {
			break
		}
	}
	if want := `{"id":"a","method":"ping"}` + "\n" + `{"id":4,"method":"ping"}`; passed.String() != want {
		t.Fatalf("passed %q, want %q", passed.String(), want)
	}
	if held > limit {
		t.Fatalf("the guard held %d bytes, more than its limit %d", held, limit)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"id":"big"`) || !strings.Contains(lines[1], `"id":null`) ||
		!strings.Contains(lines[0], `"code":-32600`) {
		t.Fatalf("answers:\n%s\nwant errors for id \"big\" and null", out.String())
	}
}
