package main

import (
	"encoding/json"
	"testing"

	"github.com/saltus-lb/saltus/gossip"
)

// TestClusterSharesRoutes: three saltus serve in a cluster on loopback,
// the third listing the backends in another order (their identity, not
// their index, names them). A conversation answered through the first
// is matched on the two others, whole, on the backend that answered.
func TestClusterSharesRoutes(t *testing.T) {
	t.Parallel()
	ups := []*upstream{newUpstream(t, "a"), newUpstream(t, "b"), newUpstream(t, "c")}
	a := startServeWith(t, ups, func(c *serveConfig) { c.Cluster.Bind = "127.0.0.1:0"; c.Cluster.NodeName = "a" })
	status := func(s *served) gossip.Status {
		t.Helper()
		r := s.adm(t, "GET", "/admin/cluster", "")
		var st gossip.Status
		if r.status != 200 || json.Unmarshal([]byte(r.body), &st) != nil {
			t.Fatalf("/admin/cluster: %d %s", r.status, r.body)
		}
		return st
	}
	seed := status(a).Addr
	b := startServeWith(t, ups, func(c *serveConfig) {
		c.Cluster.Bind, c.Cluster.NodeName, c.Cluster.Join = "127.0.0.1:0", "b", []string{seed}
	})
	reversed := []*upstream{ups[2], ups[1], ups[0]}
	c := startServeWith(t, reversed, func(c *serveConfig) {
		c.Cluster.Bind, c.Cluster.NodeName, c.Cluster.Join = "127.0.0.1:0", "c", []string{seed}
	})
	for _, s := range []*served{a, b, c} {
		waitFor(t, func() bool {
			alive := 0
			for _, m := range status(s).Members {
				if m.State == "alive" {
					alive++
				}
			}
			return alive == 3
		})
	}

	body := chatJSON(false, "system", sysA, "user", "Which port has the deepest berth?")
	ans := a.chat(t, body)
	if ans.status != 200 || ans.backend == "" {
		t.Fatalf("chat through a: %d %q %s", ans.status, ans.backend, ans.body)
	}
	for _, s := range []*served{b, c} {
		var d struct {
			URL           string `json:"url"`
			MatchedBlocks int    `json:"matched_blocks"`
			TotalBlocks   int    `json:"total_blocks"`
		}
		waitFor(t, func() bool {
			r := s.adm(t, "POST", "/admin/explain", body)
			if r.status != 200 {
				t.Fatalf("explain: %d %s", r.status, r.body)
			}
			if err := json.Unmarshal([]byte(r.body), &d); err != nil {
				t.Fatal(err)
			}
			return d.TotalBlocks > 0 && d.MatchedBlocks == d.TotalBlocks
		})
		if d.URL != ans.backend {
			t.Errorf("%s: the shared route names %s, a's answer came from %s", s.cfg.Cluster.NodeName, d.URL, ans.backend)
		}
	}
	// A router that joins later gets the route in its join's snapshot
	// (nothing is broadcast meanwhile): the push-pull's routes reach
	// its loops, which run before it joins.
	d := startServeWith(t, ups, func(c *serveConfig) {
		c.Cluster.Bind, c.Cluster.NodeName, c.Cluster.Join = "127.0.0.1:0", "d", []string{seed}
	})
	waitFor(t, func() bool {
		r := d.adm(t, "POST", "/admin/explain", body)
		var got struct {
			URL           string `json:"url"`
			MatchedBlocks int    `json:"matched_blocks"`
			TotalBlocks   int    `json:"total_blocks"`
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &got) != nil {
			t.Fatalf("explain on d: %d %s", r.status, r.body)
		}
		return got.TotalBlocks > 0 && got.MatchedBlocks == got.TotalBlocks && got.URL == ans.backend
	})
	if st := status(d); st.Routes.Snapshot.Received == 0 {
		t.Errorf("d's snapshot routes: %+v", st.Routes)
	}
	st := status(b)
	if st.Routes.Received == 0 || st.Routes.Dropped["unknown_backend"] != 0 {
		t.Errorf("b's cluster status: %+v", st.Routes)
	}
	waitFor(t, func() bool { return len(status(b).Members) == 4 })
}
