package anthropic

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A content array whose whole-array decode fails (a search_result's string
// source) used to be decoded again block by block, and each nested level
// did the same: 2^depth decodes. Decoding is now one pass per block.
func TestContent_NestedFallbackIsLinear(t *testing.T) {
	inner := `"x"`
	for range 24 {
		inner = `[{"type":"search_result","source":"s","title":"t","content":[{"type":"text","text":"a"}]},` +
			`{"type":"tool_result","tool_use_id":"t","content":` + inner + `}]`
	}
	body := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":` + inner + `}]}`
	start := time.Now()
	var req MessagesRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a %d-byte body took %v to decode", len(body), d)
	}
	blk := req.Messages[0].Content.Blocks
	if len(blk) != 2 || blk[0].Type != "search_result" || blk[1].Content == nil || !strings.Contains(string(blk[0].Raw), `"source":"s"`) {
		t.Fatalf("decoded blocks: %+v", blk)
	}
}
