package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// metaspace is the Metaspace pre-tokenizer of SentencePiece-style models:
// spaces become the replacement (U+2581), which is prepended to the
// segment per prepend_scheme unless it starts with one, and with split the
// text is cut before every replacement.
type metaspace struct {
	rep    string
	scheme string // "always", "first" (only the segment at offset 0), "never"
	split  bool
}

func (t *Tokenizer) loadMetaspace(raw json.RawMessage) error {
	var c struct {
		Replacement   string `json:"replacement"`
		PrependScheme string `json:"prepend_scheme"`
		Split         bool   `json:"split"`
		// Before tokenizers 0.19 the scheme was a boolean.
		AddPrefixSpace *bool `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("cannot parse Metaspace pre_tokenizer: %w", err)
	}
	if c.Replacement == "" {
		return fmt.Errorf("unsupported pre_tokenizer: Metaspace without a replacement: %s", trim(raw))
	}
	if c.PrependScheme == "" && c.AddPrefixSpace != nil {
		c.PrependScheme = "never"
		if *c.AddPrefixSpace {
			c.PrependScheme = "always"
		}
	}
	switch c.PrependScheme {
	case "always", "first", "never":
	default:
		return fmt.Errorf("unsupported Metaspace prepend_scheme %q", c.PrependScheme)
	}
	t.meta = &metaspace{rep: c.Replacement, scheme: c.PrependScheme, split: c.Split}
	return nil
}

func (t *Tokenizer) metaspace(dst []int32, s string, first bool) []int32 {
	m := t.meta
	s = strings.ReplaceAll(s, " ", m.rep)
	if (m.scheme == "always" || (m.scheme == "first" && first)) && !strings.HasPrefix(s, m.rep) {
		s = m.rep + s
	}
	if !m.split {
		return t.spWord(dst, s)
	}
	// Cut before every replacement, which starts the next piece.
	for len(s) > 0 {
		start := 0
		if strings.HasPrefix(s, m.rep) {
			start = len(m.rep)
		}
		j := strings.Index(s[start:], m.rep)
		if j < 0 {
			return t.spWord(dst, s)
		}
		dst = t.spWord(dst, s[:start+j])
		s = s[start+j:]
	}
	return dst
}
