package shard

import "github.com/saltus-lb/saltus/internal/promtext"

// Engine truth (issue 31, item 2): the rule is policy.Config.Truth
// (policy/truth.go); the Router applies it to the owner's hits before each
// tree decision (job.lookup) and counts what it cut here.

func init() {
	promtext.Describe(map[string]string{
		"saltus_kvview_guesses_ignored_total": "Routing decisions' holders whose blocks were cut to what the engine confirmed through its KV events: a backend with a live exact view held a deeper learned guess, not refreshed within --kv-events-bridge (counted once per backend per decision; Explain not counted).",
	})
}
