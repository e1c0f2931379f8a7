package openai

import (
	"encoding/json"
	"testing"
)

func TestChatCompletionRequest_KeepsUnknownMembers(t *testing.T) {
	in := `{"model":"m","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false},"top_k":20,"min_p":0.1,"repetition_penalty":1.05}`
	var r ChatCompletionRequest
	if err := json.Unmarshal([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	if r.TopK == nil || *r.TopK != 20 || len(r.Extra) != 3 || string(r.Extra["chat_template_kwargs"]) != `{"enable_thinking":false}` {
		t.Fatalf("decoded top_k %v extra %v", r.TopK, r.Extra)
	}
	out, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","messages":[{"role":"user","content":"hi"}],"top_k":20,"chat_template_kwargs":{"enable_thinking":false},"min_p":0.1,"repetition_penalty":1.05}`
	if string(out) != want {
		t.Errorf("re-encoded\n got %s\nwant %s", out, want)
	}
}

func TestAppendFields_TypedFieldsWinAndEmptyObjectsStayValid(t *testing.T) {
	known := map[string]bool{"model": true}
	got := AppendFields([]byte(`{"model":"a"}`), Extra{"model": json.RawMessage(`"b"`), "x": json.RawMessage(`1`)}, known)
	if string(got) != `{"model":"a","x":1}` {
		t.Errorf("got %s", got)
	}
	if got := AppendFields([]byte(`{}`), Extra{"x": json.RawMessage(`[]`)}, known); string(got) != `{"x":[]}` {
		t.Errorf("empty object: got %s", got)
	}
}
