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
