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

// PeerLoad is the load the cluster's other routers report on a backend:
// their requests in flight and pending prefill tokens, summed, and the
// largest footprint and pinned tokens one of them counts (each router
// counts a prefix in use once, and the routers of a cluster share the
// hot ones: a sum would count those once per router).
type PeerLoad struct {
	InFlight, Prefill, Footprint, Pinned int64
}

// peerLoad is set by the gossip goroutine, read by every decision.
type peerLoad struct {
	inFlight, prefill, footprint, pinned atomic.Int64
}

// PeerLoad is what the other routers last reported on b: zero without a
// cluster. Any goroutine.
func (b *Backend) PeerLoad() PeerLoad {
	return PeerLoad{b.peer.inFlight.Load(), b.peer.prefill.Load(), b.peer.footprint.Load(), b.peer.pinned.Load()}
}

// SetPeerLoad replaces the peers' load on b. Any goroutine.
func (b *Backend) SetPeerLoad(l PeerLoad) {
	b.peer.inFlight.Store(l.InFlight)
	b.peer.prefill.Store(l.Prefill)
	b.peer.footprint.Store(l.Footprint)
	b.peer.pinned.Store(l.Pinned)
}
