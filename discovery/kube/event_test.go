package kube

import (
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
)

// checkName is backend.CheckName's rule (this package does not import
// the backend set): Target.Name must pass it.
func checkName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	rest, ok := strings.CutPrefix(name, "backend-")
	return !ok || rest == "" || strings.Trim(rest, "0123456789") != ""
}

func TestBackendName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("vllm-llama-70b-", 8) // 120 characters
	for _, tc := range []struct{ in, want string }{
		{"pod-a", "pod-a"},
		{"vllm-0.vllm.ns1.svc", "vllm-0.vllm.ns1.svc"},
		{"fd00::1", "fd00--1"},
		{"backend-7", "backend-7.ns1"},
		{"backend:7", "backend-7.ns1"},
		{"backend-x7", "backend-x7"},
	} {
		if got := backendName(tc.in, "ns1"); got != tc.want || !checkName(got) {
			t.Errorf("backendName(%q) = %q, want %q (valid: %v)", tc.in, got, tc.want, checkName(got))
		}
	}
	a, b := backendName(long, "ns1"), backendName(long+"x", "ns1")
	if len(a) != 64 || !checkName(a) || a == b || !strings.HasPrefix(a, long[:55]) || a != backendName(long, "ns1") {
		t.Errorf("long names: %q, %q: want 64 characters, distinct, stable", a, b)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	tru, fls := true, false
	str := func(s string) *string { return &s }
	p32 := func(n int32) *int32 { return &n }
	e := func(addr string, ready, term *bool) endpoint {
		var x endpoint
		x.Addresses = []string{addr}
		x.Conditions.Ready, x.Conditions.Terminating = ready, term
		return x
	}
	withHost := e("10.0.0.7", nil, nil)
	withHost.Hostname = str("vllm-0")
	withNode := e("10.0.0.8", &tru, &fls)
	withNode.TargetRef = &struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	}{"Node", "node-1"}
	s := &endpointSlice{
		AddressType: "IPv4",
		Ports:       []endpointPort{{Name: str("udp"), Port: p32(53), Protocol: str("UDP")}, {Name: str("http"), Port: p32(8000)}},
		Endpoints: []endpoint{
			e("10.0.0.1", &tru, &fls),
			e("10.0.0.2", nil, nil),    // ready unknown: ready
			e("10.0.0.3", &fls, nil),   // not ready
			e("10.0.0.4", &tru, &tru),  // terminating, even if ready
			e("10.0.0.5", &fls, &tru),  // terminating
			e("fd00::1", &tru, nil),    // IPv6 in an IPv4 slice: unusable
			e("10.0.0.256", &tru, nil), // bad address
			{},                         // no address
			withHost,                   // named by its hostname
			withNode,                   // a non-Pod targetRef: named by its address
		},
	}
	v := summarize(s, "", "ns1")
	want := "10.0.0.1=http://10.0.0.1:8000,10.0.0.2=http://10.0.0.2:8000,vllm-0=http://10.0.0.7:8000,10.0.0.8=http://10.0.0.8:8000"
	if got := targets(v.targets); got != want || v.counts != [numStates]int{4, 1, 2, 3} {
		t.Errorf("got %s %v\nwant %s [4 1 2 3]", got, v.counts, want)
	}
	if v := summarize(s, "grpc", "ns1"); len(v.targets) != 0 || v.counts[stUnusable] != 7 {
		t.Errorf("a missing port: %v %v", v.targets, v.counts)
	}
	s.Ports = []endpointPort{{Port: nil}} // "all ports": nothing to dial
	if v := summarize(s, "", "ns1"); len(v.targets) != 0 {
		t.Errorf("a nil port: %v", v.targets)
	}

	fqdn := &endpointSlice{AddressType: "FQDN", Ports: []endpointPort{{Port: p32(80)}},
		Endpoints: []endpoint{e("vllm.example.com.", nil, nil), e("bad_host!", nil, nil)}}
	if got := targets(summarize(fqdn, "", "ns1").targets); got != "vllm.example.com.=http://vllm.example.com:80" {
		t.Errorf("FQDN: %s", got)
	}
	v6 := &endpointSlice{AddressType: "IPv6", Ports: []endpointPort{{Port: p32(8000)}},
		Endpoints: []endpoint{e("FD00:0:0::0001", nil, nil), e("10.0.0.1", nil, nil), e("fe80::1%eth0", nil, nil)}}
	if got := targets(summarize(v6, "", "ns1").targets); got != "FD00-0-0--0001=http://[fd00::1]:8000" {
		t.Errorf("IPv6: %s", got)
	}
}

func TestMergeTargets(t *testing.T) {
	t.Parallel()
	got := mergeTargets(map[string]sliceView{
		"v4":  {targets: []Target{{Name: "pod-b", URL: "http://10.0.0.2:80"}, {Name: "pod-a", URL: "http://10.0.0.1:80"}}},
		"v6":  {targets: []Target{{Name: "pod-a", URL: "http://[fd00::1]:80"}, {Name: "pod-c", URL: "http://[fd00::3]:80"}}},
		"dup": {targets: []Target{{Name: "pod-b", URL: "http://10.0.0.2:80"}, {Name: "10.0.0.1", URL: "http://10.0.0.1:80"}}},
	})
	// One target per URL first (10.0.0.1 under two names keeps the
	// smaller name), then one per name (pod-a is left its IPv6 address).
	if want := "10.0.0.1=http://10.0.0.1:80,pod-a=http://[fd00::1]:80,pod-b=http://10.0.0.2:80,pod-c=http://[fd00::3]:80"; targets(got) != want {
		t.Errorf("got %s\nwant %s", targets(got), want)
	}
	// The dual-stack case alone: one target, the IPv4 address.
	got = mergeTargets(map[string]sliceView{
		"v4": {targets: []Target{{Name: "pod-a", URL: "http://10.0.0.1:80"}}},
		"v6": {targets: []Target{{Name: "pod-a", URL: "http://[fd00::1]:80"}}},
	})
	if targets(got) != "pod-a=http://10.0.0.1:80" {
		t.Errorf("dual stack: %s", targets(got))
	}
	if got := mergeTargets(nil); got == nil || len(got) != 0 {
		t.Errorf("empty: %#v", got)
	}
}

func TestLineReader(t *testing.T) {
	t.Parallel()
	const max = 64 << 10
	long := strings.Repeat("a", 100<<10) // over bufio's 64 KiB buffer, over max
	fits := strings.Repeat("b", max)
	read := func(in string) ([]string, error) {
		lr := newLineReader(iotest.OneByteReader(strings.NewReader(in)), max)
		var out []string
		for {
			l, err := lr.next()
			if err != nil {
				return out, err
			}
			out = append(out, string(l))
		}
	}
	lines, err := read("one\n\ntwo\n" + fits + "\nthree\n")
	if err != io.EOF || len(lines) != 5 || lines[0] != "one" || lines[1] != "" || lines[3] != fits || lines[4] != "three" {
		t.Errorf("lines %d, err %v", len(lines), err)
	}
	if lines, err := read("one\n" + long + "\nthree\n"); !errors.Is(err, errLineTooLong) || len(lines) != 1 {
		t.Errorf("a long line: %d lines, %v", len(lines), err)
	}
	if lines, err := read("one\ntw"); err != io.ErrUnexpectedEOF || len(lines) != 1 {
		t.Errorf("a cut line: %d lines, %v", len(lines), err)
	}
}

func TestDecodeEvent(t *testing.T) {
	t.Parallel()
	ev, err := decodeEvent([]byte(mustJSON(map[string]any{"type": "MODIFIED", "object": slice("s1", "42", "IPv4", httpPort, ep("10.0.0.1", "p", "ready"))})))
	if err != nil || ev.typ != evModified || ev.rv != "42" || ev.slice.Metadata.Name != "s1" || len(ev.slice.Endpoints) != 1 {
		t.Errorf("MODIFIED: %+v, %v", ev, err)
	}
	ev, err = decodeEvent([]byte(`{"type":"BOOKMARK","object":{"kind":"EndpointSlice","metadata":{"resourceVersion":"77","annotations":{"k8s.io/initial-events-end":"true"}}}}`))
	if err != nil || ev.typ != evBookmark || ev.rv != "77" || ev.slice != nil {
		t.Errorf("BOOKMARK: %+v, %v", ev, err)
	}
	ev, err = decodeEvent([]byte(`{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}`))
	if err != nil || ev.typ != evError || !ev.status.gone() || ev.status.Message != "too old" {
		t.Errorf("ERROR: %+v, %v", ev, err)
	}
	for _, bad := range []string{
		``, `null`, `{}`, `[]`, `{"type":"ADDED"}`, `{"type":"ADDED","object":null}`, `{"type":"ADDED","object":"x"}`,
		`{"type":"ADDED","object":{"metadata":{"name":"a"}}}`,              // no resourceVersion
		`{"type":"DELETED","object":{"metadata":{"resourceVersion":"1"}}}`, // no name
		`{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"},"ports":[{"port":70000000000}]}}`,
		`{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"},"endpoints":[{"conditions":{"ready":"yes"}}]}}`,
		`{"type":"BOOKMARK","object":{}}`,
		`{"type":"ERROR","object":{"code":"410"}}`,
		`{"type":"added","object":{}}`,
	} {
		if _, err := decodeEvent([]byte(bad)); err == nil {
			t.Errorf("decodeEvent(%s) accepted it", bad)
		}
	}
}

// FuzzDecodeEvent: no input crashes the decoder, and what it accepts
// summarizes to targets with valid URLs and backend names.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(mustJSON(map[string]any{"type": "ADDED", "object": slice("s1", "1", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready"), ep("10.0.0.2", "", "unknown"))}))
	f.Add(mustJSON(map[string]any{"type": "MODIFIED", "object": slice("s1", "2", "IPv6", []map[string]any{port("", 8000)}, ep("fd00::1", "", "ready"))}))
	f.Add(mustJSON(map[string]any{"type": "DELETED", "object": slice("s1", "3", "FQDN", httpPort, ep("a.b.c", "pod-b", "terminating"))}))
	f.Add(`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}`)
	f.Add(`{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}`)
	f.Add(`{"type":"ADDED","object":{"metadata":{"name":"x","resourceVersion":"1"},"addressType":"IPv4","ports":[{"port":1}],"endpoints":[{"addresses":["1.2.3.4"],"hostname":"backend-1"}]}}`)
	f.Fuzz(func(t *testing.T, line string) {
		ev, err := decodeEvent([]byte(line))
		if err != nil {
			return
		}
		switch {
		case ev.typ < 0 || ev.typ >= numEventTypes:
			t.Fatalf("type %d", ev.typ)
		case ev.typ == evError:
			if ev.status == nil {
				t.Fatal("ERROR without a status")
			}
			return
		case ev.rv == "":
			t.Fatal("no resourceVersion")
		case ev.typ == evBookmark:
			return
		case ev.slice == nil || ev.slice.Metadata.Name == "":
			t.Fatal("no slice name")
		}
		for _, pn := range []string{"", "http"} {
			v := summarize(ev.slice, pn, "ns1")
			sum := 0
			for _, c := range v.counts {
				sum += c
			}
			if v.counts[stReady] != len(v.targets) || sum != len(ev.slice.Endpoints) {
				t.Fatalf("counts %v for %d targets of %d endpoints", v.counts, len(v.targets), len(ev.slice.Endpoints))
			}
			for _, tg := range mergeTargets(map[string]sliceView{"s": v}) {
				u, err := url.Parse(tg.URL)
				if err != nil || u.Scheme != "http" || u.Hostname() == "" || u.Port() == "" || u.Path != "" {
					t.Fatalf("target URL %q: %v", tg.URL, err)
				}
				if !checkName(tg.Name) {
					t.Fatalf("target name %q is not a backend name", tg.Name)
				}
			}
		}
		if _, err := json.Marshal(ev.slice); err != nil {
			t.Fatal(err)
		}
	})
}
