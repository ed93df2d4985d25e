package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// behavior is a Split pre-tokenizer's SplitDelimiterBehavior: what becomes
// of the pattern's matches.
type behavior uint8

const (
	isolated           behavior = iota // each match its own piece
	removed                            // matches dropped
	mergedWithPrevious                 // a match joins the piece before it
	mergedWithNext                     // a match joins the piece after it
	contiguous                         // consecutive matches form one piece
)

func parseBehavior(s string) (behavior, error) {
	switch s {
	case "Isolated":
		return isolated, nil
	case "Removed":
		return removed, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, fmt.Errorf("unsupported Split behavior %q", s)
}

// splitter is a Split pre-tokenizer in its general form: a pattern (a
// literal string, a hand matcher or a regexp2 regex), a behavior and
// invert. The common case, an Isolated hand-matched regex, does not come
// here: stageSplit runs it directly.
type splitter struct {
	literal string        // a String pattern, when re and hand are unset
	hand    *splitPattern // a hand-matched regex
	re      *regexPattern
	how     behavior
	invert  bool
}

// matches calls emit for the pattern's matches in s, in order (see
// regexPattern.find for the iteration rules).
func (sp *splitter) matches(s string, emit func(start, end int)) {
	switch {
	case sp.hand != nil:
		// No hand-matched pattern matches the empty string: a position
		// without a match is passed over.
		starts := sp.hand.asciiStarts
		for off := 0; off < len(s); {
			if c := s[off]; starts != nil && c < utf8.RuneSelf && !starts[c] {
				off++
				continue
			}
			if n := sp.hand.match(s, off); n > 0 {
				emit(off, off+n)
				off += n
				continue
			}
			_, w := at(s, off)
			off += w
		}
	case sp.re != nil:
		sp.re.find(s, emit)
	case sp.literal == "":
		// HuggingFace: an empty String pattern matches nowhere.
	default:
		for off := 0; ; {
			k := strings.Index(s[off:], sp.literal)
			if k < 0 {
				return
			}
			emit(off+k, off+k+len(sp.literal))
			off += k + len(sp.literal)
		}
	}
}

// piece is a span of s with whether the pattern matched it (after invert).
type piece struct {
	start, end int
	match      bool
}

// split cuts s as HuggingFace's NormalizedString::split does with the
// splitter's behavior and calls out for each non-empty piece, in order:
// the matches and the spans between them alternate (an empty match is a
// zero-length match piece), invert swaps which is which, then the
// behavior merges or drops pieces.
func (sp *splitter) split(s string, out func(start, end int)) {
	// emit applies the behavior to the stream of pieces, holding back
	// the last piece (pending) that the next one may extend. carry: the
	// start of a mergedWithNext match waiting for its next piece.
	var pending piece
	havePending, prevMatch := false, false
	flush := func() {
		if havePending && pending.end > pending.start {
			out(pending.start, pending.end)
		}
		havePending = false
	}
	var all []piece // mergedWithNext looks one piece ahead
	emit := func(p piece) {
		switch sp.how {
		case isolated:
			if p.end > p.start {
				out(p.start, p.end)
			}
		case removed:
			if !p.match && p.end > p.start {
				out(p.start, p.end)
			}
		case contiguous:
			if havePending && p.match == prevMatch {
				pending.end = p.end
			} else {
				flush()
				pending, havePending = p, true
			}
			prevMatch = p.match
		case mergedWithPrevious:
			if p.match && !prevMatch && havePending {
				pending.end = p.end
			} else {
				flush()
				pending, havePending = p, true
			}
			prevMatch = p.match
		case mergedWithNext:
			all = append(all, p)
		}
	}
	prev := 0
	sp.matches(s, func(start, end int) {
		if start != prev {
			emit(piece{prev, start, sp.invert})
		}
		emit(piece{start, end, !sp.invert})
		prev = end
	})
	if prev != len(s) {
		emit(piece{prev, len(s), sp.invert})
	}
	if sp.how == mergedWithNext {
		// From the right: a match whose right neighbour is not a match
		// joins that neighbour.
		next := false
		for i := len(all) - 1; i >= 0; i-- {
			p := all[i]
			if p.match && !next && i < len(all)-1 {
				all[i+1].start = p.start
				all[i].end = p.start // emptied: dropped below
			}
			next = p.match
		}
		for _, p := range all {
			if p.end > p.start {
				out(p.start, p.end)
			}
		}
		return
	}
	flush()
}
