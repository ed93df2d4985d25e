package kube

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// modelsOf formats ts as "name=url[models],..." for comparisons.
func modelsOf(ts []Target) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, t.Name+"="+t.URL+"["+strings.Join(t.Models, " ")+"]")
	}
	return strings.Join(parts, ",")
}

// selectorSlice is an EndpointSlice of a Service labelled app=vllm,
// tier=a (not the test Service).
func selectorSlice(name, rv string, eps ...map[string]any) map[string]any {
	s := slice(name, rv, "IPv4", httpPort, eps...)
	s["metadata"].(map[string]any)["labels"] = map[string]any{serviceLabel: "llama-a", "app": "vllm", "tier": "a"}
	return s
}

// TestModelSelector: with only a model selector, the list and the watch
// carry its label selector (URL-encoded: it holds '=' and ','), the ready
// endpoints of the slices it picks (whatever their Service) are pinned to
// its model, its series carry labels model and selector, and its status
// names the model and selector instead of a Service.
func TestModelSelector(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	cfg := testConfig(t, f)
	cfg.Service = ""
	cfg.ModelSelectors = []string{"meta/llama-3=app=vllm,tier=a"}
	r := start(t, cfg)

	l := f.nextList(t)
	if got := l.query.Get("labelSelector"); got != "app=vllm,tier=a" {
		t.Errorf("list labelSelector %q, want app=vllm,tier=a", got)
	}
	if !strings.Contains(l.r.URL.RawQuery, "labelSelector=app%3Dvllm%2Ctier%3Da") {
		t.Errorf("list query %q: the selector is not URL-encoded", l.r.URL.RawQuery)
	}
	l.list("20", selectorSlice("llama-a-1", "19", ep("10.0.1.1", "pod-a", "ready"), ep("10.0.1.2", "pod-b", "notready")))
	if got, want := modelsOf(r.update(t)), "pod-a=http://10.0.1.1:8000[meta/llama-3]"; got != want {
		t.Fatalf("first set:\n got %s\nwant %s", got, want)
	}
	w := f.nextWatch(t, "20")
	if got := w.query.Get("labelSelector"); got != "app=vllm,tier=a" {
		t.Errorf("watch labelSelector %q, want app=vllm,tier=a", got)
	}
	s := w.stream()
	s.event(t, "MODIFIED", selectorSlice("llama-a-1", "21", ep("10.0.1.1", "pod-a", "ready"), ep("10.0.1.2", "pod-b", "ready")))
	got := r.update(t)
	if want := "pod-a=http://10.0.1.1:8000[meta/llama-3],pod-b=http://10.0.1.2:8000[meta/llama-3]"; modelsOf(got) != want {
		t.Fatalf("after MODIFIED:\n got %s\nwant %s", modelsOf(got), want)
	}
	if &got[0].Models[0] == &got[1].Models[0] {
		t.Error("targets share their Models slice")
	}
	// A slice that leaves the selector is DELETED by the API server.
	s.event(t, "DELETED", selectorSlice("llama-a-1", "22"))
	if got := r.update(t); len(got) != 0 {
		t.Fatalf("after DELETED: %v, want none", got)
	}

	const labels = `model="meta/llama-3",selector="app=vllm,tier=a"`
	for name, want := range map[string]float64{
		`saltus_discovery_k8s_events_total{` + labels + `,type="modified"}`: 1,
		`saltus_discovery_k8s_events_total{` + labels + `,type="deleted"}`:  1,
		`saltus_discovery_k8s_updates_total{` + labels + `}`:                3,
		`saltus_discovery_k8s_endpoints{` + labels + `,state="ready"}`:      0,
		`saltus_discovery_k8s_connected{` + labels + `}`:                    1,
		`saltus_discovery_k8s_updates_total`:                                -1, // no Service watch: no unlabelled series
	} {
		if got := r.metric(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	st := r.status()
	if st.Service != "" || st.Model != "meta/llama-3" || st.Selector != "app=vllm,tier=a" || st.Namespace != testNS || st.Lists != 1 {
		t.Errorf("status %+v", st)
	}
	b, err := json.Marshal(r.w.Status())
	if err != nil || strings.Contains(string(b), `"service"`) || !strings.Contains(string(b), `"model":"meta/llama-3","selector":"app=vllm,tier=a"`) {
		t.Errorf("status JSON %s (%v)", b, err)
	}
}

// TestServiceAndModelSelectors: New returns the Service's watch first,
// then one per model selector in order, each listing with its own label
// selector; the Service's targets are not pinned, each selector's are
// pinned to its model, and a 400 for a selector the API server rejects
// names the selector.
func TestServiceAndModelSelectors(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	cfg := testConfig(t, f)
	cfg.ModelSelectors = []string{"llama=tier in (a,b)", "qwen=app=qwen"}
	rs := startAll(t, cfg)
	if len(rs) != 3 || rs[0].w.Model() != "" || rs[1].w.Model() != "llama" || rs[2].w.Model() != "qwen" {
		t.Fatalf("watchers %v", rs)
	}
	want := map[string]string{ // by label selector: the targets its watch hands over
		"kubernetes.io/service-name=vllm": "pod-a=http://10.0.0.1:8000[]",
		"tier in (a,b)":                   "pod-a=http://10.0.0.1:8000[llama]",
		"app=qwen":                        "pod-q=http://10.0.2.1:8000[qwen]",
	}
	// Each watch lists, then watches: the requests of the three come in
	// any order. The API server rejects qwen's first watch with a 400;
	// qwen watches again after the backoff.
	var seen []string
	watches := map[string]int{}
	for len(seen) < 3 || len(watches) < 3 || watches["app=qwen"] < 2 {
		r := f.next(t)
		sel := r.query.Get("labelSelector")
		switch {
		case r.watch:
			watches[sel]++
			if sel == "app=qwen" && watches[sel] == 1 {
				r.json(400, `{"kind":"Status","message":"unable to parse requirement","reason":"BadRequest","code":400}`)
			} else {
				r.stream()
			}
		case sel == "app=qwen":
			seen = append(seen, sel)
			r.list("30", selectorSlice("qwen-1", "29", ep("10.0.2.1", "pod-q", "ready")))
		default:
			seen = append(seen, sel)
			r.list("30", slice("vllm-a", "29", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready")))
		}
	}
	if watches["app=qwen"] != 2 || watches["tier in (a,b)"] != 1 || watches["kubernetes.io/service-name=vllm"] != 1 {
		t.Errorf("watches by selector %v", watches)
	}
	slices.Sort(seen)
	if got := strings.Join(seen, " | "); got != "app=qwen | kubernetes.io/service-name=vllm | tier in (a,b)" {
		t.Fatalf("label selectors listed: %s", got)
	}
	for i, sel := range []string{"kubernetes.io/service-name=vllm", "tier in (a,b)", "app=qwen"} {
		if got := modelsOf(rs[i].update(t)); got != want[sel] {
			t.Errorf("watch %d (%s): got %s, want %s", i, sel, got, want[sel])
		}
	}
	for i, w := range []string{`saltus_discovery_k8s_updates_total`, `saltus_discovery_k8s_updates_total{model="llama",selector="tier in (a,b)"}`,
		`saltus_discovery_k8s_updates_total{model="qwen",selector="app=qwen"}`} {
		if got := rs[i].metric(w); got != 1 {
			t.Errorf("%s = %v, want 1", w, got)
		}
	}
	// The 400 was logged, counted and named in the status.
	if st := rs[2].status(); !strings.Contains(st.LastError, `watch endpointslices of selector "app=qwen" (model qwen) in namespace ns1: HTTP 400`) {
		t.Errorf("last error %q", st.LastError)
	}
	if got := rs[2].metric(`saltus_discovery_k8s_errors_total{model="qwen",selector="app=qwen",reason="status"}`); got != 1 {
		t.Errorf("qwen's status errors %v, want 1", got)
	}
}

// TestModelSelectorValidate: every bad ModelSelectors entry is reported
// with the key's name, and either a Service or a selector is required.
func TestModelSelectorValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultConfig()
	ok.ModelSelectors = []string{"llama=app=vllm,tier=a", "llama=tier in (a, b)", "Qwen/Qwen3-8B=app=qwen"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("selectors without a Service: %v", err)
	}
	if err := DefaultConfig().Validate(); err == nil || !strings.Contains(err.Error(), "--k8s-service") || !strings.Contains(err.Error(), "--k8s-model-selector") {
		t.Errorf("neither a Service nor a selector: %v", err)
	}
	for _, tc := range []struct{ entry, want string }{
		{"llama", "want MODEL=SELECTOR"},
		{"=app=vllm", "want MODEL=SELECTOR"},
		{"llama=", "want MODEL=SELECTOR"},
		{"llama= app=vllm", "must not start or end with a space"},
		{"llama=app=vllm ", "must not start or end with a space"},
		{"llama=app=vllm\n", "must not start or end with a space"},
		{"llama=app=v\tllm", "printable ASCII"},
		{"llama=app=vllé", "printable ASCII"},
		{"my llama=app=vllm", "printable, without spaces"},
		{"llama=" + strings.Repeat("a", maxSelectorLen+1), "over 1024 bytes"},
		{strings.Repeat("m", maxModelLen+1) + "=app=vllm", "over 256 bytes"},
	} {
		cfg := DefaultConfig()
		cfg.Service = "vllm"
		cfg.ModelSelectors = []string{"good=app=good", tc.entry}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "ModelSelectors (--k8s-model-selector) entry 2") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming entry 2 and saying %q", tc.entry, err, tc.want)
		}
	}
	dup := DefaultConfig()
	dup.ModelSelectors = []string{"llama=app=vllm", "qwen=app=qwen", "llama=app=vllm"}
	if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), `entry 3 "llama=app=vllm" repeats entry 1`) {
		t.Errorf("a repeated entry: %v", err)
	}
	many := DefaultConfig()
	for i := range maxModelSelectors + 1 {
		many.ModelSelectors = append(many.ModelSelectors, "m=app=a"+strings.Repeat("x", i))
	}
	if err := many.Validate(); err == nil || !strings.Contains(err.Error(), "at most 64 entries") {
		t.Errorf("too many entries: %v", err)
	}
}
