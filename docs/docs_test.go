// Package docs holds saltus's documents for developers (DESIGN.md,
// CONVENTIONS.md, ARCHITECTURE.md, ...) and the test that keeps every
// reference to them resolvable.
//
// TestLinks walks the repository (.git, node_modules and dot folders
// skipped; bench/results, the committed measurement history, included) and
// checks that every relative Markdown link [text](path) and
// [text](path#anchor) names an existing file, and its anchor a heading of
// that file (GitHub's slug rules). TestDesignRefs checks that every mention
// of DESIGN.md or CONVENTIONS.md in a .go or .md file (this file's
// examples aside) is either a path to the document (docs/DESIGN.md, a
// Markdown link) or a section reference written as DESIGN.md § Name, and
// that Name is a section of that document (the syntax is described at the
// top of docs/DESIGN.md).
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/saltus-lb/saltus/rules/leakcheck"
)

// TestMain checks for leaked goroutines, as every package does (RULES.md R1).
func TestMain(m *testing.M) { leakcheck.Main(m) }

// root is the repository, seen from this package's folder.
const root = ".."

// walk calls f for every file under root whose name ends in one of exts,
// with its path relative to root (slash-separated).
func walk(t *testing.T, exts []string, f func(rel string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.ContainsFunc(exts, func(e string) bool { return strings.HasSuffix(name, e) }) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		f(filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fence matches the opening or closing line of a fenced code block.
var fence = regexp.MustCompile("^\\s*(```|~~~)")

// mdLines returns a Markdown document's lines with fenced code blocks
// blanked (their lines kept, so line numbers hold) and inline code spans
// removed: links and headings inside code are not links or headings.
func mdLines(src string) []string {
	lines := strings.Split(src, "\n")
	in := false
	for i, l := range lines {
		switch {
		case fence.MatchString(l):
			in = !in
			lines[i] = ""
		case in:
			lines[i] = ""
		default:
			lines[i] = stripCode(l)
		}
	}
	return lines
}

// stripCode removes the inline code spans of one line (a backquote run
// closed by a run of the same length).
func stripCode(l string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(l, '`')
		if i < 0 {
			b.WriteString(l)
			return b.String()
		}
		b.WriteString(l[:i])
		n := i
		for n < len(l) && l[n] == '`' {
			n++
		}
		tick := l[i:n]
		j := strings.Index(l[n:], tick)
		if j < 0 {
			b.WriteString(l[i:]) // unclosed: literal backquotes
			return b.String()
		}
		l = l[n+j+len(tick):]
	}
}

// heading matches an ATX heading.
var heading = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)

// headings returns the text of a Markdown document's headings, in order.
func headings(src string) []string {
	var hs []string
	in := false
	for l := range strings.SplitSeq(src, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if in {
			continue
		}
		if m := heading.FindStringSubmatch(l); m != nil {
			hs = append(hs, m[2])
		}
	}
	return hs
}

// slug is GitHub's anchor for a heading: lower case, inline markup's
// characters and other punctuation dropped, spaces to hyphens.
func slug(h string) string {
	h = strings.ReplaceAll(h, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns every anchor GitHub gives a document's headings: the
// slug, and slug-N for its Nth repetition.
func anchors(src string) map[string]bool {
	a := map[string]bool{}
	seen := map[string]int{}
	for _, h := range headings(src) {
		s := slug(h)
		if n := seen[s]; n > 0 {
			a[s+"-"+strconv.Itoa(n)] = true
		} else {
			a[s] = true
		}
		seen[s]++
	}
	return a
}

// link matches an inline Markdown link or image: [text](target) or
// [text](target "title").
var link = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)

// linkProblems returns what is wrong with the relative links of the
// Markdown document rel (its text src); read gives another file's text
// ("", false when it does not exist).
func linkProblems(rel, src string, read func(rel string) (string, bool)) []string {
	var bad []string
	for i, l := range mdLines(src) {
		for _, m := range link.FindAllStringSubmatch(l, -1) {
			target := m[1]
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			at := rel + ":" + strconv.Itoa(i+1) + ": " + target
			dst := rel
			if file != "" {
				dst = filepath.ToSlash(filepath.Join(filepath.Dir(rel), file))
				if strings.HasPrefix(dst, "../") {
					bad = append(bad, at+": outside the repository")
					continue
				}
			}
			text, ok := read(dst)
			if !ok {
				bad = append(bad, at+": no such file")
				continue
			}
			if anchor != "" && !strings.HasSuffix(dst, ".md") {
				bad = append(bad, at+": an anchor into a file that is not Markdown")
				continue
			}
			if anchor != "" && !anchors(text)[anchor] {
				bad = append(bad, at+": no heading with anchor #"+anchor)
			}
		}
	}
	return bad
}

// refDocs are the documents a reference may name, by the name it uses.
var refDocs = []string{"DESIGN.md", "CONVENTIONS.md"}

// mention matches a mention of one of refDocs, with what precedes it.
var mention = regexp.MustCompile(`(\S*?)\b(DESIGN|CONVENTIONS)\.md`)

// joinComments joins a Go file's comment lines (and a Markdown file's
// lines) into one text, so that a reference broken over two lines reads
// as one.
var joinComments = regexp.MustCompile(`\s*\n\s*(//\s?)?`)

// sectionNames returns the names a reference may use for the headings of
// a document: a heading's whole text, and the part before its first colon
// ("Stage 4" for "Stage 4: tokenize").
func sectionNames(src string) []string {
	var names []string
	for _, h := range headings(src) {
		names = append(names, h)
		if before, _, ok := strings.Cut(h, ":"); ok {
			names = append(names, strings.TrimSpace(before))
		}
	}
	return names
}

// refProblems returns what is wrong with the DESIGN.md and CONVENTIONS.md
// mentions of file rel (its text src); sections gives each document's
// section names.
func refProblems(rel, src string, sections map[string][]string) []string {
	var bad []string
	text := joinComments.ReplaceAllString(src, " ")
	for _, loc := range mention.FindAllStringSubmatchIndex(text, -1) {
		before := text[loc[2]:loc[3]]
		doc := text[loc[4]:loc[5]] + ".md"
		after := text[loc[1]:]
		at := rel + ": " + strings.TrimSpace(snippet(text, loc[4]))
		switch {
		case strings.HasSuffix(before, "/"), strings.HasSuffix(before, "]("):
			continue // the document itself, by its path or as a link's target
		case strings.HasSuffix(before, "[") && strings.HasPrefix(after, "]("):
			continue // a link's text: its target is checked by TestLinks
		}
		name, ok := strings.CutPrefix(after, " § ")
		if !ok {
			bad = append(bad, at+": write a path (docs/"+doc+") or a section reference ("+doc+" § Name)")
			continue
		}
		if !slices.ContainsFunc(sections[doc], func(s string) bool { return namesSection(name, s) }) {
			bad = append(bad, at+": "+doc+" has no section by this name")
		}
	}
	return bad
}

// namesSection reports whether the text after "§ " starts with the
// section name s, ending there (not in the middle of a word).
func namesSection(after, s string) bool {
	rest, ok := strings.CutPrefix(after, s)
	if !ok || s == "" {
		return false
	}
	if rest == "" {
		return true
	}
	r := []rune(rest)[0]
	return !unicode.IsLetter(r) && !unicode.IsDigit(r)
}

// snippet returns a little text from i on, for an error message.
func snippet(text string, i int) string {
	end := min(len(text), i+60)
	return text[i:end]
}

// readRepo reads a file of the repository by its relative path; a folder
// exists too (GitHub shows its listing), with no text.
func readRepo(rel string) (string, bool) {
	path := filepath.Join(root, filepath.FromSlash(rel))
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return "", true
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return string(b), true
}

func TestLinks(t *testing.T) {
	t.Parallel()
	n := 0
	walk(t, []string{".md"}, func(rel string) {
		src, _ := readRepo(rel)
		for _, p := range linkProblems(rel, src, readRepo) {
			t.Error(p)
		}
		n++
	})
	if n < 5 {
		t.Fatalf("found %d Markdown files: is %s the repository?", n, root)
	}
}

func TestDesignRefs(t *testing.T) {
	t.Parallel()
	sections := map[string][]string{}
	for _, doc := range refDocs {
		src, ok := readRepo("docs/" + doc)
		if !ok {
			t.Fatalf("docs/%s is missing", doc)
		}
		sections[doc] = sectionNames(src)
	}
	refs := 0
	walk(t, []string{".go", ".md"}, func(rel string) {
		if rel == "docs/docs_test.go" {
			return // its examples are broken on purpose (TestCheckersFail)
		}
		src, _ := readRepo(rel)
		refs += strings.Count(src, " § ")
		for _, p := range refProblems(rel, src, sections) {
			t.Error(p)
		}
	})
	if refs < 20 {
		t.Errorf("only %d section references in the repository: is the walk reading it?", refs)
	}
}

// TestCheckersFail shows both checks catching what they are for.
func TestCheckersFail(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"docs/A.md": "# Top\n\n## Shards (`shard`) and loops\n\n## Dup\n\n## Dup\n\n```sh\n# not a heading\n```\n",
		"x/b.png":   "",
	}
	read := func(rel string) (string, bool) { s, ok := files[rel]; return s, ok }
	links := []struct {
		name, src string
		bad       int
	}{
		{"file", "see [a](A.md)", 0},
		{"file and anchor", "see [a](A.md#shards-shard-and-loops)", 0},
		{"repeated heading", "[a](A.md#dup) and [b](A.md#dup-1)", 0},
		{"image", "![shot](../x/b.png)", 0},
		{"external", "[go](https://go.dev/x.md) [m](mailto:a@b)", 0},
		{"in code", "`[a](nowhere.md)`\n```\n[a](nowhere.md)\n```\n", 0},
		{"own anchor", "[t](#top)", 0},
		{"missing file", "see [a](B.md)", 1},
		{"missing anchor", "see [a](A.md#shards)", 1},
		{"heading in code is no anchor", "[a](A.md#not-a-heading)", 1},
		{"third repetition", "[a](A.md#dup-2)", 1},
		{"outside", "[a](../../etc/passwd)", 1},
		{"anchor into non-Markdown", "[a](../x/b.png#top)", 1},
	}
	for _, c := range links {
		t.Run("link/"+c.name, func(t *testing.T) {
			if got := linkProblems("docs/A.md", "# Top\n"+c.src, read); len(got) != c.bad {
				t.Errorf("%q: %d problems %q, want %d", c.src, len(got), got, c.bad)
			}
		})
	}
	sections := map[string][]string{
		"DESIGN.md":      sectionNames("# saltus\n## Shards\n### Stage 1: accept\n### Stage 10: gossip\n## Decoding untrusted bodies\n"),
		"CONVENTIONS.md": sectionNames("## Concurrency\n"),
	}
	refs := []struct {
		name, src string
		bad       int
	}{
		{"section", "// pinning (DESIGN.md § Shards)", 0},
		{"stage by its number", "// It is DESIGN.md § Stage 10: the owner", 0},
		{"stage 1 is not stage 10's prefix", "// DESIGN.md § Stage 1 ends", 0},
		{"over two comment lines", "// bodies (DESIGN.md §\n// Decoding untrusted bodies): a", 0},
		{"conventions", "CONVENTIONS.md § Concurrency.", 0},
		{"path", "see docs/DESIGN.md and [c](docs/CONVENTIONS.md)", 0},
		{"link", "[DESIGN.md](DESIGN.md) and [CONVENTIONS.md § Concurrency](CONVENTIONS.md#concurrency)", 0},
		{"no such section", "// (DESIGN.md § Shard)", 1},
		{"no such stage", "// DESIGN.md § Stage 11", 1},
		{"old comma syntax", "// (DESIGN.md, Shards)", 1},
		{"old quoted syntax", "// DESIGN.md \"Decoding untrusted bodies\"", 1},
		{"old stage syntax", "// stage 4 of DESIGN.md", 1},
		{"bare mention", "// as DESIGN.md asks", 1},
		{"wrong document", "// CONVENTIONS.md § Shards", 1},
	}
	for _, c := range refs {
		t.Run("ref/"+c.name, func(t *testing.T) {
			if got := refProblems("x.go", c.src, sections); len(got) != c.bad {
				t.Errorf("%q: %d problems %q, want %d", c.src, len(got), got, c.bad)
			}
		})
	}
	if got, want := slug("Route table across restarts (`--state-dir`)"), "route-table-across-restarts---state-dir"; got != want {
		t.Errorf("slug = %q, want %q", got, want)
	}
}
