package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResponsesInput_DecodesStringAndItems(t *testing.T) {
	var r ResponsesRequest
	if err := json.Unmarshal([]byte(`{"model":"m","input":"hi"}`), &r); err != nil || r.Input.Text == nil || *r.Input.Text != "hi" {
		t.Fatalf("string input: %+v %v", r.Input, err)
	}
	body := `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"o"}]}]}`
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Input.Items) != 2 || r.Input.Items[1].Output.Parts[0].Text != "o" {
		t.Fatalf("item input: %+v %v", r.Input, err)
	}
	if err := json.Unmarshal([]byte(`{"input":7}`), &r); err == nil {
		t.Error("a number decoded as input")
	}
}

func TestOutputItem_MarshalsRequiredEmptyArrays(t *testing.T) {
	for _, tc := range []struct {
		it   OutputItem
		want string
	}{
		{OutputItem{Type: "message", ID: "m", Status: "in_progress", Role: "assistant"}, `"content":[]`},
		{OutputItem{Type: "function_call", ID: "f", CallID: "c", Name: "n"}, `"arguments":""`},
		{OutputItem{Type: "reasoning", ID: "r"}, `"summary":[]`},
	} {
		b, _ := json.Marshal(tc.it)
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("%s lacks %s", b, tc.want)
		}
	}
	b, _ := json.Marshal(OutputContent{Type: "output_text", Text: "x"})
	if string(b) != `{"type":"output_text","text":"x","annotations":[],"logprobs":[]}` {
		t.Errorf("output_text = %s", b)
	}
}
