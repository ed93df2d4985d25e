package vllmsim

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPooling: the pooling and scoring endpoints answer in vLLM's shapes,
// equal inputs get equal values, and a repeated input (a reranker's
// query) hits the prefix cache.
func TestPooling(t *testing.T) {
	s := startSim(t, nil)
	doc := strings.Repeat("a document long enough to fill several blocks. ", 20)
	type answer struct {
		Object string
		Model  string
		Data   []struct {
			Index     int
			Object    string
			Embedding []float64
			Data      []float64
			Probs     []float64
			Label     string
			Score     *float64
		}
		Results []struct {
			Index          int
			RelevanceScore *float64 `json:"relevance_score"`
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		}
	}
	call := func(path, body string) answer {
		t.Helper()
		st, b := post(t, s, path, body)
		if st != 200 {
			t.Fatalf("%s: %d %s", path, st, b)
		}
		var a answer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
		if a.Model != "m" || a.Usage.PromptTokens == 0 || a.Usage.TotalTokens != a.Usage.PromptTokens {
			t.Fatalf("%s: %s", path, b)
		}
		return a
	}
	e1 := call("/v1/embeddings", `{"model":"m","input":"`+doc+`"}`)
	e2 := call("/v1/embeddings", `{"input":["`+doc+`","other"]}`)
	if len(e1.Data) != 1 || len(e2.Data) != 2 || len(e1.Data[0].Embedding) != embedDims || e1.Data[0].Object != "embedding" ||
		e2.Data[1].Index != 1 || e1.Data[0].Embedding[3] != e2.Data[0].Embedding[3] || e2.Data[0].Embedding[3] == e2.Data[1].Embedding[3] {
		t.Fatalf("embeddings: %+v / %+v", e1, e2)
	}
	if a := call("/v1/embeddings", `{"input":[1,2,3]}`); len(a.Data) != 1 || a.Usage.PromptTokens != 3 {
		t.Fatalf("token ids: %+v", a)
	}
	if a := call("/pooling", `{"input":"x"}`); len(a.Data) != 1 || len(a.Data[0].Data) != embedDims {
		t.Fatalf("pooling: %+v", a)
	}
	if a := call("/classify", `{"input":["x","y"]}`); len(a.Data) != 2 || len(a.Data[1].Probs) != 2 || a.Data[1].Label == "" {
		t.Fatalf("classify: %+v", a)
	}
	hits := s.Stats().PrefixHits
	if a := call("/v1/rerank", `{"query":"`+doc+`","documents":["a","b","c"]}`); len(a.Results) != 3 || a.Results[2].RelevanceScore == nil {
		t.Fatalf("rerank: %+v", a)
	}
	if s.Stats().PrefixHits <= hits {
		t.Fatal("rerank: the query's blocks, prefilled for the first document, were not hit by the others")
	}
	if a := call("/score", `{"text_1":"q","text_2":["a","b"]}`); len(a.Data) != 2 || a.Data[0].Score == nil || a.Data[0].Object != "score" {
		t.Fatalf("score: %+v", a)
	}
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/embeddings", `{"model":"m"}`, "input: missing"},
		{"/v1/embeddings", `{"model":"nope","input":"x"}`, "does not exist"},
		{"/v1/rerank", `{"query":"q"}`, "documents"},
		{"/score", `{"text_1":3,"text_2":"a"}`, "text_1"},
		{"/v1/embeddings", `{"input":[]}`, "input"},
	} {
		st, b := post(t, s, tc.path, tc.body)
		if st/100 != 4 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s %s: %d %s, want a 4xx naming %q", tc.path, tc.body, st, b, tc.want)
		}
	}
}
