package workload

import (
	"math"
	"testing"
)

func TestRAGPopularity(t *testing.T) {
	t.Parallel()
	w := mustNew(t, "rag", DefaultOptions()).(*rag)
	rank := map[string]int{}
	for i, d := range w.docs {
		rank[d.text] = i
	}
	count := make([]int, ragDocs)
	tags := map[string]int{}
	n := 0
	for _, reqs := range drive(t, w, 4, 5000) {
		for _, r := range reqs {
			if len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Messages[1].Role != "user" {
				t.Fatalf("%d messages, want a document and a question", len(r.Messages))
			}
			k, ok := rank[r.Messages[0].Content]
			if !ok {
				t.Fatal("the system message is none of the documents")
			}
			if _, ok := rank[r.Messages[1].Content]; ok {
				t.Fatal("the question is a document")
			}
			count[k]++
			tags[r.Tag]++
			if want := [3]string{"hot", "warm", "cold"}[min(k/ragHotRanks, 1)+min(k/ragWarmRanks, 1)]; r.Tag != want {
				t.Fatalf("document of rank %d tagged %q, want %q", k, r.Tag, want)
			}
			n++
		}
	}
	h := 0.0
	for k := range ragDocs {
		h += math.Pow(float64(k+1), -ragZipfS)
	}
	for k := range 10 {
		want := float64(n) * math.Pow(float64(k+1), -ragZipfS) / h
		if got := float64(count[k]); math.Abs(got-want) > 0.1*want {
			t.Errorf("rank %d: %d requests, want %.0f ± 10%%", k, count[k], want)
		}
		if count[k] <= count[k+1] {
			t.Errorf("rank %d: %d requests, not more than rank %d's %d", k, count[k], k+1, count[k+1])
		}
	}
	// Popularity falls as a power of rank: a least-squares slope of
	// log(count) over log(rank+1) for the top 20 near -1.1.
	var sx, sy, sxx, sxy float64
	for k := range 20 {
		x, y := math.Log(float64(k+1)), math.Log(float64(count[k]))
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	slope := (20*sxy - sx*sy) / (20*sxx - sx*sx)
	if math.Abs(slope+ragZipfS) > 0.15 {
		t.Errorf("log-log slope %.2f, want -%.1f ± 0.15", slope, ragZipfS)
	}
	if count[ragDocs-1] == 0 {
		t.Error("the least popular document was never asked about")
	}
	t.Logf("top share %.1f%% (expected %.1f%%), slope %.2f, tags %v, counts %v",
		100*float64(count[0])/float64(n), 100/h, slope, tags, count)
}

func TestRAGDocuments(t *testing.T) {
	t.Parallel()
	w := mustNew(t, "rag", DefaultOptions()).(*rag)
	lo, hi := ragDocMax, 0
	for i, d := range w.docs {
		n := len(tokens(t, d.text))
		if n < ragDocMin || n > ragDocMax {
			t.Errorf("document %d: %d tokens, want %d-%d", i, n, ragDocMin, ragDocMax)
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo < (ragDocMax-ragDocMin)/2 {
		t.Errorf("document lengths span %d-%d only", lo, hi)
	}
}
