package anthropic

import (
	"encoding/json"
	"testing"

	"llmgate/internal/apierror"
)

func TestContent_DecodesStringBlocksAndNull(t *testing.T) {
	var m struct {
		A, B, C Content
	}
	if err := json.Unmarshal([]byte(`{"A":"hi","B":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}],"C":null}`), &m); err != nil {
		t.Fatal(err)
	}
	if m.A.Text == nil || *m.A.Text != "hi" || len(m.B.Blocks) != 2 || m.B.Blocks[1].Content.Blocks[0].Text != "r" || !m.C.IsZero() {
		t.Errorf("decoded %+v", m)
	}
	var bad Content
	if err := json.Unmarshal([]byte(`42`), &bad); err == nil {
		t.Error("a number decoded as content")
	}
}

func TestMessagesRequest_RoundTripsClaudeCodeShapedBody(t *testing.T) {
	in := `{"model":"m","max_tokens":32000,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"q","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"sig"},{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/a"}}]}],"tools":[{"name":"Read","description":"d","input_schema":{"type":"object"}}],"metadata":{"user_id":"u"},"stream":true}`
	var req MessagesRequest
	if err := json.Unmarshal([]byte(in), &req); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal([]byte(in), &a)
	_ = json.Unmarshal(out, &b)
	if ja, jb := mustString(a), mustString(b); ja != jb {
		t.Errorf("round trip changed the body\n in: %s\nout: %s", ja, jb)
	}
}

func mustString(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestKindForType_InvertsErrorType(t *testing.T) {
	for _, k := range []apierror.Kind{apierror.KindInvalidRequest, apierror.KindAuthentication, apierror.KindPermission,
		apierror.KindNotFound, apierror.KindRateLimit, apierror.KindTimeout, apierror.KindOverloaded} {
		if got := KindForType(ErrorType(k, 400)); got != k {
			t.Errorf("KindForType(ErrorType(%s)) = %s", k, got)
		}
	}
	if ErrorType(apierror.KindInternal, 500) != "api_error" || KindForType("api_error") != apierror.KindUpstream {
		t.Error("server errors do not map to api_error / upstream")
	}
}

// TestMessagesRequest_RoundTripKeepsEveryMemberAnthropicAccepts re-encodes a
// body with beta fields at every level, a system message inside messages
// and blocks of types this package does not model: nothing may be lost, as
// the gateway re-encodes such bodies for anthropic backends.
func TestMessagesRequest_RoundTripKeepsEveryMemberAnthropicAccepts(t *testing.T) {
	in := `{"model":"m","max_tokens":100,"cache_control":{"type":"ephemeral"},"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},
	 "container":"cntr_1","mcp_servers":[{"type":"url","name":"s","url":"https://x"}],"speed":"fast",
	 "thinking":{"type":"adaptive","display":"summarized"},"output_config":{"effort":"high","task_budget":{"total":5}},
	 "tools":[{"name":"Read","input_schema":{"type":"object"},"defer_loading":true,"strict":true},{"type":"web_search_20250305","name":"web_search","max_uses":3}],
	 "messages":[{"role":"user","content":[{"type":"text","text":"q","cache_control":{"type":"ephemeral","ttl":"1h"}},
	   {"type":"document","source":{"type":"content","content":[{"type":"text","text":"d"}]},"context":"ctx","citations":{"enabled":true}},
	   {"type":"search_result","source":"https://s","title":"t","content":[{"type":"text","text":"r"}]}]},
	  {"role":"system","content":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}],"clear_at":"next_user_message","output_config":{"effort":"low"}},
	  {"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}},
	   {"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"web_search_tool_result_error","error_code":"unavailable"}},
	   {"type":"tool_use","id":"toolu_1","name":"Read","input":{},"caller":{"type":"direct"}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}],"cache_control":{"type":"ephemeral"}}]}]}`
	var req MessagesRequest
	if err := json.Unmarshal([]byte(in), &req); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal([]byte(in), &a)
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("re-encoded body is not JSON: %v\n%s", err, out)
	}
	if ja, jb := mustString(a), mustString(b); ja != jb {
		t.Errorf("round trip changed the body\n in: %s\nout: %s", ja, jb)
	}
	if m := req.Messages[1]; m.Role != RoleSystem || m.ClearAt != "next_user_message" || m.OutputConfig.Effort != "low" {
		t.Errorf("system message = %+v", m)
	}
	if req.OutputConfig.Effort != "high" || req.Thinking.Type != "adaptive" || req.Tools[0].Strict == nil {
		t.Errorf("typed fields: output_config %+v thinking %+v", req.OutputConfig, req.Thinking)
	}
	if blk := req.Messages[0].Content.Blocks[2]; blk.Type != "search_result" || blk.Raw == nil {
		t.Errorf("search_result block = %+v", blk)
	}
	if blk := req.Messages[2].Content.Blocks[0]; blk.Name != "web_search" || blk.Raw == nil {
		t.Errorf("server_tool_use block keeps its shared fields and raw bytes: %+v", blk)
	}
}

func TestContent_RejectsMalformedModelledBlocks(t *testing.T) {
	for _, body := range []string{
		`[{"type":"text","text":5}]`,
		`[{"type":"image","source":"https://x"}]`,
		`[7]`,
		`[{"text":"no type","source":"x"}]`,
	} {
		var c Content
		if err := json.Unmarshal([]byte(body), &c); err == nil {
			t.Errorf("%s decoded as %+v", body, c)
		}
	}
}

// TestMessagesRequest_MemberNamesMatchAsEncodingJSONDoes checks that a member
// encoding/json decodes into a typed field (it matches names without regard
// to case) is not also kept as an unknown member, which would write it twice.
func TestMessagesRequest_MemberNamesMatchAsEncodingJSONDoes(t *testing.T) {
	var req MessagesRequest
	if err := json.Unmarshal([]byte(`{"Model":"m","MAX_TOKENS":5,"messages":[{"role":"user","content":[{"type":"text","TEXT":"q","x":1}]}],"other":2}`), &req); err != nil {
		t.Fatal(err)
	}
	if req.Model != "m" || req.MaxTokens != 5 || len(req.Extra) != 1 || req.Extra["other"] == nil {
		t.Fatalf("model %q max_tokens %d extra %v", req.Model, req.MaxTokens, req.Extra)
	}
	if b := req.Messages[0].Content.Blocks[0]; b.Text != "q" || len(b.Extra) != 1 {
		t.Errorf("block text %q extra %v", b.Text, b.Extra)
	}
	out, _ := json.Marshal(&req)
	if want := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"q","x":1}]}],"other":2}`; string(out) != want {
		t.Errorf("re-encoded\n got %s\nwant %s", out, want)
	}
}
