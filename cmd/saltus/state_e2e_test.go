package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStateSurvivesRestart: a serve with --state-dir learns a route,
// stops (its drain saves the table), and the next serve on the same
// directory routes the conversation to the same backend as a match of
// every block, before any request taught it.
func TestStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ups := []*upstream{newUpstream(t, "a"), newUpstream(t, "b"), newUpstream(t, "c")}
	withState := func(c *serveConfig) { c.State.Dir = dir }
	first := startServeWith(t, ups, withState)
	body := chatJSON(false, "system", sysA, "user", "Which tide table covers Antwerp?")
	ans := first.chat(t, body)
	if ans.status != 200 || ans.backend == "" {
		t.Fatalf("chat: %d %q", ans.status, ans.backend)
	}
	first.term()
	if code := first.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("first serve exited %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "routes.state")); err != nil {
		t.Fatalf("no snapshot after the drain: %v", err)
	}

	second := startServeWith(t, ups, withState)
	var d struct {
		URL           string `json:"url"`
		MatchedBlocks int    `json:"matched_blocks"`
		TotalBlocks   int    `json:"total_blocks"`
	}
	waitFor(t, func() bool {
		r := second.adm(t, "POST", "/admin/explain", body)
		if r.status != 200 || json.Unmarshal([]byte(r.body), &d) != nil {
			t.Fatalf("explain: %d %s", r.status, r.body)
		}
		return d.TotalBlocks > 0 && d.MatchedBlocks == d.TotalBlocks
	})
	if d.URL != ans.backend {
		t.Errorf("restored route names %s, the answer came from %s", d.URL, ans.backend)
	}
}
