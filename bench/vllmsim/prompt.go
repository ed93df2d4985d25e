package vllmsim

import (
	"encoding/binary"
	"fmt"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
	"github.com/saltus-lb/saltus/tree"
)

// prompter turns a request's prompt into token ids, like the engine's own
// tokenizer would: chat messages rendered with the template, then
// encoded; without a tokenizer, every 4 bytes of the rendered text count
// as one token (byte-block mode).
type prompter struct {
	tok       *tokenizer.Tokenizer // nil: byte-block mode
	tmpl      *chat.Renderer
	seed      uint64
	blockSize int
}

func newPrompter(cfg Config) (*prompter, error) {
	p := &prompter{seed: tree.ModelSeed(cfg.Model), blockSize: cfg.BlockSize}
	if cfg.Tokenizer == "" {
		r, err := chat.New(chat.None, nil, chat.Config{})
		if err != nil {
			return nil, err
		}
		p.tmpl = r
		return p, nil
	}
	tok, err := tokenizer.Load(cfg.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	r, _, _, err := chat.Load(tok, cfg.Tokenizer, cfg.ChatTemplate)
	if err != nil {
		return nil, fmt.Errorf("chat-template: %w", err)
	}
	p.tok, p.tmpl = tok, r
	return p, nil
}

// chatIDs renders and tokenizes messages (with the generation prompt).
func (p *prompter) chatIDs(msgs []chat.Message) ([]int32, error) {
	segs, err := p.tmpl.Render(nil, msgs, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		return nil, err
	}
	if p.tok == nil {
		var text []byte
		for _, s := range segs {
			text = append(text, s.Text...)
		}
		return byteTokens(text), nil
	}
	var ids []int32
	for i, s := range segs {
		if s.Special() {
			ids = append(ids, s.ID)
		} else {
			ids = p.tok.EncodeSegment(ids, s.Text, i == 0)
		}
	}
	return ids, nil
}

// textIDs tokenizes a completion prompt (with the BOS the tokenizer adds).
func (p *prompter) textIDs(text string) []int32 {
	if p.tok == nil {
		return byteTokens([]byte(text))
	}
	return p.tok.EncodeSpecial(nil, text)
}

// byteTokens packs every 4 bytes of text into one pseudo token.
func byteTokens(text []byte) []int32 {
	ids := make([]int32, 0, (len(text)+3)/4)
	for len(text) > 0 {
		var w [4]byte
		n := copy(w[:], text)
		ids = append(ids, int32(binary.LittleEndian.Uint32(w[:])))
		text = text[n:]
	}
	return ids
}

// keys are the full blocks' chained hashes.
func (p *prompter) keys(ids []int32) []uint64 {
	return tree.BlockKeys(nil, p.seed, ids, p.blockSize)
}

// promptIDs reads a request body's prompt: chat "messages", or a
// completions "prompt" (a string or an array of token ids).
func (p *prompter) promptIDs(v *fastjson.Value, isChat bool) ([]int32, error) {
	if isChat {
		mv := v.Get("messages")
		if mv == nil {
			return nil, fmt.Errorf(`"messages" is required`)
		}
		msgs, err := chat.MessagesFromValue(mv)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			return nil, fmt.Errorf(`"messages" must not be empty`)
		}
		return p.chatIDs(msgs)
	}
	pv := v.Get("prompt")
	if pv == nil {
		return nil, fmt.Errorf(`"prompt" is required`)
	}
	switch pv.Type() {
	case fastjson.TypeString:
		return p.textIDs(string(pv.GetStringBytes())), nil
	case fastjson.TypeArray:
		arr := pv.GetArray()
		ids := make([]int32, 0, len(arr))
		for i, x := range arr {
			n, err := x.Int()
			if err != nil || n < 0 {
				return nil, fmt.Errorf(`"prompt"[%d]: want a token id (one prompt per request), got %s`, i, x.Type())
			}
			ids = append(ids, int32(n))
		}
		return ids, nil
	}
	return nil, fmt.Errorf(`"prompt" must be a string or an array of token ids, got %s`, pv.Type())
}
