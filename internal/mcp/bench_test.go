package mcpserver

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkClientChat_Stream measures one streamed chat against the local
// fake (no token gap): the client's own cost of sending, reading SSE and
// measuring, without MCP.
func BenchmarkClientChat_Stream(b *testing.B) {
	g := newFakeGateway(b)
	g.tokenGap = 0
	c := NewClient(Config{BaseURL: g.URL + "/v1", APIKey: g.key, Timeout: 10 * time.Second}, nil, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Chat(ctx, ChatParams{Model: "model-a", Prompt: "a short prompt of six words"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChatTool_InMemory measures a whole chat tool call through the
// MCP SDK (JSON-RPC, schema validation, structured output) over an
// in-memory transport; the difference from BenchmarkClientChat_Stream is
// the MCP layer's overhead per call.
func BenchmarkChatTool_InMemory(b *testing.B) {
	g := newFakeGateway(b)
	g.tokenGap = 0
	srv, err := New(Config{BaseURL: g.URL, APIKey: g.key, Model: "model-a"}, "bench", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cs.Close(); _ = ss.Wait() }()
	params := &mcp.CallToolParams{Name: "chat", Arguments: map[string]any{"prompt": "a short prompt of six words"}}
	b.ReportAllocs()
	for b.Loop() {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("%v %v", err, res)
		}
	}
}
