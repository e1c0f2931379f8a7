package sim

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

type embeddingAnswer struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func embeddings(t *testing.T, url, input string) embeddingAnswer {
	t.Helper()
	code, _, b := post(t, url+"/v1/embeddings", `{"input":`+input+`}`)
	if code != 200 {
		t.Fatalf("%s: %d %s", input, code, b)
	}
	var a embeddingAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestEmbeddings_ListsGiveOneVectorPerInputAndSummedUsage(t *testing.T) {
	_, url := startServer(t, fastConfig())
	one := embeddings(t, url, `"hello world"`)
	ids := embeddings(t, url, `[1, 2, 3]`)
	for input, want := range map[string]int{
		`["hello world", "second input here"]`:       2,
		`[[1, 2, 3], [4, 5], [6]]`:                   3,
		`["hello world", [1,2,3], "x"]`:              3,
		`["a single string in a list"]`:              1,
		`["hello world", "hello world", "again ok"]`: 3,
	} {
		a := embeddings(t, url, input)
		if len(a.Data) != want {
			t.Fatalf("%s: %d embeddings, want %d", input, len(a.Data), want)
		}
		var raw []json.RawMessage
		_ = json.Unmarshal([]byte(input), &raw)
		total := 0
		for i, d := range a.Data {
			if d.Index != i || len(d.Embedding) != fastConfig().Models[0].EmbeddingDim {
				t.Errorf("%s: item %d has index %d, %d dims", input, i, d.Index, len(d.Embedding))
			}
			var text string
			if json.Unmarshal(raw[i], &text) == nil {
				total += countTextTokens(text)
				if text == "hello world" && !slices.Equal(d.Embedding, one.Data[0].Embedding) {
					t.Errorf("%s: item %d differs from the same text sent alone", input, i)
				}
			} else {
				var ids []int
				_ = json.Unmarshal(raw[i], &ids)
				total += len(ids)
			}
		}
		if strings.Contains(input, "[1,2,3]") && !slices.Equal(a.Data[1].Embedding, ids.Data[0].Embedding) {
			t.Errorf("%s: token ids [1,2,3] embed differently in a list", input)
		}
		if a.Usage.PromptTokens != total || a.Usage.TotalTokens != total {
			t.Errorf("%s: usage %+v, want %d", input, a.Usage, total)
		}
	}
}

func TestEmbeddings_BadInputsAre400(t *testing.T) {
	cfg := fastConfig()
	cfg.Models[0].MaxModelLen = 16
	_, url := startServer(t, cfg)
	for input, want := range map[string]string{
		`[]`:             "input must be",
		`""`:             "empty string",
		`["ok", ""]`:     "input[1] must not be an empty string",
		`[["a"], ["b"]]`: "input[0]",
		`[[1, 2], []]`:   "input[1]",
		`{"text": "x"}`:  "input must be",
		`["` + strings.Repeat("word ", 40) + `"]`: "maximum context length is 16 tokens",
	} {
		code, _, b := post(t, url+"/v1/embeddings", `{"input":`+input+`}`)
		if e := decodeError(t, b); code != 400 || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %d %s, want %q", input, code, b, want)
		}
	}
}
