package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/dataplane"
)

// fakeSlice is an EndpointSlice of Service vllm with one endpoint on
// 127.0.0.1 at the port of u's URL.
func fakeSlice(t *testing.T, name, pod string, u *upstream, ready bool, rv int) map[string]any {
	t.Helper()
	pu, err := url.Parse(u.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(pu.Port())
	return map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{"name": name, "namespace": "default", "resourceVersion": strconv.Itoa(rv),
			"labels": map[string]string{"kubernetes.io/service-name": "vllm"}},
		"addressType": "IPv4",
		"endpoints": []map[string]any{{"addresses": []string{"127.0.0.1"}, "conditions": map[string]bool{"ready": ready},
			"targetRef": map[string]string{"kind": "Pod", "name": pod, "namespace": "default"}}},
		"ports": []map[string]any{{"name": "metrics", "port": 1, "protocol": "TCP"}, {"name": "http", "port": port, "protocol": "TCP"}},
	}
}

// TestDiscoveryK8s serves with --discovery k8s against a fake Kubernetes
// API server: the ready endpoints of the Service's EndpointSlices become
// backends (the named port), one turning ready is added, a deleted slice's
// endpoint is drained and removed, and requests are served throughout.
func TestDiscoveryK8s(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	events := make(chan string, 4)
	watching := make(chan struct{}, 4)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer test-token" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices" || r.URL.Query().Get("labelSelector") != "kubernetes.io/service-name=vllm" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "1" {
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
				"metadata": map[string]any{"resourceVersion": "10"},
				"items":    []any{fakeSlice(t, "vllm-a", "pod-a", a, true, 5), fakeSlice(t, "vllm-b", "pod-b", b, false, 6)}})
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		watching <- struct{}{}
		for {
			select {
			case ev := <-events:
				fmt.Fprintln(w, ev)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(api.Close)
	event := func(typ string, obj map[string]any) {
		t.Helper()
		line, err := json.Marshal(map[string]any{"type": typ, "object": obj})
		if err != nil {
			t.Fatal(err)
		}
		events <- string(line)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
current-context: test
clusters:
- name: fake
  cluster: {server: "`+api.URL+`"}
users:
- name: tester
  user: {token: test-token}
contexts:
- name: test
  context: {cluster: fake, user: tester, namespace: default}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Discovery = dataplane.DiscoveryK8s
		c.K8s.Service, c.K8s.PortName, c.K8s.Kubeconfig = "vllm", "http", kubeconfig
	})
	names := func() []string {
		var out []string
		for _, bi := range s.backends(t) {
			st := bi.Name
			if bi.Draining {
				st += " draining"
			}
			out = append(out, st)
		}
		slices.Sort(out)
		return out
	}
	waitFor(t, func() bool { return slices.Equal(names(), []string{"pod-a"}) })
	<-watching
	if got := s.chat(t, chatJSON(false, "user", "hello")); got.status != 200 || a.calls.Load() != 1 {
		t.Fatalf("chat: %d %s; a answered %d", got.status, got.body, a.calls.Load())
	}
	// pod-b turns ready.
	event("MODIFIED", fakeSlice(t, "vllm-b", "pod-b", b, true, 11))
	waitFor(t, func() bool { return slices.Equal(names(), []string{"pod-a", "pod-b"}) })
	// pod-a's slice goes away: drained, then removed (it is idle).
	event("DELETED", fakeSlice(t, "vllm-a", "pod-a", a, true, 12))
	waitFor(t, func() bool { return slices.Equal(names(), []string{"pod-b"}) })
	if got := s.chat(t, chatJSON(false, "user", "hello")); got.status != 200 || b.calls.Load() != 1 {
		t.Fatalf("chat after the change: %d %s; b answered %d", got.status, got.body, b.calls.Load())
	}
	st := s.adm(t, "GET", "/admin/discovery", "")
	if st.status != 200 || !strings.Contains(st.body, `"service":"vllm"`) || !strings.Contains(st.body, `"connected":true`) {
		t.Errorf("/admin/discovery: %d %s", st.status, st.body)
	}
	if !strings.Contains(s.logs(), "discovered backends changed") {
		t.Error("no log of the discovered change")
	}
}

// TestDiscoveryK8sModelSelector serves with --k8s-service and a
// --k8s-model-selector against a fake API server that answers each label
// selector with its own slices: an endpoint both watches find and one only
// the selector finds are both pinned to the selector's model, requests for
// that model are served by them, and /admin/discovery lists both watches.
func TestDiscoveryK8sModelSelector(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	const modelSel = "app=engine,tier=gpu" // a selector with a comma
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sel := r.URL.Query().Get("labelSelector")
		var items []any
		switch sel {
		case "kubernetes.io/service-name=vllm":
			items = []any{fakeSlice(t, "vllm-a", "pod-a", a, true, 5)}
		case modelSel:
			// The slices of another Service, labelled as the selector
			// asks: pod-a behind it too, and pod-b.
			other := fakeSlice(t, "llama-b", "pod-b", b, true, 6)
			other["metadata"].(map[string]any)["labels"] = map[string]string{"kubernetes.io/service-name": "llama", "app": "engine", "tier": "gpu"}
			items = []any{fakeSlice(t, "llama-a", "pod-a", a, true, 6), other}
		default:
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "1" {
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
				"metadata": map[string]any{"resourceVersion": "10"}, "items": items})
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // no event: the lists stand
	}))
	t.Cleanup(api.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("current-context: c\nclusters: [{name: k, cluster: {server: \""+api.URL+"\"}}]\n"+
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u, namespace: default}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Discovery = dataplane.DiscoveryK8s
		c.K8s.Service, c.K8s.PortName, c.K8s.Kubeconfig = "vllm", "http", kubeconfig
		c.K8s.ModelSelectors = []string{"llama3=" + modelSel}
	})
	pins := func() string {
		var out []string
		for _, bi := range s.backends(t) {
			out = append(out, bi.Name+"="+strings.Join(bi.Models, " ")+"("+bi.ModelsState+")")
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	waitFor(t, func() bool { return pins() == "pod-a=llama3(pinned),pod-b=llama3(pinned)" })
	for range 2 {
		if got := s.chat(t, chatJSON(false, "user", "hello")); got.status != 200 {
			t.Fatalf("chat for llama3: %d %s", got.status, got.body)
		}
	}
	if a.calls.Load()+b.calls.Load() != 2 {
		t.Errorf("a answered %d, b %d; want 2 in all", a.calls.Load(), b.calls.Load())
	}
	st := s.adm(t, "GET", "/admin/discovery", "")
	var list []map[string]any
	if err := json.Unmarshal([]byte(st.body), &list); st.status != 200 || err != nil || len(list) != 2 ||
		list[0]["service"] != "vllm" || list[1]["model"] != "llama3" || list[1]["selector"] != modelSel {
		t.Errorf("/admin/discovery: %d %v %s", st.status, err, st.body)
	}
	if m := s.adm(t, "GET", "/metrics", "").body; !strings.Contains(m, `saltus_discovery_k8s_endpoints{model="llama3",selector="app=engine,tier=gpu",state="ready"} 2`) {
		t.Errorf("/metrics lacks the selector's ready endpoints:\n%s", m)
	}
}
