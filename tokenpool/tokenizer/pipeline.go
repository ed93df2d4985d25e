package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
)

// stage is one pre-tokenizer. HuggingFace runs a Sequence's members in
// turn, each cutting (and possibly rewriting) every piece the one before
// produced; the model then encodes each final piece on its own. The stages
// here do the same, depth first, so pieces never need a slice.
type stage struct {
	kind  stageKind
	split splitPattern // stageSplit; stageByteLevel with use_regex (GPT-2's)
	// general: stageSplitGeneral, a Split that is not an Isolated,
	// non-inverted hand-matched regex (split.go).
	general *splitter
	// individual: Digits with individual_digits (each digit its own piece).
	individual bool
	meta       metaspace // stageMetaspace
	// prefixSpace: ByteLevel with add_prefix_space (a piece that does not
	// start with a space gets one).
	prefixSpace bool
	useRegex    bool // ByteLevel with use_regex
}

type stageKind uint8

const (
	stageSplit stageKind = iota
	stageSplitGeneral
	stageDigits
	stageMetaspace
	stageByteLevel
)

// preComponent holds the fields of the pre-tokenizers we accept. Booleans
// that HuggingFace requires or defaults are pointers, to tell absent from
// false.
type preComponent struct {
	Type             string            `json:"type"`
	PreTokenizers    []json.RawMessage `json:"pretokenizers"`
	Pattern          patternJSON       `json:"pattern"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	IndividualDigits *bool             `json:"individual_digits"`
	AddPrefixSpace   *bool             `json:"add_prefix_space"`
	UseRegex         *bool             `json:"use_regex"`
}

// loadPreTokenizer appends the stages of one pre_tokenizer (a Sequence
// recursively). ByteLevel makes the model byte-level and must come last:
// a pre-tokenizer after it would see its byte alphabet, which nothing here
// reproduces.
func (t *Tokenizer) loadPreTokenizer(raw json.RawMessage) error {
	var c preComponent
	if ok, err := decodeComponent(raw, "pre_tokenizer", &c); !ok {
		return err // nil when absent: SentencePiece style, the whole text is one word
	}
	if t.byteLevel {
		return fmt.Errorf("unsupported pre_tokenizer %q after ByteLevel (ByteLevel must come last)", c.Type)
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.PreTokenizers {
			if err := t.loadPreTokenizer(p); err != nil {
				return err
			}
		}
	case "Split":
		how, err := parseBehavior(c.Behavior)
		if err != nil {
			return err
		}
		sp := &splitter{how: how, invert: c.Invert}
		switch {
		case c.Pattern.Regex != nil && c.Pattern.String != nil, c.Pattern.Regex == nil && c.Pattern.String == nil:
			return fmt.Errorf("pre_tokenizer Split needs one pattern, a String or a Regex: %s", trim(raw))
		case c.Pattern.String != nil:
			sp.literal = *c.Pattern.String
		default:
			if p, ok := knownSplits[*c.Pattern.Regex]; ok {
				if how == isolated && !c.Invert && !p.partial {
					t.stages = append(t.stages, stage{kind: stageSplit, split: p})
					return nil
				}
				sp.hand = &p
			} else if sp.re, err = newRegexPattern(*c.Pattern.Regex); err != nil {
				return err
			}
		}
		t.stages = append(t.stages, stage{kind: stageSplitGeneral, general: sp})
	case "Digits":
		if c.IndividualDigits == nil {
			return fmt.Errorf("pre_tokenizer Digits without individual_digits: %s", trim(raw))
		}
		t.stages = append(t.stages, stage{kind: stageDigits, individual: *c.IndividualDigits})
	case "Metaspace":
		m, err := parseMetaspace(raw)
		if err != nil {
			return err
		}
		t.stages = append(t.stages, stage{kind: stageMetaspace, meta: m})
	case "ByteLevel":
		if c.AddPrefixSpace == nil {
			return fmt.Errorf("pre_tokenizer ByteLevel without add_prefix_space: %s", trim(raw))
		}
		t.byteLevel = true
		// use_regex defaults to true in HuggingFace.
		useRegex := c.UseRegex == nil || *c.UseRegex
		if *c.AddPrefixSpace || useRegex {
			t.stages = append(t.stages, stage{kind: stageByteLevel, split: gpt2Split, prefixSpace: *c.AddPrefixSpace, useRegex: useRegex})
		}
	case "":
		return errors.New("pre_tokenizer without a type")
	default:
		return fmt.Errorf("unsupported pre_tokenizer %q (not yet implemented)", c.Type)
	}
	return nil
}

// pretokenize runs stages[k:] on the piece s and encodes the pieces that
// come out. first: s starts at offset 0 of the input (Metaspace's
// prepend_scheme first).
func (t *Tokenizer) pretokenize(dst []int32, s string, k int, first bool) []int32 {
	if k == len(t.stages) {
		if t.byteLevel {
			return t.bpe(dst, s)
		}
		return t.spWord(dst, s)
	}
	st := &t.stages[k]
	switch st.kind {
	case stageSplit:
		for off := 0; off < len(s); {
			n := st.split.next(s[off:])
			dst = t.pretokenize(dst, s[off:off+n], k+1, first && off == 0)
			off += n
		}
	case stageSplitGeneral:
		st.general.split(s, func(start, end int) {
			dst = t.pretokenize(dst, s[start:end], k+1, first && start == 0)
		})
	case stageDigits:
		for off := 0; off < len(s); {
			n := nextDigits(s[off:], st.individual)
			dst = t.pretokenize(dst, s[off:off+n], k+1, first && off == 0)
			off += n
		}
	case stageMetaspace:
		dst = t.metaspace(dst, &st.meta, s, k, first)
	case stageByteLevel:
		if st.prefixSpace && s[0] != ' ' {
			s = " " + s
		}
		if !st.useRegex {
			return t.pretokenize(dst, s, k+1, first)
		}
		for off := 0; off < len(s); {
			n := st.split.next(s[off:])
			dst = t.pretokenize(dst, s[off:off+n], k+1, first && off == 0)
			off += n
		}
	default:
		panic(fmt.Sprintf("BUG: stage kind %d", st.kind))
	}
	return dst
}
