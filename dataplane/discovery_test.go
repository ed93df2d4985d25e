package dataplane

import (
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/discovery/kube"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// TestMergeDiscovered: the watches' lists become one backend list: one
// per URL with the union of its pins (an endpoint of the Service's watch
// that a model selector also finds is pinned to the selector's model),
// one per name, sorted by name.
func TestMergeDiscovered(t *testing.T) {
	t.Parallel()
	f := func(name string, lists [][]kube.Target, want string) {
		t.Helper()
		if got := format(mergeDiscovered(lists)); got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	service := []kube.Target{{Name: "pod-a", URL: "http://10.0.0.1:8000"}, {Name: "pod-b", URL: "http://10.0.0.2:8000"}}
	llama := []kube.Target{{Name: "pod-b", URL: "http://10.0.0.2:8000", Models: []string{"llama"}}, {Name: "pod-c", URL: "http://10.0.0.3:8000", Models: []string{"llama"}}}
	qwen := []kube.Target{{Name: "pod-c", URL: "http://10.0.0.3:8000", Models: []string{"qwen"}}}

	f("nothing yet", [][]kube.Target{nil, nil}, "")
	f("the Service's watch alone", [][]kube.Target{service, nil, nil},
		"pod-a=http://10.0.0.1:8000[],pod-b=http://10.0.0.2:8000[]")
	f("a selector's watch alone", [][]kube.Target{nil, llama},
		"pod-b=http://10.0.0.2:8000[llama],pod-c=http://10.0.0.3:8000[llama]")
	f("the Service's and two selectors'", [][]kube.Target{service, qwen, llama},
		"pod-a=http://10.0.0.1:8000[],pod-b=http://10.0.0.2:8000[llama],pod-c=http://10.0.0.3:8000[llama qwen]")
	f("the same model twice", [][]kube.Target{llama, llama},
		"pod-b=http://10.0.0.2:8000[llama],pod-c=http://10.0.0.3:8000[llama]")
	// A URL under two names keeps the smaller; a name at two URLs (a pod
	// behind two Services on different ports) keeps the smaller URL, with
	// its own pins.
	f("name clashes", [][]kube.Target{
		{{Name: "pod-z", URL: "http://10.0.0.9:8000"}, {Name: "pod-d", URL: "http://10.0.0.4:9000", Models: []string{"qwen"}}},
		{{Name: "10.0.0.9", URL: "http://10.0.0.9:8000", Models: []string{"llama"}}, {Name: "pod-d", URL: "http://10.0.0.4:8000", Models: []string{"llama"}}},
	}, "10.0.0.9=http://10.0.0.9:8000[llama],pod-d=http://10.0.0.4:8000[llama]")

	// Each target has its own Models: Sync keeps them as the pins.
	got := mergeDiscovered([][]kube.Target{llama})
	if &got[0].Models[0] == &got[1].Models[0] || &got[0].Models[0] == &llama[0].Models[0] {
		t.Error("merged targets share a Models slice")
	}
}

// format writes targets as "name=url[models],...".
func format(ts []backend.Target) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, t.Name+"="+t.URL+"["+strings.Join(t.Models, " ")+"]")
	}
	return strings.Join(parts, ",")
}
