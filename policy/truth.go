package policy

import "github.com/saltus-lb/saltus/tree"

// Engine truth (issue 31, item 2): for a backend whose engine's KV events
// feed the route table (View.Evented, Backend.Evented: its exact view is
// live, shard/kvview.go), what the engine confirmed supersedes what saltus
// learned by routing there. A learned holder is a guess: right when the
// engine stores the request's blocks, wrong when it does not (a streamed
// request whose head came and which was cancelled while the engine still
// queued it: a pending route is removed only when no 2xx came; a route
// restored from the saved table or received from a peer while the
// engine's cache changed; a request in flight longer than the bridge),
// and a wrong guess would attract its prefix until the route TTL. So the held blocks a decision uses
// (prefix: cost.go's held; ranvier: decide.go's deepest holder) are, for
// an evented backend, the depth its engine confirmed (tree.Hit.Confirmed),
// or the depth of its deepest holder if routing refreshed that holder
// within the bridge (Config.Bridge: shard.Config.KVEventsBridge): the guess bridges only the
// time between routing a request and the engine's BlockStored for it,
// during which the requests that follow a pending route still meet it.
// A backend without events is decided as before.
//
// Only keys of token ids can be confirmed: a request keyed (in part) by
// byte blocks (no tokenizer, or past the tokenizer's budget) has keys no
// engine's events carry, so beyond its token-keyed lead (shard's job.exact) the
// guess is all there is: a holder confirmed over the whole lead keeps
// its deeper guess, as a backend without events would.

// Truth cuts, in place, the Blocks of the hits of evented backends to
// what their engine confirmed, where their deeper guess is older than
// the bridge. exact is how many leading keys of the request are keyed by
// token ids; now is the clock hits were matched at. It returns how many
// hits it cut (shard counts them in saltus_kvview_guesses_ignored_total).
// Loop only: hits and bs are the deciding loop's.
func (p Config) Truth(bs []View, hits []tree.Hit, exact int, now int64) (cut int) {
	for k := range hits {
		h := &hits[k]
		if h.Confirmed >= h.Blocks || now-h.Used < p.Bridge || h.Confirmed >= exact {
			continue // nothing to cut, a fresh guess, or nothing it could confirm
		}
		if i := indexOf(bs, h.Backend); i < 0 || !bs[i].Evented {
			continue
		}
		h.Blocks = h.Confirmed
		cut++
	}
	return cut
}
