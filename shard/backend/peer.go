package backend

import (
	"hash/fnv"
	"sync/atomic"
)

// Cluster support (issue 13): a backend is named the same way on every
// router, and carries the load peer routers send it.

// identity is a backend's cluster-wide name: the name an operator gave it
// (the same config on every router names the same engine), else its
// normalized URL (scheme://host:port, which every router reaches it by).
// Routers that name one engine differently (a name on one, none on
// another) do not share its routes: configure them alike.
func identity(name, normURL string) string {
	if name != "" {
		return "name:" + name
	}
	return "url:" + normURL
}

// IdentityKey hashes an identity to the 8 bytes gossip messages carry:
// FNV-1a 64, fixed by the format so that every version agrees. Any
// goroutine.
func IdentityKey(identity string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(identity)) // hash.Hash's Write never fails
	return h.Sum64()
}

// peerLoad is the load the cluster's other routers report on a backend,
// summed over the live ones; set by the gossip goroutine, read by every
// decision.
type peerLoad struct {
	inFlight atomic.Int64
	prefill  atomic.Int64
}

// PeerLoad is the other routers' requests in flight to b and the prompt
// tokens they sent b that it has not started answering: zero without a
// cluster. Any goroutine.
func (b *Backend) PeerLoad() (inFlight, prefill int64) {
	return b.peer.inFlight.Load(), b.peer.prefill.Load()
}

// SetPeerLoad replaces the peers' load on b (the sum of their latest
// reports). Any goroutine.
func (b *Backend) SetPeerLoad(inFlight, prefill int64) {
	b.peer.inFlight.Store(inFlight)
	b.peer.prefill.Store(prefill)
}
