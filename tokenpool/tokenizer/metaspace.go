package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// metaspace is the Metaspace pre-tokenizer of SentencePiece-style models:
// spaces become the replacement (U+2581), which is prepended to the piece
// per prepend_scheme unless it starts with one, and with split the piece is
// cut before every replacement.
type metaspace struct {
	rep    string
	scheme string // "always", "first" (only the piece at offset 0), "never"
	split  bool
}

func parseMetaspace(raw json.RawMessage) (metaspace, error) {
	var c struct {
		Replacement   string `json:"replacement"`
		PrependScheme string `json:"prepend_scheme"`
		Split         bool   `json:"split"`
		// Before tokenizers 0.19 the scheme was a boolean.
		AddPrefixSpace *bool `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return metaspace{}, fmt.Errorf("cannot parse Metaspace pre_tokenizer: %w", err)
	}
	if c.Replacement == "" {
		return metaspace{}, fmt.Errorf("unsupported pre_tokenizer: Metaspace without a replacement: %s", trim(raw))
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
		return metaspace{}, fmt.Errorf("unsupported Metaspace prepend_scheme %q", c.PrependScheme)
	}
	return metaspace{rep: c.Replacement, scheme: c.PrependScheme, split: c.Split}, nil
}

// metaspace rewrites the piece s and hands its pieces to stages[k+1:].
func (t *Tokenizer) metaspace(dst []int32, m *metaspace, s string, k int, first bool) []int32 {
	s = strings.ReplaceAll(s, " ", m.rep)
	if (m.scheme == "always" || (m.scheme == "first" && first)) && !strings.HasPrefix(s, m.rep) {
		s = m.rep + s
	}
	if !m.split {
		return t.pretokenize(dst, s, k+1, first)
	}
	// Cut before every replacement, which starts the next piece.
	for off := 0; off < len(s); {
		start := off
		if strings.HasPrefix(s[off:], m.rep) {
			start += len(m.rep)
		}
		end := len(s)
		if j := strings.Index(s[start:], m.rep); j >= 0 {
			end = start + j
		}
		dst = t.pretokenize(dst, s[off:end], k+1, first && off == 0)
		off = end
	}
	return dst
}
