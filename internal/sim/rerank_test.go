package sim

import (
	"encoding/json"
	"testing"
)

func TestRerank_RanksByQueryWordsCountsPairsAndChecksInput(t *testing.T) {
	mc := fastModel()
	_, url := startServer(t, Config{Models: []ModelConfig{mc}, Seed: 1, APIKey: "k"})
	auth := []string{"Authorization", "Bearer k"}
	type result struct {
		Index    int `json:"index"`
		Document *struct {
			Text string `json:"text"`
		} `json:"document"`
		RelevanceScore float64 `json:"relevance_score"`
	}
	var out struct {
		Model   string         `json:"model"`
		Usage   map[string]int `json:"usage"`
		Results []result       `json:"results"`
	}
	docs := []string{"Paris is the capital of France.", "The capital of Germany is Berlin.", "Bananas are yellow."}
	body := `{"model":"m","query":"capital of France","documents":["` + docs[0] + `",{"text":"` + docs[1] + `"},"` + docs[2] + `"]}`
	for _, path := range []string{"/v1/rerank", "/rerank", "/v2/rerank"} {
		st, _, b := post(t, url+path, body, auth...)
		if st != 200 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("%s: %d %s", path, st, b)
		}
		if len(out.Results) != 3 || out.Results[0].Index != 0 || out.Results[1].Index != 1 || out.Results[2].Index != 2 ||
			out.Results[0].Document == nil || out.Results[0].Document.Text != docs[0] || out.Results[1].Document.Text != docs[1] {
			t.Fatalf("%s: results %s, want documents 0, 1, 2 in that order with their text", path, b)
		}
		if !(out.Results[0].RelevanceScore > out.Results[1].RelevanceScore && out.Results[1].RelevanceScore > out.Results[2].RelevanceScore) ||
			out.Results[0].RelevanceScore >= 1 || out.Results[2].RelevanceScore <= 0 {
			t.Fatalf("%s: scores %s, want strictly falling within (0, 1)", path, b)
		}
	}
	want := 0
	for _, d := range docs {
		want += countTextTokens("capital of France") + countTextTokens(d) + rerankSpecialTokens
	}
	if out.Usage["total_tokens"] != want || out.Model != "m" {
		t.Fatalf("usage %v model %q, want total_tokens %d", out.Usage, out.Model, want)
	}
	st, _, b := post(t, url+"/v1/rerank", `{"model":"m","query":"capital of France","documents":["`+docs[2]+`","`+docs[0]+`"],"top_n":1,"return_documents":false}`, auth...)
	var top struct{ Results []result }
	if st != 200 || json.Unmarshal(b, &top) != nil || len(top.Results) != 1 || top.Results[0].Index != 1 || top.Results[0].Document != nil {
		t.Fatalf("top_n 1 without documents: %d %s", st, b)
	}
	for _, c := range []struct{ body, param string }{
		{`{"model":"m","documents":["a"]}`, "query"},
		{`{"model":"m","query":"q","documents":[]}`, "documents"},
		{`{"model":"m","query":"q","documents":[1]}`, "documents"},
		{`{"model":"m","query":"q","documents":["a"],"top_n":-1}`, "top_n"},
	} {
		st, _, b := post(t, url+"/v1/rerank", c.body, auth...)
		var e struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		if st != 400 || json.Unmarshal(b, &e) != nil || e.Error.Param != c.param {
			t.Fatalf("%s: %d %s, want a 400 naming %s", c.body, st, b, c.param)
		}
	}
	if st, _, _ := post(t, url+"/v2/rerank", body); st != 401 {
		t.Fatalf("/v2/rerank without the key: %d, want 401", st)
	}
}
