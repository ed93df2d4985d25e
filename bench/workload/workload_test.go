package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var synthetic = []string{"stress", "multiturn", "rag", "unique", "hotspot", "manydocs"}

func TestNames(t *testing.T) {
	t.Parallel()
	if got, want := Names(), []string{"hotspot", "manydocs", "mixed", "mooncake", "multiturn", "rag", "saturation", "stress", "trace", "unique"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	f := func(name string, opts Options, want ...string) {
		t.Helper()
		w, err := New(name, opts)
		if err == nil {
			t.Fatalf("New(%q) = %s, want an error", name, w.Name())
		}
		for _, s := range want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("New(%q): error %q does not contain %q", name, err, s)
			}
		}
	}
	d := DefaultOptions()
	f("bogus", d, `unknown workload "bogus"`, "valid: hotspot, manydocs, mixed, mooncake, multiturn, rag, saturation, stress, trace, unique, trace:FILE, mooncake:FILE")
	f("", d, `unknown workload ""`)
	f("Stress", d, "unknown workload")
	f("trace", d, "TraceFile is empty")
	f("saturation", d, "Rate must be positive")
	fast := d
	fast.Rate = 2e6
	f("saturation", fast, "rate (Rate) must be in [0, 1000000]")
	f("trace:/nonexistent/trace.jsonl", d, "cannot open trace", "/nonexistent/trace.jsonl")

	bad := d
	bad.MaxTokens, bad.TokensPerWord, bad.ThinkMin, bad.ThinkMax = -1, 0, 2*time.Second, time.Second
	f("stress", bad, "workload stress", "MaxTokens", "TokensPerWord", "ThinkMin and ThinkMax")
	f("rag", Options{}, "TokensPerWord must be in (0, 16], got 0")
	neg := d
	neg.ThinkMin, neg.ThinkMax = -time.Second, 0
	f("unique", neg, "ThinkMin")
	long := d
	long.ThinkMax = 1<<63 - 1
	f("multiturn", long, "ThinkMax <= 1h0m0s")
}

func TestValidateDefaults(t *testing.T) {
	t.Parallel()
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.ThinkMin, o.ThinkMax, o.MaxTokens = 0, 0, 0
	if err := o.Validate(); err != nil {
		t.Fatalf("no thinking and engine-default max_tokens: %v", err)
	}
}

// drive runs users 0..users-1 of w for n requests each, replying with a
// text that names the request, and returns the requests by user.
func drive(t testing.TB, w Workload, users, n int) [][]Request {
	t.Helper()
	out := make([][]Request, users)
	for id := range users {
		u := w.NewUser(id)
		for i := range n {
			req, ok := u.Next()
			if !ok {
				t.Fatalf("%s user %d: no request %d", w.Name(), id, i)
			}
			out[id] = append(out[id], req)
			u.Reply(fmt.Sprintf("answer %d to user %d", i, id))
		}
	}
	return out
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	for _, name := range synthetic {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts := DefaultOptions()
			opts.Seed = 42
			a := drive(t, mustNew(t, name, opts), 3, 40)
			b := drive(t, mustNew(t, name, opts), 3, 40)
			if !reflect.DeepEqual(a, b) {
				t.Fatal("two workloads with one seed differ")
			}
			// A user's requests do not depend on other users: user 2
			// alone sees what it saw beside users 0 and 1.
			w := mustNew(t, name, opts)
			u := w.NewUser(2)
			for i, want := range a[2] {
				got, _ := u.Next()
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("user 2 alone, request %d differs", i)
				}
				u.Reply(fmt.Sprintf("answer %d to user %d", i, 2))
			}
			if reflect.DeepEqual(a[0], a[1]) {
				t.Error("users 0 and 1 send the same requests")
			}
			opts.Seed = 43
			if c := drive(t, mustNew(t, name, opts), 3, 40); reflect.DeepEqual(a, c) {
				t.Error("seeds 42 and 43 give the same requests")
			}
		})
	}
}

func TestRequestFields(t *testing.T) {
	t.Parallel()
	for _, name := range synthetic {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts := DefaultOptions()
			opts.Model, opts.MaxTokens = "m1", 77
			opts.ThinkMin, opts.ThinkMax = 100*time.Millisecond, 300*time.Millisecond
			var sum time.Duration
			n := 0
			for _, reqs := range drive(t, mustNew(t, name, opts), 4, 250) {
				for _, r := range reqs {
					if r.Model != "m1" || r.MaxTokens != 77 || r.At != 0 || r.Prompt != "" || r.Tag == "" || len(r.Messages) == 0 {
						t.Fatalf("request %+v: want model m1, max_tokens 77, At 0, messages, a tag", r)
					}
					if r.Think < opts.ThinkMin || r.Think > opts.ThinkMax {
						t.Fatalf("think %v outside [%v, %v]", r.Think, opts.ThinkMin, opts.ThinkMax)
					}
					for _, m := range r.Messages {
						if m.Content == "" || (m.Role != "system" && m.Role != "user" && m.Role != "assistant") {
							t.Fatalf("message %+v", m)
						}
					}
					sum += r.Think
					n++
				}
			}
			if mean := sum / time.Duration(n); mean < 190*time.Millisecond || mean > 210*time.Millisecond {
				t.Errorf("mean think %v, want about 200ms (uniform 100-300ms)", mean)
			}
			opts.ThinkMin, opts.ThinkMax = 0, 0
			for _, r := range drive(t, mustNew(t, name, opts), 1, 20)[0] {
				if r.Think != 0 {
					t.Fatalf("think %v with ThinkMax 0", r.Think)
				}
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	trace := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(trace, []byte(`{"prompt":"a","t":1}`+"\n"+`{"prompt":"b","t":3.5}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"stress":         {"10% small (100-500 tokens)", "40% xlarge (4000-8000 tokens)", "5 shared 8000-token prefixes", "10 questions", "90%", "max_tokens 100", "think 500ms-2s", "seed 1"},
		"multiturn":      {"3-10 turns", "4 system prompts", "20%", "branch"},
		"rag":            {"50 documents", "2000-8000 tokens", "Zipf(1.1)"},
		"unique":         {"no shared prefix", "40% 4000-8000"},
		"hotspot":        {"80% of requests behind one 2000-token system prompt", "30 others", "1000-2000 tokens"},
		"manydocs":       {"64 documents", "2000-4000 tokens", "Zipf(0.8)"},
		"mixed":          {"40% org/alpha", "20% alpha-tuned", "40% org/beta", "2% of each user's requests name org/gamma"},
		"trace:" + trace: {"trace: 2 requests from " + trace, "open-loop", "2.5s"},
	}
	for name, subs := range want {
		d := mustNew(t, name, DefaultOptions()).Describe()
		if strings.Contains(d, "\n") || !strings.HasPrefix(d, strings.SplitN(name, ":", 2)[0]+": ") {
			t.Errorf("%s: Describe() = %q, want one line starting with the name", name, d)
		}
		for _, s := range subs {
			if !strings.Contains(d, s) {
				t.Errorf("%s: Describe() = %q, want it to contain %q", name, d, s)
			}
		}
	}
}

// TestSharedTextsDivergeEarly checks the shared texts of every workload
// against each other: distinct, and different within their first 16
// Llama-3 tokens (the first block), so that each has its own route.
func TestSharedTextsDivergeEarly(t *testing.T) {
	t.Parallel()
	s := mustNew(t, "stress", DefaultOptions()).(*stress)
	m := mustNew(t, "multiturn", DefaultOptions()).(*multiturn)
	r := mustNew(t, "rag", DefaultOptions()).(*rag)
	h := mustNew(t, "hotspot", DefaultOptions()).(*hotspot)
	d := mustNew(t, "manydocs", DefaultOptions()).(*manydocs)
	pools := map[string][]*pooled{
		"stress":    append(s.prefixes[:], s.categories[:]...),
		"multiturn": m.systems[:],
		"rag":       r.docs[:],
		"hotspot":   append([]*pooled{h.hot}, h.others[:]...),
		"manydocs":  d.docs[:],
	}
	for name, texts := range pools {
		firsts := map[string]int{}
		for i, p := range texts {
			first := fmt.Sprint(tokens(t, p.text)[:16])
			if j, ok := firsts[first]; ok {
				t.Errorf("%s: shared texts %d and %d have the same first block", name, j, i)
			}
			firsts[first] = i
		}
	}
}
