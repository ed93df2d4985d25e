package workload

import (
	"math"
	"testing"
)

func TestHotspotMix(t *testing.T) {
	t.Parallel()
	w := mustNew(t, "hotspot", DefaultOptions()).(*hotspot)
	other := map[string]int{}
	for i, p := range w.others {
		other[p.text] = i
	}
	if _, ok := other[w.hot.text]; ok || len(other) != hotspotOthers {
		t.Fatalf("%d distinct other prompts (the hot one among them: %v), want %d", len(other), ok, hotspotOthers)
	}
	hot, n := 0, 0
	used := make([]int, hotspotOthers)
	seen := map[string]bool{}
	for _, reqs := range drive(t, w, 5, 2000) {
		for _, r := range reqs {
			if len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Messages[1].Role != "user" {
				t.Fatalf("%d messages, want a system prompt and a user turn", len(r.Messages))
			}
			sys, turn := r.Messages[0].Content, r.Messages[1].Content
			switch k, ok := other[sys]; {
			case sys == w.hot.text:
				if r.Tag != "hot" {
					t.Fatalf("hot prompt tagged %q", r.Tag)
				}
				hot++
			case ok:
				if r.Tag != "other" {
					t.Fatalf("other prompt %d tagged %q", k, r.Tag)
				}
				used[k]++
			default:
				t.Fatal("the system message is none of the prompts")
			}
			if seen[turn] {
				t.Fatalf("user turn %q sent twice", turn)
			}
			seen[turn] = true
			n++
		}
	}
	// Binomial standard deviation over 10,000 draws: 0.4 points; 1.5
	// points is almost 4 of them.
	if got := 100 * float64(hot) / float64(n); math.Abs(got-hotspotHotPercent) > 1.5 {
		t.Errorf("hot share %.1f%%, want %d%% ± 1.5", got, hotspotHotPercent)
	}
	want := float64(n-hot) / hotspotOthers
	for k, c := range used {
		if math.Abs(float64(c)-want) > 0.35*want {
			t.Errorf("other prompt %d: %d requests, want %.0f ± 35%%", k, c, want)
		}
	}
	t.Logf("hot %d of %d; others %v", hot, n, used)
}

func TestHotspotLengths(t *testing.T) {
	t.Parallel()
	w := mustNew(t, "hotspot", DefaultOptions()).(*hotspot)
	if n := len(tokens(t, w.hot.text)); n != hotspotHotTokens {
		t.Errorf("hot prompt: %d tokens, want %d", n, hotspotHotTokens)
	}
	lo, hi := hotspotOtherMax, 0
	for i, p := range w.others {
		n := len(tokens(t, p.text))
		if n < hotspotOtherMin || n > hotspotOtherMax {
			t.Errorf("other prompt %d: %d tokens, want %d-%d", i, n, hotspotOtherMin, hotspotOtherMax)
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo < (hotspotOtherMax-hotspotOtherMin)/2 {
		t.Errorf("other prompt lengths span %d-%d only", lo, hi)
	}
	for _, r := range drive(t, w, 1, 50)[0] {
		if n := len(tokens(t, r.Messages[1].Content)); n < hotspotTurnMin || n > hotspotTurnMax {
			t.Fatalf("user turn: %d tokens, want %d-%d", n, hotspotTurnMin, hotspotTurnMax)
		}
	}
}
