package vllmsim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"log/slog"

	"github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
	"github.com/saltus-lb/saltus/tree"
)

// prompter turns a request's prompt into what the engine computes over:
// its token count and its full blocks' chained hashes, as the engine's
// own tokenizer and prefix cache would. Immutable after newPrompter;
// safe for concurrent use.
type prompter struct {
	tok       *tokenizer.Tokenizer // nil: byte-block mode
	tmpl      *chat.Renderer       // chat.None without a tokenizer
	blockSize int
}

// newPrompter loads the tokenizer and chat template as `saltus serve`
// does (chat.Load: the template named, or detected, or none with a
// warning).
func newPrompter(cfg Config, logger *slog.Logger) (*prompter, error) {
	p := &prompter{blockSize: cfg.BlockSize}
	if cfg.Tokenizer == "" {
		if cfg.ChatTemplate != "" && cfg.ChatTemplate != chat.None {
			logger.Warn("chat-template is ignored without a tokenizer (byte-block mode)", "chat_template", cfg.ChatTemplate)
		}
		r, err := chat.New(chat.None, nil, chat.Config{})
		if err != nil {
			panic("BUG: the none template needs nothing: " + err.Error())
		}
		p.tmpl = r
		return p, nil
	}
	tok, err := tokenizer.Load(cfg.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("vllmsim: tokenizer: %w", err)
	}
	r, name, warn, err := chat.Load(tok, cfg.Tokenizer, cfg.ChatTemplate)
	if err != nil {
		return nil, fmt.Errorf("vllmsim: chat-template: %w", err)
	}
	if warn != nil {
		logger.Warn("chat template not recognized; rendering prompts with template none (choose one with chat-template)", "err", warn)
	}
	logger.Info("tokenizer loaded", "path", cfg.Tokenizer, "chat_template", name)
	p.tok, p.tmpl = tok, r
	return p, nil
}

// tokenized is a prompt as the engine sees it.
type tokenized struct {
	n    int      // prompt tokens
	keys []uint64 // one per full block
	// ids are the token ids (byte-block mode: the pseudo-ids), only
	// when asked for.
	ids []int32
	// hash is a hash of the whole prompt (tail included): the output
	// text's seed, so equal prompts get equal answers.
	hash uint64
	salt string // the request's cache_salt, which seeded keys
}

// encode tokenizes r's prompt for the served model m, whose seeds key
// its blocks (a name's cached blocks are its own); with wantIDs it keeps
// the ids. A chat template that refuses the conversation (mistral,
// llama2) is a 400, as in vLLM. Any goroutine.
func (p *prompter) encode(r *request, m *servedModel, wantIDs bool) (t tokenized, e *apiError) {
	defer func() { t.salt = r.salt }() // on every return
	switch {
	case r.msgs != nil:
		segs, err := p.tmpl.Render(nil, r.msgs, r.opt)
		if err != nil {
			return t, badRequest("messages", "%v", err)
		}
		texts := make([]string, len(segs))
		for i, s := range segs {
			texts[i] = s.Text
		}
		if p.tok == nil {
			return p.byteBlocks(salted(m.byteSeed, r.salt), texts, wantIDs), nil
		}
		var ids []int32 // the template wrote the special tokens
		for i, s := range segs {
			if s.Special() {
				ids = append(ids, s.ID)
			} else {
				ids = p.tok.EncodeSegment(ids, s.Text, i == 0)
			}
		}
		t.ids = ids
	case r.hasIDs:
		t.ids = r.ids
	case p.tok == nil:
		return p.byteBlocks(salted(m.byteSeed, r.salt), []string{r.text}, wantIDs), nil
	case r.addSpecial:
		t.ids = p.tok.EncodeSpecial(nil, r.text)
	default:
		t.ids = p.tok.Encode(nil, r.text)
	}
	t.n = len(t.ids)
	t.keys = tree.BlockKeys(nil, salted(m.tokenSeed, r.salt), t.ids, p.blockSize)
	h := fnv.New64a()
	var b [4]byte
	for _, id := range t.ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:]) // never fails
	}
	t.hash = h.Sum64()
	if !wantIDs {
		t.ids = nil
	}
	return t, nil
}

// salted is seed under a cache_salt ("" for none), as vLLM keeps a
// salted prompt's blocks apart and saltus keys them (tree.SaltSeed).
func salted(seed uint64, salt string) uint64 {
	if salt == "" {
		return seed
	}
	return tree.SaltSeed(seed, salt)
}

// byteBlocks is byte-block mode: the rendered text read as one token per
// 4 bytes (the last one zero-padded), keyed by tree.ByteBlockKeys
// (64-byte blocks of the text, 16 pseudo-tokens each), exactly as
// `saltus serve` keys it without a tokenizer, seeded with seed.
func (p *prompter) byteBlocks(seed uint64, texts []string, wantIDs bool) tokenized {
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	t := tokenized{n: (n + 3) / 4, keys: tree.ByteBlockKeys(nil, seed, texts...)}
	h := fnv.New64a()
	for _, s := range texts {
		h.Write([]byte(s)) // never fails
	}
	t.hash = h.Sum64()
	if wantIDs {
		buf := make([]byte, 0, 4*t.n)
		for _, s := range texts {
			buf = append(buf, s...)
		}
		buf = append(buf, make([]byte, 4*t.n-n)...)
		t.ids = make([]int32, t.n)
		for i := range t.ids {
			t.ids[i] = int32(binary.LittleEndian.Uint32(buf[4*i:]))
		}
	}
	return t
}
