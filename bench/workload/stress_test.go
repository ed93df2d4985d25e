package workload

import (
	"math"
	"strings"
	"testing"
)

// stressDraws returns n requests from users 0..4 of a default stress.
func stressDraws(t *testing.T, w Workload, n int) []Request {
	t.Helper()
	var out []Request
	for _, reqs := range drive(t, w, 5, n/5) {
		out = append(out, reqs...)
	}
	return out
}

func TestStressMix(t *testing.T) {
	t.Parallel()
	reqs := stressDraws(t, mustNew(t, "stress", DefaultOptions()), 10000)
	count := map[string]int{}
	withCategory, smallMedium := 0, 0
	for _, r := range reqs {
		class, sub, _ := strings.Cut(r.Tag, "/")
		count[class]++
		if class == "small" || class == "medium" {
			smallMedium++
			if strings.HasPrefix(sub, "category") {
				withCategory++
			}
		}
		if r.MaxTokens != 100 {
			t.Fatalf("max_tokens %d, want 100", r.MaxTokens)
		}
	}
	for _, c := range stressClasses {
		// Binomial standard deviation over 10,000 draws is at most 0.5
		// points: 1.5 points is 3 of them.
		got := 100 * float64(count[c.name]) / float64(len(reqs))
		if math.Abs(got-float64(c.percent)) > 1.5 {
			t.Errorf("%s: %.1f%% of requests, want %d%% ± 1.5", c.name, got, c.percent)
		}
	}
	if got := 100 * float64(withCategory) / float64(smallMedium); math.Abs(got-stressCategoryPercent) > 2.5 {
		t.Errorf("small/medium with a category system prompt: %.1f%%, want %d%% ± 2.5", got, stressCategoryPercent)
	}
	t.Logf("mix %v; category share %.1f%%", count, 100*float64(withCategory)/float64(smallMedium))
}

func TestStressPrefixSharing(t *testing.T) {
	t.Parallel()
	w := mustNew(t, "stress", DefaultOptions()).(*stress)
	questions := map[string]int{}
	for i, q := range w.questions {
		questions[q.text] = i
	}
	categories := map[string]int{}
	for i, c := range w.categories {
		categories[c.text] = i
	}
	usedPrefix, usedQuestion, usedCategory := map[int]bool{}, map[int]bool{}, map[int]bool{}
	longest := map[int]string{} // prefix -> longest system text seen
	for _, r := range stressDraws(t, w, 10000) {
		class, sub, _ := strings.Cut(r.Tag, "/")
		switch class {
		case "large", "xlarge":
			if len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Messages[1].Role != "user" {
				t.Fatalf("%s: messages %d, want system and user", r.Tag, len(r.Messages))
			}
			sys := r.Messages[0].Content
			match := -1
			for i, p := range w.prefixes {
				if strings.HasPrefix(p.text, sys) {
					if match >= 0 {
						t.Fatalf("%s: system text is a prefix of prefixes %d and %d", r.Tag, match, i)
					}
					match = i
				}
			}
			if match < 0 || sub != "prefix"+string(rune('0'+match)) {
				t.Fatalf("%s: system text matches prefix %d", r.Tag, match)
			}
			usedPrefix[match] = true
			q, ok := questions[r.Messages[1].Content]
			if !ok {
				t.Fatalf("%s: user message is none of the %d questions", r.Tag, stressQuestions)
			}
			usedQuestion[q] = true
			// Byte-identical sharing: of two requests on one prefix, the
			// shorter system text is a prefix of the longer.
			if l := longest[match]; !strings.HasPrefix(l, sys) && !strings.HasPrefix(sys, l) {
				t.Fatalf("two requests on prefix %d diverge", match)
			}
			if len(sys) > len(longest[match]) {
				longest[match] = sys
			}
		case "small", "medium":
			last := r.Messages[len(r.Messages)-1]
			if last.Role != "user" {
				t.Fatalf("%s: last message is %s", r.Tag, last.Role)
			}
			if _, shared := questions[last.Content]; shared {
				t.Fatalf("%s: the user message is a shared question", r.Tag)
			}
			if sub == "none" {
				if len(r.Messages) != 1 {
					t.Fatalf("%s: %d messages, want 1", r.Tag, len(r.Messages))
				}
				continue
			}
			k, ok := -1, false
			for text, i := range categories {
				if len(r.Messages) == 2 && strings.HasPrefix(text, r.Messages[0].Content) {
					k, ok = i, true
				}
			}
			if len(r.Messages) != 2 || !ok || sub != "category"+string(rune('0'+k)) {
				t.Fatalf("%s: system message is not category %q", r.Tag, sub)
			}
			usedCategory[k] = true
		default:
			t.Fatalf("tag %q", r.Tag)
		}
	}
	if len(usedPrefix) != stressPrefixes || len(usedQuestion) != stressQuestions || len(usedCategory) != stressCategories {
		t.Errorf("used %d prefixes, %d questions, %d categories; want %d, %d, %d",
			len(usedPrefix), len(usedQuestion), len(usedCategory), stressPrefixes, stressQuestions, stressCategories)
	}
	for i, p := range w.prefixes {
		if n := len(tokens(t, p.text)); n != stressPrefixTokens {
			t.Errorf("prefix %d: %d tokens, want %d", i, n, stressPrefixTokens)
		}
	}
}

// TestStressSizes measures requests with the real Llama-3 tokenizer: the
// content of every request lies in its class's range.
func TestStressSizes(t *testing.T) {
	t.Parallel()
	f := func(tokensPerWord, slack float64) {
		t.Helper()
		opts := DefaultOptions()
		opts.TokensPerWord = tokensPerWord
		worst := 0.0
		for _, r := range stressDraws(t, mustNew(t, "stress", opts), 200) {
			class, _, _ := strings.Cut(r.Tag, "/")
			n := 0
			for _, m := range r.Messages {
				n += len(tokens(t, m.Content))
			}
			n = int(math.Round(float64(n) * tokensPerWord)) // as a tokenizer of that ratio would count
			for _, c := range stressClasses {
				if c.name != class {
					continue
				}
				lo, hi := float64(c.min)*(1-slack), float64(c.max)*(1+slack)
				if float64(n) < lo || float64(n) > hi {
					t.Errorf("TokensPerWord %v: %s request of %d tokens, want %d-%d", tokensPerWord, r.Tag, n, c.min, c.max)
				}
				worst = max(worst, float64(c.min-n)/float64(c.min), float64(n-c.max)/float64(c.max))
			}
		}
		t.Logf("TokensPerWord %v: worst excursion beyond the class range %.4f", tokensPerWord, worst)
	}
	f(1, 0)      // exact
	f(1.3, 0.01) // rounding of each part's unit count
}
