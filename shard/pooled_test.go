package shard

import (
	"strings"
	"testing"
)

// TestPooledRoutesByPrefix: an embeddings, pooling or score request
// whose input saltus reads is keyed by it and goes back to the backend
// that served the same input (reason tree), though others are idler; a
// score request by its query alone, whatever its documents.
func TestPooledRoutesByPrefix(t *testing.T) {
	t.Parallel()
	for _, tokenizer := range []bool{false, true} {
		e := newEnv(t, envOpts{loops: 2, backends: 4, tokenizer: tokenizer})
		doc := strings.Repeat("a shared document that is embedded again and again. ", 40)
		for i, tc := range []struct{ path, first, again string }{
			{"/v1/embeddings", `{"model":"m","input":"` + doc + `"}`, `{"input":["` + doc + `"],"model":"m"}`},
			{"/pooling", `{"model":"m","input":"` + doc + `1"}`, `{"model":"m","input":"` + doc + `1"}`},
			{"/classify", `{"model":"m","input":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33]}`,
				`{"model":"m","input":[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33]]}`},
			{"/v1/rerank", `{"model":"m","query":"` + doc + `2","documents":["x"]}`, `{"model":"m","query":"` + doc + `2","documents":["y","z"],"top_n":1}`},
			{"/score", `{"model":"m","text_1":"` + doc + `3","text_2":["x"]}`, `{"model":"m","text_1":["` + doc + `3"],"text_2":"w"}`},
		} {
			c := e.serve(t, newExchange(i%2, "POST", tc.path, tc.first))
			if c == nil {
				t.Fatalf("%s: answered by the router", tc.path)
			}
			first := c.candidates[0]
			for k := range 3 {
				// The holder is the busiest: a least-loaded choice would
				// go elsewhere.
				e.up.inFlight[first].Store(2)
				c = e.serve(t, newExchange(k%2, "POST", tc.path, tc.again))
				if c == nil || c.candidates[0] != first || !strings.Contains(c.header(HeaderRoute), " tree") {
					t.Fatalf("tokenizer %v, %s again: %+v, want backend %d by the tree", tokenizer, tc.path, c, first)
				}
				e.up.inFlight[first].Store(0)
			}
		}
		if n := e.r.m.unkeyed.Get(); n != 0 {
			t.Fatalf("%d requests unkeyed", n)
		}
		if s := e.r.routeStats(); s.Nodes == 0 {
			t.Fatalf("pooled requests taught nothing: %+v", s)
		}
	}
}
