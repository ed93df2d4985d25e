// Package promtext gives saltus's /metrics the parts of the Prometheus text
// format that VictoriaMetrics/metrics leaves out: the text of each
// `# HELP` line, and a strict checker of the format for tests. It sits
// between the packages that define metrics (each describes its families
// with Describe, at init) and the admin listener's /metrics handler (which
// passes the exposition through Annotate).
//
// # Concurrency
//
// Describe runs during package initialization; Annotate, Help and Check
// are safe for concurrent use after it.
//
// VictoriaMetrics/metrics (v1.45.0) writes `# HELP name` with no text once
// metrics.ExposeMetadata(true) is set, for the metrics of a Set and for
// writers that call metrics.WriteMetadataIfNeeded alike; it has no way to
// attach a help text to a metric. Annotate fills the text in from the
// families described here, so every metric keeps its text next to its
// definition and no writer formats its own HELP line.
package promtext

import (
	"bytes"
	"strings"
	"sync"
)

var (
	mu   sync.RWMutex // guards help
	help = map[string]string{}
)

// Describe records the HELP text of metric families (family name, without
// labels or the _bucket/_sum/_count suffixes of a histogram → text that
// says what it counts, with its unit). Call it from a package's init. A
// family described twice with different texts panics: two packages claim
// one name.
func Describe(families map[string]string) {
	mu.Lock()
	defer mu.Unlock()
	for name, text := range families {
		if old, ok := help[name]; ok && old != text {
			panic("BUG: promtext: metric family " + name + " described twice: " + old + " | " + text)
		}
		if text == "" {
			panic("BUG: promtext: empty help text for " + name)
		}
		//saltus:allow R12 a registry of constant texts, filled from the packages' init functions (under mu), read-only after
		help[name] = text
	}
}

// Help returns the HELP text of family: described, or for the Go runtime's
// and the process's families (go_*, process_*, written by
// VictoriaMetrics/metrics) a text naming their source; "" otherwise.
func Help(family string) string {
	mu.RLock()
	text, ok := help[family]
	mu.RUnlock()
	switch {
	case ok:
		return text
	case strings.HasPrefix(family, "go_"):
		return "Go runtime metric (runtime/metrics and runtime.MemStats, as VictoriaMetrics/metrics exports it)."
	case strings.HasPrefix(family, "process_"):
		return "Process metric from /proc (as VictoriaMetrics/metrics exports it)."
	}
	return ""
}

// Annotate appends src to dst with the text of every bare `# HELP name`
// line filled in from Help (escaped as the format wants: \\ and \n). Lines
// with a text already, and families without one, are copied as they are;
// Check reports the latter.
func Annotate(dst, src []byte) []byte {
	const tag = "# HELP "
	for len(src) > 0 {
		line := src
		next := []byte(nil)
		if i := bytes.IndexByte(src, '\n'); i >= 0 {
			line, next = src[:i], src[i+1:]
		}
		dst = append(dst, line...)
		if name, ok := bytes.CutPrefix(line, []byte(tag)); ok && bytes.IndexByte(name, ' ') < 0 {
			if text := Help(string(name)); text != "" {
				dst = append(dst, ' ')
				dst = appendEscaped(dst, text)
			}
		}
		if next != nil { // the line had its newline
			dst = append(dst, '\n')
		}
		src = next
	}
	return dst
}

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			dst = append(dst, `\\`...)
		case '\n':
			dst = append(dst, `\n`...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// QuoteLabel returns s as a Prometheus label value in its quotes: `\`,
// `"` and a line feed escaped as the text format allows (nothing else
// is), other control characters and invalid UTF-8 replaced by '?'. For
// label values that come from outside (an engine's model names), where
// strconv.Quote's \x and \u escapes would make /metrics unreadable.
func QuoteLabel(s string) string {
	s = strings.ToValidUTF8(s, "?")
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '"':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, `\n`...)
		case c < 0x20 || c == 0x7f:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
