// Package wire is the versioned binary format of the messages saltus
// routers exchange in a cluster: batches of route changes, per-backend
// load, and push-pull snapshots of both. It is DESIGN.md § Stage 10: the
// gossip package encodes the route changes of the owner shards with a
// [Batcher], and receivers [Decode] and join split routes with a
// [Reassembler] before they insert them with origin REMOTE. Messages are
// plain values; a Batcher or a Reassembler belongs to one goroutine.
//
// # Messages
//
// A message is a header and a body. The 8-byte integers are little
// endian; every integer not given a size below is an unsigned varint
// (encoding/binary's uvarint) in its shortest form, refused over its
// field's width.
//
//	header   'S' (0x53) | version (1 byte, 1) | kind (1 byte) |
//	         len(node) (1 byte, 1..255) | node | sent (8 bytes, int64 Unix ms)
//	routes   kind 1: uvarint count | count × route record
//	load     kind 2: uvarint count | count × load record
//	state    kind 3: uvarint count | route records | uvarint count | load records
//
//	route    op (1 byte) | backend (8 bytes) | uvarint arg (Age for OpInsert,
//	         Keep for OpDemote) | uvarint parts |
//	         if parts > 1: uvarint seq | uvarint part | uvarint offset |
//	         uvarint total | uvarint nkeys | nkeys × key (8 bytes) |
//	         if part == 0: uvarint nbounds | nbounds × uvarint (the first bound,
//	         then each bound minus the one before it)
//	load     backend (8 bytes) | uvarint in-flight | uvarint prefill | uvarint footprint | uvarint pinned
//
// [KindRoutes] and [KindLoad] are broadcast in memberlist's UDP gossip, so
// a message must fit one packet: a [Batcher] packs routes into messages no
// larger than its limit and splits a chain too long for one message into
// parts that share a sequence number. [KindState] rides memberlist's TCP
// push-pull exchange and has no size limit.
//
// # Validation
//
// [Decode] trusts nothing. A count is refused, before anything is
// allocated for it, when the bytes left could not hold that many records,
// so a short message never makes it allocate more than a few times its
// own size (TestDecodeAllocBound). Every route it returns is valid on its
// own: a known op, parts in [1, MaxParts], part < parts, a nonzero seq
// and part 0 at offset 0 when split, total ≤ MaxChain, at least one key,
// offset+nkeys ≤ total, a whole route carrying its whole chain, bounds
// strictly ascending in (0, total], Keep ≤ total. Whether the parts of a
// split route agree with one another is the Reassembler's check. An
// unknown version is [ErrVersion] (a newer peer); anything else wrong is
// [ErrMalformed], wrapped with the field at fault. The encoding is
// canonical (shortest varints, no field that the others do not call for),
// so re-encoding a decoded message gives back the same bytes.
//
// # Concurrency
//
// [AppendMessage] and [Decode] are pure functions: safe for concurrent use
// on distinct Messages. A Message decoded into is owned by its caller; its
// slices stay valid until the next Decode into it. A [Batcher] and a
// [Reassembler] have no locks: each is owned by one goroutine (or guarded
// by its owner's mutex), and every method is called by that owner only.
package wire
