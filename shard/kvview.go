package shard

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/backend"
	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// The exact view (issue 31, item 2): an engine's own KV events, turned
// into the route table's keys, so that the holders of an evented engine
// come from what it reports rather than only from what saltus routed
// there. An EngineView maps each engine block hash to its saltus route
// key and its parent's hash; a BlockStored event becomes the whole chain
// of route keys from the root (the parent's chain, walked in the map,
// then tree.BlockKeys over the new blocks' token ids, seeded as a
// request's keys are), inserted on the chain's owner loop; a
// BlockRemoved demotes the engine from that block on; an
// AllBlocksCleared, a stale mark (a sequence gap, a reconnect, a restart)
// or an overflow of the map forgets the engine on every loop
// (tree.RemoveBackend): what saltus learned by routing there goes too,
// as it is no better than the events it missed.
//
// An engine block is held while the engine has a copy of it: the view
// counts copies, stores less removals, as vLLM's own snapshot of its
// events does (vllm/distributed/kv_events_snapshot.py: a reference count
// per medium, KV-cache group and hash). vLLM does not deduplicate a block
// two requests computed at once (each copy is stored and removed), a
// hybrid model stores a block once per KV-cache group, and an offloading
// connector (medium CPU) stores another copy of blocks the GPU stored
// before: without token ids or parent, in blocks of k of the GPU's,
// named by the hash of each one's last GPU block, as bytes where the
// GPU's events may carry ints (kvevents.Hash.AsInt). The first removal
// of a block held twice no longer takes its holder away; only the last
// does. AllBlocksCleared clears the GPU's copies; an offloading tier's
// stay. A block without copies is kept a while (an orphan, at most
// MaxBlocks/16) for the chains through it: its descendants', and the
// offloading tier's store that can come after the GPU's removal.
//
// The view is exact when saltus keys prompts as the engine does: token-id
// prompts (prompt as a list of ids), or a tokenizer matching the
// engine's; byte-block mode keys text prompts over bytes, which no
// engine's token ids reproduce, so their stored blocks insert chains that
// no request matches (harmless, and bounded by the tree's capacity).
//
// Holders from events are inserted with origin tree.Engine: Local
// holders the engine confirmed. The tree keeps the confirmation apart
// (one bit of its packed holder; Match reports the confirmed depth as
// Hit.Confirmed) and everything else treats them as Local: they expire
// after the tree's TTL unless the engine stores or a request refreshes
// them, they are shared with peers and saved with the route table as
// Local routes (a peer, or this router after a restart, takes them for
// guesses). While a backend's view is live and complete (Backend.Evented:
// from its first batch until it is closed or reset for the backend's
// health, and while it maps every block the engine reports) the decision
// believes the engine over routing (policy/truth.go): a guess deeper than what
// the engine confirmed counts only within the bridge after it was last
// refreshed (--kv-events-bridge), the time between routing a request and
// the engine's BlockStored for it.
//
// A view is incomplete when the engine holds blocks it does not map: a
// BlockStored whose parent it does not know (stored before saltus
// subscribed, e.g. an engine warm before a restart of saltus, or in a
// batch lost while the publisher was still connecting: ZMQ drops what a
// publisher sends before its subscriber is there) or that it cannot key
// (no model to seed it, token ids that do not fill the blocks). Every
// descendant of such a block is unknown to the view too, so its engine's
// word cannot supersede the guesses: an incomplete view keeps inserting
// what it maps, as confirmations, but its backend is not evented (its
// guesses count as a backend's without events) until the engine is
// emptied (AllBlocksCleared) or ViewConfig.TrustAfter BlockStored events
// in a row were all keyed (what it could not map was evicted).
//
// # Concurrency
//
// An EngineView is owned by one goroutine (its subscriber's consumer);
// the map updates run there, off the loops, and only the tree updates
// are posted to the loops, as values, through the bounded mailboxes
// (postTo: a full mailbox drops the update, counted as
// saltus_shard_mailbox_overflow_total). Blocks is any goroutine.

func init() {
	promtext.Describe(map[string]string{
		"saltus_kvview_blocks":         "Engine KV blocks the exact view maps to route keys and holds a copy of (GPU or an offloading tier), per backend with KV events (bounded per engine; 0 after a reset).",
		"saltus_kvview_unusable_total": "KV events the exact view could not turn into route keys, by reason: model (no lora_name and the backend serves no single base model, or an adapter named only by lora_id), block_size (the engine's block size is not a multiple of --block-size; the engine's view is reset), parent (the parent block is unknown: stored before the view started or after a reset), tokens (token ids do not fill the blocks), removed_unknown (BlockRemoved of a block the view does not map or holds no copy of in that medium), copy_unknown (a BlockStored without token ids, another copy such as an offloading tier's, of a block the view does not map).",
		"saltus_kvview_incomplete":     "1 while a backend's exact view misses blocks its engine holds (a BlockStored it could not key: unknown parent, no model, short token ids), so its engine's word does not supersede saltus's guesses; 0 again after an AllBlocksCleared or ViewConfig.TrustAfter (1024) keyed BlockStored events in a row.",
		"saltus_kvview_resets_total":   "Times an engine's exact view was emptied and its holders removed from the route table, by reason: cleared (AllBlocksCleared), stale (a sequence gap, reconnect or engine restart), overflow (past the view's block bound), gone (the backend left, went unhealthy, or its subscription ended).",
	})
}

// ViewConfig bounds the exact views.
type ViewConfig struct {
	// MaxBlocks bounds the engine blocks one view maps (default 1<<18:
	// 4M tokens at 16 a block, a large engine's cache). A mapped block
	// costs ≈ 240 heap bytes (TestViewMemoryPerBlock: 32-byte hashes),
	// so ≈ 60 MiB at the bound; a view holds what its engine caches, far
	// less for most. Past it the view is reset (counted, reason
	// overflow): a view that dropped blocks could not follow their
	// descendants' chains.
	MaxBlocks int
	// TrustAfter is how many BlockStored events in a row an incomplete
	// view must key before its engine's word counts again (default
	// 1024: a few minutes of a busy engine's stores; what the view
	// missed is evicted by then or keeps showing as unknown parents).
	TrustAfter int
}

// DefaultViewConfig is ViewConfig with the defaults above.
func DefaultViewConfig() ViewConfig { return ViewConfig{MaxBlocks: 1 << 18, TrustAfter: 1024} }

// Validate names the field that is wrong.
func (c ViewConfig) Validate() error {
	if c.MaxBlocks < 1 {
		return fmt.Errorf("shard: ViewConfig.MaxBlocks %d < 1", c.MaxBlocks)
	}
	if c.TrustAfter < 1 {
		return fmt.Errorf("shard: ViewConfig.TrustAfter %d < 1", c.TrustAfter)
	}
	return nil
}

// maxViewDepth bounds a parent walk: 65,536 blocks (1M tokens at 16 a
// block) is past any model's context; a hostile cycle of parents ends
// there too.
const maxViewDepth = 1 << 16

// viewBlock is one engine block: its route key, its parent's hash and
// the engine's copies of it.
type viewBlock struct {
	key uint64
	// sub are the keys of the block's saltus blocks before key, when the
	// engine's block is several of saltus's (nil when it is one).
	sub       []uint64
	parent    kvevents.Hash
	hasParent bool
	// gpu and tier count the engine's copies (stores less removals) in
	// its GPU cache (medium GPU or none) and in other media (an
	// offloading tier), saturating; neither: an orphan. queued: in the
	// orphans' queue.
	gpu, tier uint16
	queued    bool
}

func (b *viewBlock) held() bool { return b.gpu > 0 || b.tier > 0 }

// maxTiers bounds the media whose block size a view remembers.
const maxTiers = 8

// Views makes the exact views of one Router and holds their counters.
// Any goroutine.
type Views struct {
	r   *Router
	cfg ViewConfig
	set *metrics.Set
	// unusable and resets by reason (see init's HELP).
	unModel, unBlockSize, unParent, unTokens, unRemoved, unCopy *metrics.Counter
	reCleared, reStale, reOverflow, reGone                      *metrics.Counter
}

// NewViews validates cfg and registers the views' counters in set.
func NewViews(r *Router, cfg ViewConfig, set *metrics.Set) (*Views, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	un := func(reason string) *metrics.Counter {
		return set.GetOrCreateCounter(`saltus_kvview_unusable_total{reason="` + reason + `"}`)
	}
	re := func(reason string) *metrics.Counter {
		return set.GetOrCreateCounter(`saltus_kvview_resets_total{reason="` + reason + `"}`)
	}
	return &Views{r: r, cfg: cfg, set: set,
		unModel: un("model"), unBlockSize: un("block_size"), unParent: un("parent"), unTokens: un("tokens"), unRemoved: un("removed_unknown"), unCopy: un("copy_unknown"),
		reCleared: re("cleared"), reStale: re("stale"), reOverflow: re("overflow"), reGone: re("gone")}, nil
}

// EngineView is one evented backend's exact view. Owned by one
// goroutine (Apply, Close); Blocks any goroutine.
type EngineView struct {
	vs      *Views
	backend int              // the backend's ID (tree index)
	b       *backend.Backend // the backend, for SetEvented; nil if it left before the view was made
	gauge   string
	blocks  map[kvevents.Hash]viewBlock
	n       atomic.Int64 // len(blocks), for the gauge
	// incomplete: the engine holds blocks the view does not map (see
	// the file's comment); clean counts the BlockStored events keyed in
	// a row since. Owner only (incomplete also read by its gauge).
	incomplete atomic.Bool
	clean      int
	gaugeInc   string
	// live counts the blocks held (a copy anywhere), tiered those with
	// a copy in another medium than the GPU; orphans queues blocks
	// without copies, oldest first (each at most once: viewBlock.queued),
	// norphans is how many are in the map. Owner only.
	live, tiered, norphans int
	orphans                []kvevents.Hash
	// What the engine's stores with token ids told of it: its block size
	// and whether it sends int hashes; tierK, how many of its blocks one
	// block of each other medium is (from that medium's stores).
	engineBS int
	ints     bool
	tierK    map[string]int
	// Scratch, reused between events.
	chain []uint64
	ids   []int32
}

// New returns backend id's view, empty; label names it in its gauge (the
// backend's name or URL). Close it when the backend leaves.
func (vs *Views) New(id int, label string) *EngineView {
	v := &EngineView{vs: vs, backend: id, blocks: map[kvevents.Hash]viewBlock{},
		gauge:    `saltus_kvview_blocks{backend=` + promtext.QuoteLabel(label) + `}`,
		gaugeInc: `saltus_kvview_incomplete{backend=` + promtext.QuoteLabel(label) + `}`}
	if vs.r.up != nil {
		for _, b := range vs.r.up.Snapshot() {
			if b.ID == id {
				v.b = b
			}
		}
	}
	vs.set.GetOrCreateGauge(v.gauge, func() float64 { return float64(v.n.Load()) })
	vs.set.GetOrCreateGauge(v.gaugeInc, func() float64 { return float64(b2i(v.incomplete.Load())) })
	return v
}

// Complete reports whether the view maps every block its engine
// reported (the file's comment). Any goroutine.
func (v *EngineView) Complete() bool { return !v.incomplete.Load() }

// unmapped marks the view incomplete: its engine holds a block it does
// not map.
func (v *EngineView) unmapped() {
	v.incomplete.Store(true)
	v.clean = 0
}

// mapped counts a keyed BlockStored toward trusting an incomplete view
// again.
func (v *EngineView) mapped() {
	if v.incomplete.Load() {
		if v.clean++; v.clean >= v.vs.cfg.TrustAfter {
			v.incomplete.Store(false)
			v.clean = 0
		}
	}
}

// Blocks is how many engine blocks the view maps and the engine holds a
// copy of. Any goroutine.
func (v *EngineView) Blocks() int { return int(v.n.Load()) }

// Close forgets the engine (its holders on every loop, reason gone) and
// unregisters its gauge. Owner only.
func (v *EngineView) Close() {
	v.reset(v.vs.reGone)
	v.vs.set.UnregisterMetric(v.gauge)
	v.vs.set.UnregisterMetric(v.gaugeInc)
}

// Reset forgets the engine now, reason gone (its backend went unhealthy).
// Owner only.
func (v *EngineView) Reset() { v.reset(v.vs.reGone) }

func (v *EngineView) reset(c *metrics.Counter) {
	c.Inc()
	if c == v.vs.reCleared { // the engine is empty: nothing it holds is unknown
		v.incomplete.Store(false)
		v.clean = 0
	}
	if c == v.vs.reGone && v.b != nil {
		v.b.SetEvented(false) // the engine's word is gone with its view: guesses count again
	}
	clear(v.blocks)
	v.blocks = map[kvevents.Hash]viewBlock{} // a large map's buckets are not kept at their high-water mark
	v.live, v.tiered, v.norphans, v.orphans = 0, 0, 0, nil
	v.engineBS, v.ints, v.tierK = 0, false, nil
	v.n.Store(0)
	v.forget()
}

// forget removes the engine from the route table on every loop.
func (v *EngineView) forget() {
	r := v.vs.r
	id := v.backend
	for i, sh := range r.shards {
		r.postTo(i, func() {
			// Only IDs beyond MaxBackends fail, and those were never
			// inserted.
			_ = sh.tree.RemoveBackend(id)
			sh.publish()
		})
	}
}

// viewOp is one tree update on a loop: insert chain, or demote the
// engine from its block keep on (the engine's last block, which may be
// several of saltus's).
type viewOp struct {
	chain  []uint64
	demote bool
	keep   int
}

// Apply applies one batch of the engine's events: the map here, the
// tree updates posted to their owner loops. Owner only.
func (v *EngineView) Apply(msg kvevents.Message) {
	if msg.Stale && msg.StaleReason != "start" && len(v.blocks) > 0 {
		v.reset(v.vs.reStale)
	}
	r := v.vs.r
	per := make([][]viewOp, len(r.shards))
	for i := range msg.Batch.Events {
		e := &msg.Batch.Events[i]
		switch e.Kind {
		case kvevents.AllBlocksCleared:
			v.post(per)
			clear(per)
			if v.tiered == 0 {
				v.reset(v.vs.reCleared)
			} else {
				v.clearGPU(per)
			}
		case kvevents.BlockStored:
			if !v.stored(e, per) {
				v.post(per)
				clear(per)
				c := v.vs.reOverflow
				if len(e.Tokens) > 0 && (e.BlockSize <= 0 || e.BlockSize%v.vs.r.cfg.BlockSize != 0) {
					c = v.vs.reStale // a block size it cannot key
				}
				v.reset(c)
			}
		case kvevents.BlockRemoved:
			v.removed(e, per)
		}
	}
	if over := v.norphans - v.maxOrphans(); over > 0 {
		v.evictOrphans(over)
	}
	v.n.Store(int64(v.live))
	v.post(per)
	if v.b != nil {
		// Live from the first batch (a subscription that never
		// connected leaves the backend's guesses as they were), while
		// complete.
		v.b.SetEvented(!v.incomplete.Load())
	}
}

// post sends the ops gathered per loop, at most applyChunk per message.
func (v *EngineView) post(per [][]viewOp) {
	r := v.vs.r
	id := v.backend
	for i, ops := range per {
		sh := r.shards[i]
		for len(ops) > 0 {
			chunk := ops[:min(len(ops), applyChunk)]
			ops = ops[len(chunk):]
			r.postTo(i, func() { r.applyView(sh, id, chunk) })
		}
	}
}

// applyView applies a view's tree updates on sh's loop.
func (r *Router) applyView(sh *Shard, backend int, ops []viewOp) {
	now := r.now()
	for _, op := range ops {
		chain := op.chain
		if op.demote {
			sh.tree.Demote(chain, backend, op.keep, now)
			// Demote drops the holder from the whole node that holds the
			// removed block (tree.Demote: conservative); the engine still
			// holds the blocks before it, which this insert gives back.
			if chain = chain[:op.keep]; len(chain) == 0 {
				continue
			}
		}
		if err := sh.tree.Insert(chain, nil, backend, tree.Engine, now); err != nil {
			r.m.learnErrors.Inc() // beyond tree.Config.MaxBackends, as a local learn
			continue
		}
		sh.known[backend] = true
	}
	sh.publish()
}

// chainOf appends to dst the route keys from the root to the engine
// block h, inclusive; false when a block on the way is unknown or the
// walk is deeper than maxViewDepth.
func (v *EngineView) chainOf(dst []uint64, h kvevents.Hash) ([]uint64, bool) {
	chain, _, ok := v.chainHeld(dst, h)
	return chain, ok
}

// chainHeld is chainOf and, in one walk, held: how many of the chain's
// keys lead up to the first block the engine holds no copy of (all of
// them when it holds every one), a position in the appended part.
func (v *EngineView) chainHeld(dst []uint64, h kvevents.Hash) (chain []uint64, held int, ok bool) {
	start := len(dst)
	unheld := -1 // where, walking up, the last block without a copy ended
	for range maxViewDepth {
		b, ok := v.blocks[h]
		if !ok {
			return dst[:start], 0, false
		}
		dst = append(dst, b.key)
		for i := len(b.sub) - 1; i >= 0; i-- {
			dst = append(dst, b.sub[i])
		}
		if !b.held() {
			unheld = len(dst) - start
		}
		if !b.hasParent {
			slices.Reverse(dst[start:])
			n := len(dst) - start
			if unheld >= 0 {
				return dst, n - unheld, true
			}
			return dst, n, true
		}
		h = b.parent
	}
	return dst[:start], 0, false
}

// seed is the seed of the event's chains, as a request's (job.seedModel):
// the router's fixed model, else the adapter's name, else the backend's
// one base model; none for an adapter known only by its lora_id.
func (v *EngineView) seed(e *kvevents.Event) (uint64, bool) {
	r := v.vs.r
	switch {
	case r.cfg.Model != "":
		return tree.ModelSeed(r.cfg.Model), true
	case e.LoRAName.OK && e.LoRAName.V != "":
		return tree.ModelSeed(e.LoRAName.V), true
	case e.LoRAID.OK && e.LoRAID.V != 0:
		// An adapter named only by its number (vLLM before lora_name):
		// its blocks are not its base model's, and its name is unknown.
		return 0, false
	}
	m, ok := r.baseModel(v.backend)
	if !ok {
		return 0, false
	}
	return tree.ModelSeed(m), true
}

// saltOf is the cache_salt vLLM mixed into the event's first block when
// it begins a chain: the one string of its extra_keys entry after the
// adapter's name (vLLM orders them adapter, multimodal identifiers,
// salt; a multimodal prompt is not keyed as saltus keys anyway). "" for
// none.
func saltOf(e *kvevents.Event) string {
	x := e.Extra
	if len(x) > 0 && e.LoRAName.OK && x[0] == e.LoRAName.V {
		x = x[1:]
	}
	if len(x) != 1 {
		return ""
	}
	return x[0]
}

// baseModel is the base model backend id serves when it serves exactly
// one (its other served names being that model's adapters). Any
// goroutine.
func (r *Router) baseModel(id int) (string, bool) {
	if r.fleet == nil {
		return "", false
	}
	ix := r.fleet.Index()
	bm, ok := ix.Backend(id)
	if !ok {
		return "", false
	}
	base := ""
	for _, m := range bm.Models {
		p := ix.Lookup(m)
		if p == nil || p.Model.Parent != "" {
			continue
		}
		if base != "" {
			return "", false
		}
		base = m
	}
	return base, base != ""
}

// stored maps a BlockStored event's blocks, counts a copy of each and
// queues the insert of their chain; false when the view must be reset:
// the map would pass MaxBlocks, or the engine's blocks cannot be keyed
// as saltus's. A block it maps already keeps its mapping (an engine's
// hash names one content; so no store can make a cycle of parents).
func (v *EngineView) stored(e *kvevents.Event, per [][]viewOp) bool {
	vs := v.vs
	bs := vs.r.cfg.BlockSize
	if len(e.Hashes) == 0 {
		return true
	}
	if len(e.Tokens) == 0 {
		v.storedCopy(e, per)
		return true
	}
	if e.BlockSize <= 0 || e.BlockSize%bs != 0 {
		vs.unBlockSize.Inc()
		return len(v.blocks) == 0 // what it stored before is not keyed as saltus keys: stale
	}
	if len(e.Tokens) != len(e.Hashes)*e.BlockSize {
		vs.unTokens.Inc()
		v.unmapped()
		return true
	}
	seed, ok := v.seed(e)
	if !ok {
		vs.unModel.Inc()
		v.unmapped()
		return true
	}
	chain, held := v.chain[:0], 0
	if e.Parent.OK {
		if chain, held, ok = v.chainHeld(chain, e.Parent.V); !ok {
			vs.unParent.Inc()
			v.unmapped()
			v.chain = chain
			return true
		}
		seed = tree.ContinueSeed(chain[len(chain)-1])
	} else if salt := saltOf(e); salt != "" {
		seed = tree.SaltSeed(seed, salt) // as a request with that cache_salt is keyed (job.seed)
	}
	v.chain = chain
	fresh := len(e.Hashes) // at most; counted only near the bound
	if len(v.blocks)+fresh > vs.cfg.MaxBlocks {
		fresh = 0
		for _, h := range e.Hashes {
			if _, ok := v.blocks[h]; !ok {
				fresh++
			}
		}
	}
	if over := len(v.blocks) + fresh - vs.cfg.MaxBlocks; over > 0 {
		v.evictOrphans(over)
		if len(v.blocks)+fresh > vs.cfg.MaxBlocks {
			return false
		}
	}
	gpu := isGPU(e.Medium)
	if gpu {
		v.engineBS = e.BlockSize
		_, v.ints = e.Hashes[0].Int()
	}
	base := len(chain)
	v.ids = v.ids[:0]
	for _, t := range e.Tokens {
		v.ids = append(v.ids, int32(t)) // the same 32 bits BlockKeys hashes
	}
	// An engine block of k saltus blocks is keyed by its last one: its
	// sub-blocks' keys are in the chain, and the next block continues
	// from it.
	chain = tree.BlockKeys(chain, seed, v.ids, bs)
	k := e.BlockSize / bs
	parent, hasParent := e.Parent.V, e.Parent.OK
	for i, h := range e.Hashes {
		b, known := v.blocks[h]
		if !known {
			b = viewBlock{key: chain[base+(i+1)*k-1], parent: parent, hasParent: hasParent}
			if k > 1 {
				b.sub = slices.Clone(chain[base+i*k : base+(i+1)*k-1])
			}
		}
		v.addCopy(&b, known, gpu)
		v.blocks[h] = b
		parent, hasParent = h, true
	}
	if e.Parent.OK && held < base {
		// Inserted as far as the engine holds the parent's chain (an
		// orphan there: a copy vLLM would not have freed).
		chain = chain[:held]
	}
	if len(chain) > 0 {
		own := int(chain[0] % uint64(len(per)))
		per[own] = append(per[own], viewOp{chain: slices.Clone(chain)})
	}
	v.chain = chain
	v.mapped()
	return true
}

// storedCopy counts another copy of blocks the view maps: a BlockStored
// without token ids (vLLM's offloading connector). Each hash is the last
// engine block of one block of the event's medium, k of the engine's (its
// block size over the engine's; 1 when either is unknown or they do not
// divide): it and its k−1 ancestors gain a copy, and the engine is made
// the holder of its chain again (its GPU copy may be gone).
func (v *EngineView) storedCopy(e *kvevents.Event, per [][]viewOp) {
	gpu := isGPU(e.Medium)
	k := 1
	if v.engineBS > 0 && e.BlockSize > v.engineBS && e.BlockSize%v.engineBS == 0 {
		k = e.BlockSize / v.engineBS
	}
	if !gpu {
		v.setTierK(e.Medium.V, k)
	}
	all := true
	for i, h := range e.Hashes {
		h, ok := v.find(h)
		if !ok {
			v.vs.unCopy.Inc()
			all = false
			continue
		}
		x := h
		for range k {
			b := v.blocks[x]
			v.addCopy(&b, true, gpu)
			v.blocks[x] = b
			if !b.hasParent {
				break
			}
			if _, ok := v.blocks[b.parent]; !ok {
				break
			}
			x = b.parent
		}
		if i+1 < len(e.Hashes) && v.continues(e.Hashes[i+1], h, k) {
			continue // the next one's chain holds this one's
		}
		v.insertHeld(h, per)
	}
	if all {
		v.mapped()
	} else {
		v.unmapped()
	}
}

// continues reports whether the block next names is k blocks after h.
func (v *EngineView) continues(next, h kvevents.Hash, k int) bool {
	x, ok := v.find(next)
	if !ok {
		return false
	}
	for range k {
		b, ok := v.blocks[x]
		if !ok || !b.hasParent {
			return false
		}
		x = b.parent
	}
	return x == h
}

// removed takes a copy of a BlockRemoved event's blocks away (of each
// one's k−1 ancestors too, for a medium whose blocks are k of the
// engine's) and queues the demotion of the engine from the first of them
// left without a copy on. A block without copies stays mapped as an
// orphan. A removed block's descendants keep their holders until their
// own removal (vLLM frees a request's blocks children first, so they
// usually go before it); a removal the view cannot resolve (a block it
// does not map or holds no copy of in that medium, a chain it cannot
// walk) is counted as removed_unknown.
func (v *EngineView) removed(e *kvevents.Event, per [][]viewOp) {
	gpu := isGPU(e.Medium)
	k := 1
	if !gpu {
		k = max(v.tierK[e.Medium.V], 1)
	}
	for _, h := range e.Hashes {
		h, ok := v.find(h)
		if b := v.blocks[h]; !ok || (gpu && b.gpu == 0) || (!gpu && b.tier == 0) {
			v.vs.unRemoved.Inc() // no copy there to remove
			continue
		}
		gone := false
		x := h
		for range k {
			b := v.blocks[x]
			had, zero := v.dropCopy(x, &b, gpu)
			v.blocks[x] = b
			if !had {
				break
			}
			gone = gone || zero
			if !b.hasParent {
				break
			}
			if _, ok := v.blocks[b.parent]; !ok {
				break
			}
			x = b.parent
		}
		if !gone {
			continue // another copy holds it
		}
		// Demoted from the first block of the chain it holds no copy of
		// now (not only those of this event so far: a later removal of
		// a block after an earlier one must not give the earlier back).
		chain, held, walked := v.chainHeld(v.chain[:0], h)
		v.chain = chain
		if !walked {
			v.vs.unRemoved.Inc()
			continue
		}
		own := int(chain[0] % uint64(len(per)))
		per[own] = append(per[own], viewOp{chain: slices.Clone(chain), demote: true, keep: held})
	}
}

// clearGPU applies an AllBlocksCleared to a view that holds copies in
// another medium: vLLM clears its GPU cache, and an offloading tier
// keeps its copies (its snapshot keeps them too). The engine is
// forgotten on every loop, then made the holder again of the chains the
// tier holds (their leaves'). The view's completeness stays as it was.
func (v *EngineView) clearGPU(per [][]viewOp) {
	v.vs.reCleared.Inc()
	for h, b := range v.blocks {
		if b.gpu == 0 {
			continue
		}
		b.gpu = 0
		if !b.held() {
			v.live--
			v.orphan(h, &b)
		}
		v.blocks[h] = b
	}
	v.forget()
	inner := make(map[kvevents.Hash]struct{}, v.tiered)
	for _, b := range v.blocks {
		if b.held() && b.hasParent {
			inner[b.parent] = struct{}{}
		}
	}
	for h, b := range v.blocks {
		if _, ok := inner[h]; ok || !b.held() {
			continue
		}
		v.insertHeld(h, per)
	}
}

// insertHeld queues the insert of h's chain, as far as the engine holds
// a copy of each of its blocks.
func (v *EngineView) insertHeld(h kvevents.Hash, per [][]viewOp) {
	chain, held, ok := v.chainHeld(v.chain[:0], h)
	v.chain = chain
	if !ok {
		return
	}
	if chain = chain[:held]; len(chain) > 0 {
		own := int(chain[0] % uint64(len(per)))
		per[own] = append(per[own], viewOp{chain: slices.Clone(chain)})
	}
}

// isGPU: a medium of the engine's GPU cache ("GPU", or none: vLLM
// before media).
func isGPU(m kvevents.Opt[string]) bool {
	return !m.OK || m.V == "" || strings.EqualFold(m.V, "GPU")
}

// find is the key under which the view maps h: h, or its int form when
// the engine sends ints and h came as bytes (vLLM's offloading
// connector names the GPU's blocks by their bytes).
func (v *EngineView) find(h kvevents.Hash) (kvevents.Hash, bool) {
	if _, ok := v.blocks[h]; ok {
		return h, true
	}
	if hi, ok := h.AsInt(); ok && v.ints {
		if _, ok := v.blocks[hi]; ok {
			return hi, true
		}
	}
	return h, false
}

// setTierK remembers how many engine blocks a block of medium m is, for
// its removals (which do not say), for at most maxTiers media.
func (v *EngineView) setTierK(m string, k int) {
	if v.tierK == nil {
		v.tierK = map[string]int{}
	}
	if _, ok := v.tierK[m]; ok || len(v.tierK) < maxTiers {
		v.tierK[m] = k
	}
}

// addCopy counts a copy of b, which the map holds (known) or is new.
func (v *EngineView) addCopy(b *viewBlock, known, gpu bool) {
	if !b.held() {
		v.live++
		if known {
			v.norphans--
		}
	}
	if gpu {
		b.gpu = min(b.gpu+1, math.MaxUint16-1) // saturating
		return
	}
	if b.tier == 0 {
		v.tiered++
	}
	b.tier = min(b.tier+1, math.MaxUint16-1)
}

// dropCopy takes a copy of h (b) away in the GPU or another medium: had
// is false when it held none there; gone when it holds none anywhere
// now (an orphan).
func (v *EngineView) dropCopy(h kvevents.Hash, b *viewBlock, gpu bool) (had, gone bool) {
	if gpu {
		if b.gpu == 0 {
			return false, false
		}
		b.gpu--
	} else {
		if b.tier == 0 {
			return false, false
		}
		if b.tier--; b.tier == 0 {
			v.tiered--
		}
	}
	if b.held() {
		return true, false
	}
	v.live--
	v.orphan(h, b)
	return true, true
}

// orphan counts b (h), now without copies, among the orphans and queues
// it unless it is queued already.
func (v *EngineView) orphan(h kvevents.Hash, b *viewBlock) {
	v.norphans++
	if !b.queued {
		b.queued = true
		v.orphans = append(v.orphans, h)
	}
}

// maxOrphans bounds the blocks without copies a view keeps mapped.
func (v *EngineView) maxOrphans() int { return max(v.vs.cfg.MaxBlocks/16, 1) }

// evictOrphans forgets up to n orphans, oldest first (a queued block
// that has a copy again leaves the queue).
func (v *EngineView) evictOrphans(n int) {
	i := 0
	for ; n > 0 && i < len(v.orphans); i++ {
		h := v.orphans[i]
		b, ok := v.blocks[h]
		if !ok {
			continue
		}
		if b.held() {
			b.queued = false
			v.blocks[h] = b
			continue
		}
		delete(v.blocks, h)
		v.norphans--
		n--
	}
	v.orphans = v.orphans[i:]
	if cap(v.orphans) > 2*len(v.orphans)+1024 {
		v.orphans = slices.Clone(v.orphans) // give the queue's dead head back
	}
}
