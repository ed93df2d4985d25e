package workload

import (
	"math"
	"testing"
)

func TestManydocsPopularity(t *testing.T) {
	t.Parallel()
	w := mustNew(t, "manydocs", DefaultOptions()).(*manydocs)
	rank := map[string]int{}
	for i, d := range w.docs {
		rank[d.text] = i
	}
	if len(rank) != manydocsDocs {
		t.Fatalf("%d distinct documents, want %d", len(rank), manydocsDocs)
	}
	count := make([]int, manydocsDocs)
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
			want := "cold"
			if k < manydocsHotRanks {
				want = "hot"
			} else if k < manydocsWarmRanks {
				want = "warm"
			}
			if r.Tag != want {
				t.Fatalf("document of rank %d tagged %q, want %q", k, r.Tag, want)
			}
			count[k]++
			n++
		}
	}
	h := 0.0
	for k := range manydocsDocs {
		h += math.Pow(float64(k+1), -manydocsZipfS)
	}
	for k := range manydocsDocs {
		want := float64(n) * math.Pow(float64(k+1), -manydocsZipfS) / h
		// The least popular document gets ~110 of 20,000 requests: 35 %
		// is over 3 binomial standard deviations there, ~1 at the top.
		if got := float64(count[k]); math.Abs(got-want) > 0.35*want {
			t.Errorf("rank %d: %d requests, want %.0f ± 35%%", k, count[k], want)
		}
	}
	var sx, sy, sxx, sxy float64
	for k := range manydocsDocs {
		x, y := math.Log(float64(k+1)), math.Log(float64(count[k]))
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	m := float64(manydocsDocs)
	slope := (m*sxy - sx*sy) / (m*sxx - sx*sx)
	if math.Abs(slope+manydocsZipfS) > 0.1 {
		t.Errorf("log-log slope %.2f, want -%.1f ± 0.1", slope, manydocsZipfS)
	}
	t.Logf("top share %.1f%% (expected %.1f%%), slope %.2f", 100*float64(count[0])/float64(n), 100/h, slope)
}

// TestManydocsExceedsFleet checks the point of the workload: its
// documents are more than 8 engines of 16,384 tokens (the a100-13b
// profile) hold.
func TestManydocsExceedsFleet(t *testing.T) {
	t.Parallel()
	w := mustNew(t, "manydocs", DefaultOptions()).(*manydocs)
	total, lo, hi := 0, manydocsDocMax, 0
	for i, d := range w.docs {
		n := len(tokens(t, d.text))
		if n < manydocsDocMin || n > manydocsDocMax {
			t.Errorf("document %d: %d tokens, want %d-%d", i, n, manydocsDocMin, manydocsDocMax)
		}
		total += n
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo < (manydocsDocMax-manydocsDocMin)/2 {
		t.Errorf("document lengths span %d-%d only", lo, hi)
	}
	if fleet := 8 * 16384; total < fleet*5/4 {
		t.Errorf("documents total %d tokens, want at least 1.25× a fleet of %d", total, fleet)
	}
	t.Logf("documents total %d tokens", total)
}
