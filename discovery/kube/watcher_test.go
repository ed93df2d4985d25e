package kube

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestListAndWatch: the first list's ready endpoints (not-ready and
// terminating ones left out, unknown readiness counted ready, duplicates
// across slices merged), then ADDED, MODIFIED, DELETED and BOOKMARK
// events, an event that changes nothing (no update), and a watch the
// server ends, resumed from the last resourceVersion.
func TestListAndWatch(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	r := start(t, testConfig(t, f))

	l := f.nextList(t)
	if got, want := l.r.URL.Path, "/apis/discovery.k8s.io/v1/namespaces/ns1/endpointslices"; got != want {
		t.Errorf("list path %q, want %q", got, want)
	}
	if got := l.query.Get("labelSelector"); got != "kubernetes.io/service-name=vllm" {
		t.Errorf("labelSelector %q", got)
	}
	if got := l.r.Header.Get("Authorization"); got != "Bearer tok1" {
		t.Errorf("Authorization %q, want the service account's token", got)
	}
	l.list("100",
		slice("vllm-a", "90", "IPv4", httpPort,
			ep("10.0.0.1", "pod-a", "ready"), ep("10.0.0.2", "pod-b", "notready"), ep("10.0.0.3", "pod-c", "terminating")),
		slice("vllm-b", "95", "IPv4", httpPort,
			ep("10.0.0.4", "pod-d", "unknown"), ep("10.0.0.1", "pod-a", "ready")),
		slice("vllm-c", "99", "IPv6", httpPort, ep("fd00::5", "pod-e", "ready")),
	)
	if got, want := targets(r.update(t)), "pod-a=http://10.0.0.1:8000,pod-d=http://10.0.0.4:8000,pod-e=http://[fd00::5]:8000"; got != want {
		t.Fatalf("first set:\n got %s\nwant %s", got, want)
	}

	w := f.nextWatch(t, "100")
	for k, v := range map[string]string{"allowWatchBookmarks": "true", "timeoutSeconds": "60", "labelSelector": "kubernetes.io/service-name=vllm"} {
		if got := w.query.Get(k); got != v {
			t.Errorf("watch %s=%q, want %q", k, got, v)
		}
	}
	s := w.stream()
	s.event(t, "ADDED", slice("vllm-d", "101", "IPv4", httpPort, ep("10.0.0.6", "pod-f", "ready")))
	if got, want := targets(r.update(t)), "pod-a=http://10.0.0.1:8000,pod-d=http://10.0.0.4:8000,pod-e=http://[fd00::5]:8000,pod-f=http://10.0.0.6:8000"; got != want {
		t.Fatalf("after ADDED:\n got %s\nwant %s", got, want)
	}
	s.event(t, "MODIFIED", slice("vllm-a", "102", "IPv4", httpPort,
		ep("10.0.0.1", "pod-a", "ready"), ep("10.0.0.2", "pod-b", "ready"), ep("10.0.0.3", "pod-c", "terminating")))
	if got, want := targets(r.update(t)), "pod-a=http://10.0.0.1:8000,pod-b=http://10.0.0.2:8000,pod-d=http://10.0.0.4:8000,pod-e=http://[fd00::5]:8000,pod-f=http://10.0.0.6:8000"; got != want {
		t.Fatalf("after MODIFIED:\n got %s\nwant %s", got, want)
	}
	s.event(t, "DELETED", slice("vllm-c", "103", "IPv6", httpPort, ep("fd00::5", "pod-e", "ready")))
	if got, want := targets(r.update(t)), "pod-a=http://10.0.0.1:8000,pod-b=http://10.0.0.2:8000,pod-d=http://10.0.0.4:8000,pod-f=http://10.0.0.6:8000"; got != want {
		t.Fatalf("after DELETED:\n got %s\nwant %s", got, want)
	}
	s.event(t, "BOOKMARK", bookmark("150"))
	// pod-c gone from vllm-a: the ready set is the same, so no update.
	s.event(t, "MODIFIED", slice("vllm-a", "151", "IPv4", httpPort,
		ep("10.0.0.1", "pod-a", "ready"), ep("10.0.0.2", "pod-b", "ready")))
	close(s.end)

	w = f.nextWatch(t, "151") // resumed from the last event's resourceVersion
	r.noUpdate(t)
	st := r.status()
	if st.Connected || st.ResourceVersion != "151" || st.Slices != 3 || st.Endpoints.Ready != 4 || st.Endpoints.Terminating != 0 ||
		st.Lists != 1 || st.Namespace != testNS || st.Source != "in-cluster" || st.LastEventTime.IsZero() {
		t.Errorf("status while reconnecting: %+v", st)
	}
	if _, err := json.Marshal(r.w.Status()); err != nil {
		t.Errorf("Status does not marshal: %v", err)
	}
	for name, want := range map[string]float64{
		`saltus_discovery_k8s_events_total{type="added"}`:    1,
		`saltus_discovery_k8s_events_total{type="modified"}`: 2,
		`saltus_discovery_k8s_events_total{type="deleted"}`:  1,
		`saltus_discovery_k8s_events_total{type="bookmark"}`: 1,
		`saltus_discovery_k8s_updates_total`:                 4,
		`saltus_discovery_k8s_endpoints{state="ready"}`:      4,
		`saltus_discovery_k8s_endpoints{state="not_ready"}`:  0,
		`saltus_discovery_k8s_connected`:                     0,
		`saltus_discovery_k8s_relists_total{reason="gone"}`:  0,
		`saltus_discovery_k8s_errors_total{reason="decode"}`: 0,
	} {
		if got := r.metric(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	// Connected once the watch's head arrived: the next event shows it.
	s = w.stream()
	s.event(t, "ADDED", slice("vllm-e", "152", "IPv4", httpPort, ep("10.0.0.9", "pod-g", "ready")))
	r.update(t)
	if !r.status().Connected || r.metric("saltus_discovery_k8s_connected") != 1 {
		t.Errorf("not connected during a watch: %+v", r.status())
	}
}

// TestEmptyListUpdates: the first list calls update even when the
// Service has no endpoint.
func TestEmptyListUpdates(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	r := start(t, testConfig(t, f))
	f.nextList(t).list("7")
	if got := r.update(t); got == nil || len(got) != 0 {
		t.Fatalf("first update %#v, want an empty, non-nil set", got)
	}
	f.nextWatch(t, "7")
}

// TestDisconnectResumes: a watch cut inside an event is resumed from the
// last whole event's resourceVersion, without a list, and the cut event
// is not applied.
func TestDisconnectResumes(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	r := start(t, testConfig(t, f))
	f.nextList(t).list("10", slice("vllm-a", "9", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready")))
	r.update(t)
	s := f.nextWatch(t, "10").stream()
	s.event(t, "ADDED", slice("vllm-b", "11", "IPv4", httpPort, ep("10.0.0.2", "pod-b", "ready")))
	if got := targets(r.update(t)); got != "pod-a=http://10.0.0.1:8000,pod-b=http://10.0.0.2:8000" {
		t.Fatalf("after ADDED: %s", got)
	}
	s.send(t, `{"type":"ADDED","object":{"metadata":{"name":"vllm-c","resourceVersion":"12"`) // no end
	close(s.abort)

	s = f.nextWatch(t, "11").stream()
	if got := r.metric(`saltus_discovery_k8s_errors_total{reason="disconnected"}`); got != 1 {
		t.Errorf("disconnected errors %v, want 1", got)
	}
	if got := r.metric(`saltus_discovery_k8s_relists_total{reason="error"}`); got != 0 {
		t.Errorf("relists %v, want 0: a disconnect resumes the watch", got)
	}
	if st := r.status(); !strings.Contains(st.LastError, "watch broke") || st.LastErrorTime.IsZero() {
		t.Errorf("status' last error %q", st.LastError)
	}
	s.event(t, "DELETED", slice("vllm-a", "13", "IPv4", httpPort))
	if got := targets(r.update(t)); got != "pod-b=http://10.0.0.2:8000" {
		t.Fatalf("after DELETED: %s", got)
	}
}

// TestGoneRelists: a 410 answer to the watch and an ERROR event with
// code 410 both make the watcher list again, and the new list replaces
// the set.
func TestGoneRelists(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	r := start(t, testConfig(t, f))
	f.nextList(t).list("10", slice("vllm-a", "9", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready")))
	r.update(t)

	f.nextWatch(t, "10").json(http.StatusGone, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 10 (500)","reason":"Expired","code":410}`)
	f.nextList(t).list("600", slice("vllm-a", "590", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready"), ep("10.0.0.2", "pod-b", "ready")))
	if got := targets(r.update(t)); got != "pod-a=http://10.0.0.1:8000,pod-b=http://10.0.0.2:8000" {
		t.Fatalf("after the relist: %s", got)
	}
	s := f.nextWatch(t, "600").stream()
	s.event(t, "ERROR", map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old resource version: 600 (700)", "reason": "Expired", "code": 410})
	f.nextList(t).list("700") // every slice gone
	if got := r.update(t); len(got) != 0 {
		t.Fatalf("after the second relist: %v, want none", got)
	}
	f.nextWatch(t, "700")
	if got := r.metric(`saltus_discovery_k8s_relists_total{reason="gone"}`); got != 2 {
		t.Errorf("gone relists %v, want 2", got)
	}
	if got := r.metric(`saltus_discovery_k8s_events_total{type="error"}`); got != 1 {
		t.Errorf("error events %v, want 1", got)
	}
	if got := r.metric(`saltus_discovery_k8s_errors_total{reason="status"}`); got != 0 {
		t.Errorf("status errors %v, want 0: a 410 is a relist", got)
	}
	if st := r.status(); st.Lists != 3 || st.ResourceVersion != "700" {
		t.Errorf("status %+v", st)
	}
}

// TestBadServer: whatever a broken server sends, the watcher counts it,
// backs off and lists again (or retries the list), never crashes, and
// never hands over a set other than the last good one.
func TestBadServer(t *testing.T) {
	t.Parallel()
	good := func(rv string) []map[string]any {
		return []map[string]any{slice("vllm-a", rv, "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready"))}
	}
	huge := strings.Repeat("x", 70<<10) // over the 64 KiB MaxResponseBytes below
	stall := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		http.NewResponseController(w).Flush() // the head, then nothing
		<-r.Context().Done()
	}
	cases := []struct {
		name   string
		list   func(*apiReq)             // answers the first list (nil: a good one)
		watch  func(*testing.T, *apiReq) // answers the first watch
		reason string                    // the errors_total reason counted
		relist bool                      // a list follows (else a watch from the same resourceVersion)
		tune   func(*Config)
		text   string // in the status' last error
	}{
		{name: "list bad JSON", list: func(r *apiReq) { r.json(200, `{"metadata":{"resourceVersion":"5"},"items":[{`) }, reason: "decode", relist: true},
		{name: "list not an object", list: func(r *apiReq) { r.json(200, `[1,2,3]`) }, reason: "decode", relist: true},
		{name: "list without resourceVersion", list: func(r *apiReq) { r.json(200, `{"items":[]}`) }, reason: "decode", relist: true},
		{name: "list huge", list: func(r *apiReq) { r.json(200, `{"metadata":{"resourceVersion":"5","x":"`+huge+`"},"items":[]}`) }, reason: "too_large", relist: true},
		{name: "list 500", list: func(r *apiReq) { r.json(500, `{"kind":"Status","message":"etcdserver: leader changed","code":500}`) }, reason: "status", relist: true,
			text: "list endpointslices of service ns1/vllm: HTTP 500 Internal Server Error: etcdserver: leader changed"},
		{name: "list stalls", list: func(r *apiReq) { r.respond(stall) }, reason: "stalled", relist: true},
		{name: "watch bad JSON", watch: func(t *testing.T, r *apiReq) { r.stream().send(t, "{\"type\":\"ADDED\",\"object\":{]}\n") }, reason: "decode", relist: true},
		{name: "watch unknown type", watch: func(t *testing.T, r *apiReq) { r.stream().send(t, `{"type":"SURPRISE","object":{}}`+"\n") }, reason: "decode", relist: true},
		{name: "watch slice without name", watch: func(t *testing.T, r *apiReq) {
			r.stream().event(t, "ADDED", map[string]any{"metadata": map[string]any{"resourceVersion": "6"}})
		}, reason: "decode", relist: true},
		{name: "watch huge event", watch: func(t *testing.T, r *apiReq) {
			r.stream().send(t, `{"type":"ADDED","object":{"metadata":{"name":"x","resourceVersion":"6","annotations":{"a":"`+huge+`"}}}}`+"\n")
		}, reason: "too_large", relist: true},
		{name: "watch error event", watch: func(t *testing.T, r *apiReq) {
			r.stream().event(t, "ERROR", map[string]any{"kind": "Status", "code": 500, "reason": "InternalError", "message": "boom"})
		}, reason: "watch_error", relist: true},
		{name: "watch 403", watch: func(t *testing.T, r *apiReq) {
			r.json(403, `{"kind":"Status","message":"endpointslices.discovery.k8s.io is forbidden","reason":"Forbidden","code":403}`)
		}, reason: "status", text: "HTTP 403 Forbidden: endpointslices.discovery.k8s.io is forbidden (saltus needs get, list and watch on endpointslices.discovery.k8s.io in namespace ns1"},
		{name: "watch stalls", watch: func(t *testing.T, r *apiReq) { r.respond(stall) }, reason: "stalled"},
		{name: "list no head", list: func(r *apiReq) {}, reason: "request", relist: true,
			tune: func(c *Config) { c.HeaderTimeout = 500 * time.Millisecond }},
		{name: "watch no head", watch: func(t *testing.T, r *apiReq) {}, reason: "request",
			tune: func(c *Config) { c.HeaderTimeout = 500 * time.Millisecond }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, true)
			cfg := testConfig(t, f)
			cfg.MaxResponseBytes = minResponseBytes
			cfg.ListTimeout = time.Second // long enough for a good list on a loaded machine
			cfg.WatchTimeout, cfg.WatchIdleMargin = time.Second, 10*time.Millisecond
			if tc.tune != nil {
				tc.tune(&cfg)
			}
			r := start(t, cfg)
			if tc.list != nil {
				tc.list(f.nextList(t))
			} else {
				f.nextList(t).list("5", good("5")...)
				if got := targets(r.update(t)); got != "pod-a=http://10.0.0.1:8000" {
					t.Fatalf("first set %s", got)
				}
				tc.watch(t, f.nextWatch(t, "5"))
			}
			if tc.relist {
				f.nextList(t).list("8", good("8")...)
			} else {
				f.nextWatch(t, "5")
			}
			if got := r.metric(`saltus_discovery_k8s_errors_total{reason="` + tc.reason + `"}`); got != 1 {
				t.Errorf("errors{reason=%q} = %v, want 1", tc.reason, got)
			}
			if st := r.status(); st.LastError == "" || !strings.Contains(st.LastError, tc.text) {
				t.Errorf("the status' last error %q, want one saying %q", st.LastError, tc.text)
			}
			if tc.list != nil { // the good list's set is the first update
				if got := targets(r.update(t)); got != "pod-a=http://10.0.0.1:8000" {
					t.Fatalf("set after the good list %s", got)
				}
			}
			if tc.relist {
				f.nextWatch(t, "8")
			}
			r.noUpdate(t) // the same set: no second update
		})
	}
}

// TestNamedPort: PortName picks the port of that name; without it, the
// slice's first port; a slice without the named port gives no target.
func TestNamedPort(t *testing.T) {
	t.Parallel()
	ports := []map[string]any{port("metrics", 9090), port("http", 8000)}
	for _, tc := range []struct{ portName, want string }{
		{"http", "pod-a=http://10.0.0.1:8000"},
		{"", "pod-a=http://10.0.0.1:9090,pod-b=http://10.0.0.2:7000"},
	} {
		t.Run("port="+tc.portName, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, true)
			cfg := testConfig(t, f)
			cfg.PortName = tc.portName
			r := start(t, cfg)
			f.nextList(t).list("3",
				slice("vllm-a", "1", "IPv4", ports, ep("10.0.0.1", "pod-a", "ready")),
				slice("vllm-b", "2", "IPv4", []map[string]any{port("grpc", 7000)}, ep("10.0.0.2", "pod-b", "ready")))
			if got := targets(r.update(t)); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
			want := 0.0
			if tc.portName != "" {
				want = 1
			}
			if got := r.metric(`saltus_discovery_k8s_endpoints{state="unusable"}`); got != want {
				t.Errorf("unusable endpoints %v, want %v", got, want)
			}
		})
	}
}

// TestMaxSlices: a slice over MaxSlices is ignored, counted, in a list
// and in a watch; a known slice still updates.
func TestMaxSlices(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	cfg := testConfig(t, f)
	cfg.MaxSlices = 1
	r := start(t, cfg)
	f.nextList(t).list("3",
		slice("vllm-b", "2", "IPv4", httpPort, ep("10.0.0.2", "pod-b", "ready")),
		slice("vllm-a", "1", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready")))
	if got := targets(r.update(t)); got != "pod-a=http://10.0.0.1:8000" { // the first by name
		t.Fatalf("got %s", got)
	}
	s := f.nextWatch(t, "3").stream()
	s.event(t, "ADDED", slice("vllm-c", "4", "IPv4", httpPort, ep("10.0.0.3", "pod-c", "ready")))
	s.event(t, "MODIFIED", slice("vllm-a", "5", "IPv4", httpPort, ep("10.0.0.4", "pod-a", "ready")))
	if got := targets(r.update(t)); got != "pod-a=http://10.0.0.4:8000" {
		t.Fatalf("got %s", got)
	}
	if got := r.metric(`saltus_discovery_k8s_errors_total{reason="too_many_slices"}`); got != 2 {
		t.Errorf("too_many_slices %v, want 2", got)
	}
}

// TestForeignSlice: a slice without the Service's label (a server that
// ignores the selector) is not the Service's; one that loses the label
// leaves.
func TestForeignSlice(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	r := start(t, testConfig(t, f))
	other := slice("other-a", "1", "IPv4", httpPort, ep("10.9.9.9", "x", "ready"))
	other["metadata"].(map[string]any)["labels"] = map[string]any{serviceLabel: "other"}
	f.nextList(t).list("3", other, slice("vllm-a", "2", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready")))
	if got := targets(r.update(t)); got != "pod-a=http://10.0.0.1:8000" {
		t.Fatalf("got %s", got)
	}
	s := f.nextWatch(t, "3").stream()
	moved := slice("vllm-a", "4", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready"))
	moved["metadata"].(map[string]any)["labels"] = map[string]any{}
	s.event(t, "MODIFIED", moved)
	if got := r.update(t); len(got) != 0 {
		t.Fatalf("got %v, want none", got)
	}
}

// TestTokenRotation: the service account token is read on every
// request, so a token the kubelet rotated is used from the next one.
func TestTokenRotation(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	cfg := testConfig(t, f)
	r := start(t, cfg)
	l := f.nextList(t)
	if got := l.r.Header.Get("Authorization"); got != "Bearer tok1" {
		t.Fatalf("Authorization %q", got)
	}
	l.list("3")
	r.update(t)
	w := f.nextWatch(t, "3")
	writeFile(t, cfg.inClusterDir+"/token", "tok2\n")
	s := w.stream()
	s.event(t, "BOOKMARK", bookmark("4"))
	close(s.end)
	if got := f.nextWatch(t, "4").r.Header.Get("Authorization"); got != "Bearer tok2" {
		t.Fatalf("after rotation Authorization %q, want Bearer tok2", got)
	}
}

// TestUntrustedServer: a server whose certificate the CA does not sign
// is refused (TLS verification is on), counted, retried.
func TestUntrustedServer(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	cfg := testConfig(t, f)
	ca, _ := genCert(t, "another-ca")
	writeFile(t, cfg.inClusterDir+"/ca.crt", string(ca))
	r := start(t, cfg)
	// No request reaches the handler (the handshake fails); wait for the
	// counter, the only event there is.
	deadline := time.Now().Add(waitFor)
	for r.metric(`saltus_discovery_k8s_errors_total{reason="request"}`) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no failed request counted")
		}
		time.Sleep(time.Millisecond) // polling: no event to wait for
	}
	if st := r.status(); !strings.Contains(st.LastError, "certificate") {
		t.Errorf("last error %q does not name the certificate", st.LastError)
	}
	r.noUpdate(t)
}
