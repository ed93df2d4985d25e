package main

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestServePoolingByPrefix: embeddings of the same long document, and
// rerank requests with the same long query, through saltus to simulated
// engines with prefix caching (the llama3 tokenizer on both sides): each
// goes back to the engine that prefilled it, so the engines find it in
// their caches; the official SDK's embeddings call works through saltus.
func TestServePoolingByPrefix(t *testing.T) {
	t.Parallel()
	f := startSDKFleet(t, 4, 50)
	base := "http://" + f.s.addr
	for d := range 3 {
		doc := strings.Repeat(fmt.Sprintf("Document %d: the harbour master's log of berths, tides and pilots. ", d), 30)
		var at string
		for i := range 4 {
			var body string
			if i%2 == 0 {
				body = fmt.Sprintf(`{"model":"llama3","input":%q}`, doc)
			} else {
				body = fmt.Sprintf(`{"model":"llama3","input":[%q]}`, doc)
			}
			a := do(t, "POST", base+"/v1/embeddings", body)
			if a.status != 200 || a.backend == "" {
				t.Fatalf("doc %d: %d from %q: %s", d, a.status, a.backend, a.body)
			}
			if i == 0 {
				at = a.backend
			} else if a.backend != at {
				t.Fatalf("doc %d, request %d: to %s (route %q), the first went to %s", d, i, a.backend, a.route, at)
			}
		}
		q := fmt.Sprintf(`{"model":"llama3","query":%q,"documents":["berth %d","tide %d"]}`, "Judge the passage against the query. "+doc, d, d)
		var rat string
		for i := range 3 {
			a := do(t, "POST", base+"/v1/rerank", q)
			if a.status != 200 || !strings.Contains(a.body, `"relevance_score"`) {
				t.Fatalf("rerank %d: %d: %s", d, a.status, a.body)
			}
			if i == 0 {
				rat = a.backend
			} else if a.backend != rat {
				t.Fatalf("rerank of doc %d, request %d: to %s, the first went to %s", d, i, a.backend, rat)
			}
		}
	}
	var hits, queries uint64
	for _, s := range f.sims {
		st := s.Stats()
		hits, queries = hits+st.PrefixHits, queries+st.PrefixQueries
	}
	// Each document prefilled once and found three times; each query
	// pair's query found by the other pairs and requests.
	ratio := float64(hits) / float64(queries)
	if ratio < 0.6 {
		t.Fatalf("engines' prefix hit ratio %.2f (%d of %d tokens): the repeats did not reach their holders", ratio, hits, queries)
	}
	t.Logf("engines' prefix hit ratio %.3f (%d of %d prompt tokens)", ratio, hits, queries)

	// An audio upload goes to an engine serving the form's model.
	var form bytes.Buffer
	w := multipart.NewWriter(&form)
	fw, err := w.CreateFormFile("file", "a.wav")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(bytes.Repeat([]byte("RIFF"), 1000))
	_ = w.WriteField("model", "llama3")
	_ = w.Close()
	a := do(t, "POST", base+"/v1/audio/transcriptions", form.String(), "Content-Type", w.FormDataContentType())
	if a.status != 200 || !strings.Contains(a.body, `4000 bytes for llama3`) || a.backend == "" {
		t.Fatalf("transcription: %d from %q: %s", a.status, a.backend, a.body)
	}

	var resp *http.Response
	emb, err := f.client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: "llama3",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first passage", "second passage"}},
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.Data) != 2 || len(emb.Data[1].Embedding) == 0 || emb.Usage.PromptTokens == 0 || resp.Header.Get("X-Saltus-Route") == "" {
		t.Fatalf("SDK embeddings: %+v", emb)
	}
}
