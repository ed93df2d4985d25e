// Package tree is saltus's route table: it remembers which backends hold
// which token prefixes in their KV cache.
//
// # Place in the request path
//
// DESIGN.md § Stage 5 turns a request's tokens into block keys
// ([BlockKeys]): one key per full block of block-size tokens, each key a
// chained hash of its parent key and the block's token ids, seeded by the
// model name. Stage 6 asks the owner shard's [Tree] which backends hold the
// longest prefix of that chain ([Tree.Match]); stage 9 teaches the tree what a
// backend now holds once it answered ([Tree.Insert]); stage 10 inserts what
// peer routers learned with origin [Remote]. [Tree.Demote] takes a holder
// back off a chain beyond a depth: a pending route whose attempt failed, or
// a backend whose engine reported holding less than the tree believed.
//
// # Shape
//
// The tree is a path-compressed trie over block keys. Each node owns an edge:
// a run of consecutive block keys with no branch and no learned boundary
// inside it. Because every key is a chained hash of the whole prefix before
// it, a key names its prefix: one map from an edge's first key to its node
// replaces per-node child maps, and a lookup costs one map probe per node
// on the path plus a slice comparison per block.
//
// A node has up to MaxHolders holders (backend, last-used time, origin,
// and whether the backend's engine confirmed it: origin [Engine], whose
// depth [Tree.Match] reports apart as Hit.Confirmed). A
// holder on a node means the backend holds every block from the root to the
// end of that node's edge, so a match that stops inside an edge still
// credits the node's holders with the blocks matched so far.
//
// Capacity is counted in stored blocks. Nodes sit in one of two intrusive
// LRU lists (nodes with a [Local] holder, nodes with only [Remote] holders);
// the least recently used leaf of the remote list is evicted first. TTL
// expiry and backend removal make holders invisible at once and are cleaned
// up in bounded steps by [Tree.Maintain].
//
// # Concurrency
//
// A Tree is owned by one shard's event loop and is not safe for concurrent
// use: it has no locks. DESIGN.md § Route table partitions prefixes by first block, so no
// other goroutine ever needs this shard's tree; other shards send messages to
// the owner instead. Every method is "loop only".
package tree
