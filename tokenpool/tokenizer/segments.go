package tokenizer

// What the chat renderer (package tokenpool/chat) needs: the ids of the
// special tokens its templates emit, and an encoder for one text segment
// of a larger rendered prompt.

// AddedToken describes one of the tokenizer's added tokens.
type AddedToken struct {
	ID int32
	// LStrip and RStrip: a match absorbs the whitespace on that side, so a
	// renderer must drop it from the neighbouring text segment to tokenize
	// as the whole prompt would.
	LStrip, RStrip bool
}

// LookupAdded returns the added token spelled exactly content. It scans
// the added tokens: call it when building a renderer, not per request.
// Any goroutine.
func (t *Tokenizer) LookupAdded(content string) (AddedToken, bool) {
	for _, a := range t.added {
		if a.content == content {
			return AddedToken{ID: a.id, LStrip: a.lstrip, RStrip: a.rstrip}, true
		}
	}
	return AddedToken{}, false
}

// AddedTokenID returns the id of the added token spelled exactly content.
// Any goroutine.
func (t *Tokenizer) AddedTokenID(content string) (int32, bool) {
	a, ok := t.LookupAdded(content)
	return a.ID, ok
}

// EncodeSegment is Encode for a text segment that starts at byte offset 0
// of the whole input (atStart) or later, right after an added token. The
// position matters only to a Metaspace pre-tokenizer with prepend_scheme
// "first", which HuggingFace applies to the split at original offset 0
// alone; for every other tokenizer EncodeSegment equals Encode. Encoding
// the maximal text runs between added tokens one by one with the right
// atStart gives the ids of the whole input, which is what lets saltus
// cache and key each chat message separately. Any goroutine.
func (t *Tokenizer) EncodeSegment(dst []int32, text string, atStart bool) []int32 {
	return t.encode(dst, text, atStart)
}
