package main

// End-to-end test of the admin listener of a running serve (see
// serve_e2e_test.go for the harness).

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/admin"
)

// TestServeAdminAPI drives the admin listener of a running serve: auth,
// probes, the backend list (add, drain, delete, each seen by routing),
// the route table's statistics, explain and /metrics.
func TestServeAdminAPI(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	ups := []*upstream{newUpstream(t, "a"), newUpstream(t, "b")}
	added := newUpstream(t, "c")
	all := append(slices.Clone(ups), added)
	s := startServeWith(t, ups, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Admin.BearerToken = token
	})
	byURL := func(url string) *upstream {
		for _, u := range all {
			if u.srv.URL == url {
				return u
			}
		}
		t.Fatalf("no upstream %q", url)
		return nil
	}
	calls := func() (n []int64) {
		for _, u := range all {
			n = append(n, u.calls.Load())
		}
		return n
	}

	// Auth: every endpoint but /health needs the token; without it (or
	// with a wrong one) nothing is done.
	unauthorized := 0
	for _, r := range [][2]string{
		{"GET", "/metrics"}, {"GET", "/ready"}, {"GET", "/admin/backends"}, {"POST", "/admin/backends"},
		{"POST", "/admin/backends/0/drain"}, {"DELETE", "/admin/backends/0"}, {"GET", "/admin/routes"},
		{"POST", "/admin/explain"}, {"GET", "/admin/nope"},
	} {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", token}} {
			a := do(t, r[0], "http://"+s.admin+r[1], `{"url":"`+added.srv.URL+`"}`, hdr...)
			unauthorized++
			if a.status != 401 || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), `Bearer realm="saltus-admin"`) {
				t.Errorf("%s %s with %q: %d (WWW-Authenticate %q), want 401", r[0], r[1], hdr, a.status, a.header.Get("WWW-Authenticate"))
			}
			errorOf(t, a.body)
		}
	}
	if a := do(t, "GET", "http://"+s.admin+"/health", ""); a.status != 200 || a.body != "ok\n" {
		t.Errorf("/health without the token: %d %q", a.status, a.body)
	}
	if a := s.adm(t, "GET", "/ready", ""); a.status != 200 || a.body != "ok\n" {
		t.Errorf("/ready: %d %q", a.status, a.body)
	}
	list := s.backends(t)
	if len(list) != 2 || list[0].URL != ups[0].srv.URL || list[1].URL != ups[1].srv.URL {
		t.Fatalf("backends after unauthorized calls: %+v", list)
	}
	for _, b := range list {
		if !b.Healthy || b.Draining || b.InFlight != 0 {
			t.Errorf("backend %+v: want healthy, not draining, nothing in flight", b)
		}
	}

	// Add by URL: 201, and the new backend gets requests.
	a := s.adm(t, "POST", "/admin/backends", `{"url":"`+added.srv.URL+`"}`)
	var info struct {
		ID       int    `json:"id"`
		URL      string `json:"url"`
		Draining bool   `json:"draining"`
	}
	if err := json.Unmarshal([]byte(a.body), &info); a.status != 201 || err != nil || info.URL != added.srv.URL ||
		a.header.Get("Location") != "/admin/backends/"+strconv.Itoa(info.ID) {
		t.Fatalf("add: %d %s (Location %q)", a.status, a.body, a.header.Get("Location"))
	}
	if a := s.adm(t, "POST", "/admin/backends", `{"url":"ftp://x:1"}`); a.status != 400 {
		t.Errorf("add ftp: %d, want 400", a.status)
	}
	if list := s.backends(t); len(list) != 3 || list[2].ID != info.ID || list[2].URL != added.srv.URL {
		t.Errorf("backends after add: %+v", list)
	}
	// Prompt families hash over the three: within 40 one lands on the
	// new backend (all miss with probability (2/3)^40 < 1e-7).
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatal("no request reached the added backend")
		}
		a := s.chat(t, chatJSON(false, "system", fmt.Sprintf("Family %d. %s", i, sysB), "user", "Go."))
		if a.status != 200 {
			t.Fatalf("family %d: %d %s", i, a.status, a.body)
		}
		if a.backend == added.srv.URL {
			break
		}
	}

	// Learn a route, then explain it: the decision, nothing forwarded.
	p := chatJSON(false, "system", sysA, "user", "Which port is NLRTM?")
	first := s.chat(t, p)
	again := s.chat(t, p)
	am, at, reason := parseRoute(t, again.route)
	if first.status != 200 || again.backend != first.backend || reason != "tree" {
		t.Fatalf("learned route: %q then %q by %q", first.backend, again.backend, again.route)
	}
	home := byURL(first.backend)
	homeID := -1
	for _, b := range s.backends(t) {
		if b.URL == home.srv.URL {
			homeID = b.ID
		}
	}
	before := calls()
	a = s.adm(t, "POST", "/admin/explain", p)
	var d struct {
		Backend       int    `json:"backend"`
		URL           string `json:"url"`
		Reason        string `json:"reason"`
		MatchedBlocks int    `json:"matched_blocks"`
		TotalBlocks   int    `json:"total_blocks"`
		Candidates    []int  `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(a.body), &d); a.status != 200 || err != nil || d.Backend != homeID || d.URL != home.srv.URL ||
		d.Reason != "tree" || d.MatchedBlocks != am || d.TotalBlocks != at || len(d.Candidates) != 3 || d.Candidates[0] != homeID {
		t.Errorf("explain: %d %s; want backend %d (%s) by tree, %d/%d blocks, 3 candidates", a.status, a.body, homeID, home.srv.URL, am, at)
	}
	for _, c := range []struct{ path, body string }{
		{"/admin/explain", "{bad"},
		{"/admin/explain", `{"model":"m"}`},
		{"/admin/explain?path=/v1/embeddings", p},
		{"/admin/explain?path=/nope", p},
	} {
		if a := s.adm(t, "POST", c.path, c.body); a.status != 400 {
			t.Errorf("POST %s %s: %d %s, want 400", c.path, c.body, a.status, a.body)
		}
	}
	if after := calls(); !slices.Equal(after, before) {
		t.Errorf("explain forwarded: upstream calls %v → %v", before, after)
	}

	// The route table's statistics.
	a = s.adm(t, "GET", "/admin/routes", "")
	var rs struct {
		Blocks    int64            `json:"blocks"`
		Learned   uint64           `json:"learned"`
		Skipped   uint64           `json:"learn_skipped"` // recorded at the decision (a pending route): no learn message
		Decisions map[string]int64 `json:"decisions"`
		Shards    []struct {
			Shard int `json:"shard"`
		} `json:"shards"`
	}
	if err := json.Unmarshal([]byte(a.body), &rs); a.status != 200 || err != nil || rs.Blocks == 0 || rs.Learned+rs.Skipped < 2 ||
		rs.Decisions["tree"] < 1 || rs.Decisions["hash"] < 2 || len(rs.Shards) != 2 {
		t.Errorf("routes: %d %s", a.status, a.body)
	}

	// Drain the route's home: 202, and it gets no new request, not even
	// the prefix it holds.
	a = s.adm(t, "POST", fmt.Sprintf("/admin/backends/%d/drain", homeID), "")
	if err := json.Unmarshal([]byte(a.body), &info); a.status != 202 || err != nil || info.ID != homeID || !info.Draining {
		t.Fatalf("drain: %d %s", a.status, a.body)
	}
	homeCalls := home.calls.Load()
	if a := s.chat(t, p); a.status != 200 || a.backend == "" || a.backend == home.srv.URL {
		t.Errorf("after the drain the learned prompt went to %q (%d), the drained backend is %q", a.backend, a.status, home.srv.URL)
	}
	for i := range 20 {
		a := s.chat(t, chatJSON(false, "system", fmt.Sprintf("Drained family %d. %s", i, sysB), "user", "Go."))
		if a.status != 200 || a.backend == home.srv.URL {
			t.Fatalf("after the drain, family %d: %d from %q", i, a.status, a.backend)
		}
	}
	if n := home.calls.Load(); n != homeCalls {
		t.Errorf("the drained backend got %d more requests", n-homeCalls)
	}
	for _, b := range s.backends(t) {
		if b.Draining != (b.ID == homeID) {
			t.Errorf("after draining %d: %+v", homeID, b)
		}
	}

	// Delete it: 204, gone from the list; again: 404.
	path := fmt.Sprintf("/admin/backends/%d", homeID)
	if a := s.adm(t, "DELETE", path, ""); a.status != 204 {
		t.Errorf("delete: %d %s", a.status, a.body)
	}
	list = s.backends(t)
	if len(list) != 2 || slices.ContainsFunc(list, func(b admin.BackendInfo) bool { return b.ID == homeID }) {
		t.Errorf("backends after delete: %+v", list)
	}
	for _, c := range []struct{ method, path string }{{"DELETE", path}, {"POST", path + "/drain"}} {
		if a := s.adm(t, c.method, c.path, ""); a.status != 404 {
			t.Errorf("%s %s of a deleted backend: %d, want 404", c.method, c.path, a.status)
		}
	}
	if a := s.adm(t, "DELETE", "/admin/backends/abc", ""); a.status != 400 {
		t.Errorf("DELETE a bad id: %d, want 400", a.status)
	}

	// Draining the rest: not ready, and requests get 503.
	for _, b := range list {
		if a := s.adm(t, "POST", fmt.Sprintf("/admin/backends/%d/drain", b.ID), ""); a.status != 202 {
			t.Errorf("drain %d: %d", b.ID, a.status)
		}
	}
	if a := s.adm(t, "GET", "/ready", ""); a.status != 503 || a.body != "no routable backend\n" {
		t.Errorf("/ready with every backend draining: %d %q", a.status, a.body)
	}
	if a := s.chat(t, p); a.status != 503 || errorOf(t, a.body).Error.Code != "no_backend" {
		t.Errorf("a request with every backend draining: %d %s", a.status, a.body)
	}
	// Explain cannot decide either: the data plane's state, not the
	// request's fault.
	if a := s.adm(t, "POST", "/admin/explain", p); a.status != 503 || errorOf(t, a.body).Error.Type != "unavailable" {
		t.Errorf("explain with every backend draining: %d %s, want 503 unavailable", a.status, a.body)
	}

	// /metrics: the serving path's saltus_* series, from every package.
	m := s.metrics(t)
	for _, series := range []string{
		"saltus_reactor_requests_total", "saltus_reactor_connections_open",
		`saltus_requests_total{route="chat",code="200"}`, `saltus_route_decisions_total{reason="tree"}`,
		"saltus_route_learned_total", "saltus_tree_blocks", `saltus_reactor_mailbox_depth{loop="1"}`,
		"saltus_proxy_in_flight", `saltus_backend_in_flight{backend="` + list[0].URL + `"}`, "saltus_retries_total",
		"saltus_tokenizer_requests_total",
		`saltus_admin_requests_total{endpoint="backends",code="201"}`,
	} {
		if _, ok := m[series]; !ok {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	if m[`saltus_admin_requests_total{endpoint="backends",code="201"}`] != 1 || m[`saltus_requests_total{route="chat",code="503"}`] != 1 {
		t.Errorf("/metrics: %v backends added, %v chat 503s; want 1 each", m[`saltus_admin_requests_total{endpoint="backends",code="201"}`], m[`saltus_requests_total{route="chat",code="503"}`])
	}
	var got401 float64
	for k, v := range m {
		if strings.HasPrefix(k, "saltus_admin_requests_total{") && strings.HasSuffix(k, `code="401"}`) {
			got401 += v
		}
	}
	if got401 != float64(unauthorized) {
		t.Errorf("/metrics counts %v admin 401s, want %d", got401, unauthorized)
	}
}
