package jinja

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

type filterFunc func(st *state, v any, a *args) (any, error)

// filterByName is jinja2's filter of that name (transformers' tojson
// replacing jinja2's), or nil.
func filterByName(name string) filterFunc {
	f := filterImpl(name)
	switch name {
	case "safe", "escape", "e", "forceescape", "default", "d", "string", "":
		return f // they keep a markup value a Markup, as markupsafe's
	}
	if f == nil {
		return nil
	}
	switch name {
	case "trim", "upper", "lower", "capitalize", "title", "center", "indent", "reverse", "last":
		// soft_str keeps a Markup, and its str methods return Markup
		return func(st *state, v any, a *args) (any, error) {
			_, isMarkup := v.(markup)
			r, err := f(st, unmark(v), a.unmarked())
			if isMarkup && err == nil {
				r = toMarkup(r)
			}
			return r, err
		}
	case "format":
		// Markup % args escapes the arguments
		return func(st *state, v any, a *args) (any, error) {
			if _, isMarkup := v.(markup); isMarkup && len(a.kwNames) == 0 {
				var arg any = tuple(a.pos)
				if len(a.pos) == 1 {
					arg = tuple{a.pos[0]}
				}
				return binop("%", v, arg)
			}
			return f(st, unmark(v), a.unmarked())
		}
	}
	// Other filters see a markup value as its text, as jinja2's do
	// without autoescape (replace, join) or after str().
	return func(st *state, v any, a *args) (any, error) { return f(st, unmark(v), a.unmarked()) }
}

func filterImpl(name string) filterFunc {
	switch name {
	case "trim":
		return fTrim
	case "tojson":
		return fToJSON
	case "length", "count":
		return fLength
	case "upper":
		return func(_ *state, v any, _ *args) (any, error) { return strings.ToUpper(toStr(v)), nil }
	case "lower":
		return func(_ *state, v any, _ *args) (any, error) { return strings.ToLower(toStr(v)), nil }
	case "capitalize":
		return func(_ *state, v any, _ *args) (any, error) { return capitalize(toStr(v)), nil }
	case "title":
		return fTitle
	case "default", "d":
		return fDefault
	case "join":
		return fJoin
	case "first":
		return fFirst
	case "last":
		return fLast
	case "list":
		return func(_ *state, v any, _ *args) (any, error) {
			items, err := iterate(v)
			return slices.Clone(items), err
		}
	case "string":
		return func(_ *state, v any, _ *args) (any, error) {
			if m, ok := v.(markup); ok {
				return m, nil
			}
			return toStr(v), nil
		}
	case "safe":
		return func(_ *state, v any, _ *args) (any, error) { return markup(toStr(v)), nil }
	case "int":
		return fInt
	case "float":
		return fFloat
	case "abs":
		return fAbs
	case "round":
		return fRound
	case "replace":
		return fReplace
	case "escape", "e":
		return func(_ *state, v any, _ *args) (any, error) {
			if m, ok := v.(markup); ok {
				return m, nil // already safe: escape leaves a Markup as it is
			}
			return markup(htmlEscape(toStr(v))), nil
		}
	case "forceescape":
		return func(_ *state, v any, _ *args) (any, error) { return markup(htmlEscape(toStr(v))), nil }
	case "indent":
		return fIndent
	case "items":
		return fItems
	case "dictsort":
		return fDictsort
	case "map":
		return fMap
	case "select", "reject":
		return func(st *state, v any, a *args) (any, error) {
			return lazy("select_or_reject", func() ([]any, error) { return selectItems(st, v, a, false, name == "select") }), nil
		}
	case "selectattr", "rejectattr":
		return func(st *state, v any, a *args) (any, error) {
			return lazy("select_or_reject", func() ([]any, error) { return selectItems(st, v, a, true, name == "selectattr") }), nil
		}
	case "unique":
		return fUnique
	case "min", "max":
		return func(_ *state, v any, a *args) (any, error) { return minMax(v, a, name == "max") }
	case "sum":
		return fSum
	case "reverse":
		return fReverse
	case "sort":
		return fSort
	case "batch":
		return fBatch
	case "wordcount":
		return func(_ *state, v any, _ *args) (any, error) {
			return len(strings.FieldsFunc(toStr(v), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' })), nil
		}
	case "format":
		return func(_ *state, v any, a *args) (any, error) {
			if len(a.kwNames) > 0 {
				return nil, errorf("format: keyword arguments are not supported")
			}
			if len(a.pos) == 1 {
				return printf(toStr(v), tuple{a.pos[0]})
			}
			return printf(toStr(v), tuple(a.pos))
		}
	case "center":
		return func(_ *state, v any, a *args) (any, error) {
			w, err := argInt(a, 0, "width", 80)
			if err != nil {
				return nil, err
			}
			return pad(toStr(v), w, " ", "center")
		}
	case "attr":
		return func(_ *state, v any, a *args) (any, error) {
			n, ok := a.get(0, "name")
			s, isStr := n.(string)
			if !ok || !isStr {
				return nil, errorf("attr takes a name")
			}
			return getattr(v, s)
		}
	}
	return nil
}

func fTrim(_ *state, v any, a *args) (any, error) {
	s := toStr(v)
	chars, ok, err := argStr(a, 0, "chars", "trim")
	if err != nil {
		return nil, err
	}
	if ok {
		return strings.Trim(s, chars), nil
	}
	return strings.TrimFunc(s, pySpace), nil
}

func fLength(_ *state, v any, _ *args) (any, error) {
	n, ok := pyLen(v)
	if !ok {
		return nil, errorf("object of type '%s' has no len()", typeName(v))
	}
	return n, nil
}

// fTitle is jinja2's title filter: each word's first character upper
// case, the rest lower case, words split at whitespace, "-", "(", "{",
// "[" and "<".
func fTitle(_ *state, v any, _ *args) (any, error) {
	s := toStr(v)
	var b strings.Builder
	start := true
	for _, r := range s {
		if pySpace(r) || strings.ContainsRune("-({[<", r) {
			b.WriteRune(r)
			start = true
			continue
		}
		if start {
			b.WriteRune(unicode.ToTitle(r))
		} else {
			b.WriteRune(unicode.ToLower(r))
		}
		start = false
	}
	return b.String(), nil
}

func fDefault(_ *state, v any, a *args) (any, error) {
	def, ok := a.get(0, "default_value")
	if !ok {
		def = ""
	}
	boolean := false
	if b, ok := a.get(1, "boolean"); ok {
		boolean = truthy(b)
	}
	if _, u := v.(Undefined); u || boolean && !truthy(v) {
		return def, nil
	}
	return v, nil
}

// attrGetter reads a dotted attribute ("a.b", "0") of an item, as
// jinja2's make_attrgetter: integer parts index.
func attrGetter(item any, attr any) (any, error) {
	s, ok := attr.(string)
	if !ok {
		return getitem(item, attr)
	}
	var err error
	for _, part := range strings.Split(s, ".") {
		if n, e := strconv.Atoi(part); e == nil {
			item, err = getitem(item, n)
		} else {
			item, err = getitem(item, part)
		}
		if err != nil {
			return nil, err
		}
	}
	return item, nil
}

func fJoin(_ *state, v any, a *args) (any, error) {
	sep := ""
	if d, ok := a.get(0, "d"); ok {
		sep = toStr(d)
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr, hasAttr := a.get(1, "attribute")
	parts := make([]string, len(items))
	for i, it := range items {
		if hasAttr && attr != nil {
			if it, err = attrGetter(it, attr); err != nil {
				return nil, err
			}
		}
		parts[i] = toStr(it)
	}
	return joinCapped(parts, sep)
}

func fFirst(_ *state, v any, _ *args) (any, error) {
	if g, ok := v.(*generator); ok {
		if err := g.load(); err != nil {
			return nil, err
		}
		if g.pos == len(g.items) {
			return Undefined{name: "first"}, nil
		}
		g.pos++
		return g.items[g.pos-1], nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{name: "first"}, nil
	}
	return norm(items[0]), nil
}

func fLast(_ *state, v any, _ *args) (any, error) {
	switch v.(type) {
	case []any, tuple, string, *Map:
	case Undefined:
		return Undefined{name: "last"}, nil
	default:
		return nil, errorf("'%s' object is not reversible", typeName(v))
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{name: "last"}, nil
	}
	return norm(items[len(items)-1]), nil
}

// pyInt is Python's int() of a string: an optional sign, digits and
// underscores between them, surrounding whitespace.
func pyInt(s string, base int) (int, bool) {
	s = strings.TrimFunc(s, pySpace)
	if strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
		return 0, false
	}
	s = strings.ReplaceAll(s, "_", "")
	sign := ""
	if s != "" && (s[0] == '-' || s[0] == '+') {
		sign, s = s[:1], s[1:]
	}
	if len(s) > 2 && s[0] == '0' {
		// Python takes the prefix of its base (or of any, for base 0).
		switch p := s[1] | 0x20; {
		case p == 'x' && base == 16, p == 'o' && base == 8, p == 'b' && base == 2:
			s = s[2:]
		}
	}
	n, err := strconv.ParseInt(sign+s, base, 64)
	return int(n), err == nil
}

func pyFloatParse(s string) (float64, bool) {
	s = strings.TrimFunc(s, pySpace)
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case "inf", "infinity", "nan":
	default:
		if strings.ContainsAny(s, "xXpP") || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	return f, err == nil || isRange(err)
}

func fInt(_ *state, v any, a *args) (any, error) {
	if u, ok := v.(Undefined); ok {
		return nil, u.err() // int(undefined) fails, unlike int("x")
	}
	def, ok := a.get(0, "default")
	if !ok {
		def = 0
	}
	base, err := argInt(a, 1, "base", 10)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case int:
		return x, nil
	case bool:
		n, _ := index(x) // a bool is an index
		return n, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) || math.Abs(x) > 9e18 {
			return def, nil
		}
		return int(x), nil
	case string:
		if n, ok := pyInt(x, base); ok {
			return n, nil
		}
		if f, ok := pyFloatParse(x); ok && !math.IsInf(f, 0) && !math.IsNaN(f) && math.Abs(f) < 9e18 {
			return int(f), nil
		}
	}
	return def, nil
}

func fFloat(_ *state, v any, a *args) (any, error) {
	if u, ok := v.(Undefined); ok {
		return nil, u.err() // as int
	}
	def, ok := a.get(0, "default")
	if !ok {
		def = 0.0
	}
	switch x := v.(type) {
	case int:
		return float64(x), nil
	case bool:
		n, _ := index(x) // a bool is an index
		return float64(n), nil
	case float64:
		return x, nil
	case string:
		if f, ok := pyFloatParse(x); ok {
			return f, nil
		}
	}
	return def, nil
}

func fAbs(_ *state, v any, _ *args) (any, error) {
	i, f, isF, ok := number(v)
	if !ok {
		return nil, errorf("bad operand type for abs(): '%s'", typeName(v))
	}
	if isF {
		return math.Abs(f), nil
	}
	if i == math.MinInt {
		return nil, errorf("integer overflow")
	}
	return abs(i), nil
}

// fRound is jinja2's round: "common" rounds half to even as Python's
// round does (an int stays an int), "floor" and "ceil" give floats.
func fRound(_ *state, v any, a *args) (any, error) {
	prec, err := argInt(a, 0, "precision", 0)
	if err != nil {
		return nil, err
	}
	method := "common"
	if m, ok := a.get(1, "method"); ok {
		method = toStr(m)
	}
	i, f, isF, ok := number(v)
	if !ok {
		return nil, errorf("type %s doesn't define __round__ method", typeName(v))
	}
	if !isF {
		if method == "common" {
			if prec >= 0 {
				return i, nil
			}
		}
		f = float64(i)
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "common":
		if prec > 300 || math.IsInf(f, 0) || math.IsNaN(f) {
			return f, nil
		}
		// strconv rounds the decimal digits half to even, as Python.
		if prec >= 0 {
			r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'f', prec, 64), 64)
			if err != nil {
				return nil, errorf("round: %v", err) // FormatFloat wrote a finite float: never
			}
			return r, nil
		}
		return math.RoundToEven(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	case "ceil":
		return math.Ceil(f*p) / p, nil
	}
	return nil, errorf("method must be common, ceil or floor")
}

func fReplace(_ *state, v any, a *args) (any, error) {
	oldV, ok1 := a.get(0, "old")
	newV, ok2 := a.get(1, "new")
	if !ok1 || !ok2 {
		return nil, errorf("replace takes old and new")
	}
	n, err := argInt(a, 2, "count", -1)
	if err != nil {
		return nil, err
	}
	return replace(toStr(v), toStr(oldV), toStr(newV), n)
}

func htmlEscape(s string) string {
	if !strings.ContainsAny(s, `&<>'"`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '\'':
			b.WriteString("&#39;")
		case '"':
			b.WriteString("&#34;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// fIndent is jinja2's indent: every line but the first (and blank ones,
// unless blank) indented by width spaces or the width string.
func fIndent(_ *state, v any, a *args) (any, error) {
	s, ok := v.(string)
	if !ok {
		if u, isU := v.(Undefined); isU {
			return nil, u.err()
		}
		// jinja2 appends "\n" to the value: only a string takes it.
		return nil, errorf("unsupported operand type(s) for +=: '%s' and 'str'", typeName(v))
	}
	ind := "    "
	if w, ok := a.get(0, "width"); ok {
		if ws, isStr := w.(string); isStr {
			ind = ws
		} else if n, isInt := index(w); isInt {
			if n > MaxOutput {
				return nil, errorf("indent width too large")
			}
			ind = strings.Repeat(" ", max(n, 0))
		}
	}
	first, blank := false, false
	if f, ok := a.get(1, "first"); ok {
		first = truthy(f)
	}
	if b, ok := a.get(2, "blank"); ok {
		blank = truthy(b)
	}
	lines := splitLines(s+"\n", false)
	if len(s)+len(lines)*len(ind) > MaxOutput {
		return nil, errorf("string longer than %d bytes", MaxOutput)
	}
	var b strings.Builder
	if blank {
		for i, l := range lines {
			if i > 0 {
				b.WriteString("\n" + ind)
			}
			b.WriteString(l)
		}
	} else {
		b.WriteString(lines[0])
		for _, l := range lines[1:] {
			b.WriteByte('\n')
			if l != "" {
				b.WriteString(ind)
			}
			b.WriteString(l)
		}
	}
	out := b.String()
	if first {
		out = ind + out
	}
	if len(out) > MaxOutput {
		return nil, errorf("string longer than %d bytes", MaxOutput)
	}
	return out, nil
}

func itemPairs(v any) ([]any, error) {
	switch x := v.(type) {
	case Undefined:
		return nil, nil
	case *Map:
		items, err := dictMethod(x, "items", &args{})
		if err != nil {
			return nil, err
		}
		return items.([]any), nil
	}
	return nil, errorf("Can only get item pairs from a mapping.")
}

// sortKey is a value as sort and dictsort compare it: strings lower-cased
// unless case-sensitive.
func sortKey(v any, caseSensitive bool) any {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

// sortItems sorts items by key (stable, as Python's sort); an error of a
// comparison (mixed types) is returned.
func sortItems(items []any, key func(any) (any, error), reverse bool) ([]any, error) {
	keys := make([]any, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	slices.SortStableFunc(idx, func(x, y int) int {
		// Python compares sort's keys (one-item lists in jinja2's sort)
		// by == first: equal undefined values sort without an error.
		if equal(keys[x], keys[y], 0) {
			return 0
		}
		c, err := compare(keys[x], keys[y], "<")
		if err != nil && cmpErr == nil {
			cmpErr = err
		}
		if reverse {
			return -c
		}
		return c
	})
	if cmpErr != nil {
		return nil, cmpErr
	}
	out := make([]any, len(items))
	for i, k := range idx {
		out[i] = items[k]
	}
	return out, nil
}

func fDictsort(_ *state, v any, a *args) (any, error) {
	m, ok := v.(*Map)
	if !ok {
		return nil, errorf("You can only sort mappings.")
	}
	cs, by, rev := false, "key", false
	if x, ok := a.get(0, "case_sensitive"); ok {
		cs = truthy(x)
	}
	if x, ok := a.get(1, "by"); ok {
		by = toStr(x)
	}
	if x, ok := a.get(2, "reverse"); ok {
		rev = truthy(x)
	}
	pos := 0
	switch by {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, errorf("You can only sort by either 'key' or 'value'")
	}
	items, err := dictMethod(m, "items", &args{})
	if err != nil {
		return nil, err
	}
	return sortItems(items.([]any), func(it any) (any, error) { return sortKey(it.(tuple)[pos], cs), nil }, rev)
}

func mapItems(st *state, v any, a *args) ([]any, error) {
	if !truthy(v) {
		return nil, nil // jinja2's map walks only a true value
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	if attr, ok := a.kw("attribute"); ok {
		def, hasDef := a.kw("default")
		for i, it := range items {
			r, err := attrGetter(it, attr)
			if err != nil {
				return nil, err
			}
			if _, u := r.(Undefined); u && hasDef {
				r = def
			}
			out[i] = r
		}
		return out, nil
	}
	if len(a.pos) == 0 {
		return nil, errorf("map requires a filter argument")
	}
	name, _ := a.pos[0].(string)
	f := filterByName(name)
	if f == nil {
		return nil, errorf("No filter named '%s'", name)
	}
	rest := &args{pos: a.pos[1:], kwNames: a.kwNames, kwVals: a.kwVals}
	for i, it := range items {
		if out[i], err = f(st, it, rest); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func selectItems(st *state, v any, a *args, byAttr, keep bool) ([]any, error) {
	if !truthy(v) {
		return nil, nil // as map
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	pos := a.pos
	var attr any
	if byAttr {
		if len(pos) == 0 {
			return nil, errorf("Missing parameter for attribute name")
		}
		attr, pos = pos[0], pos[1:]
	}
	var test testFunc
	rest := &args{kwNames: a.kwNames, kwVals: a.kwVals}
	if len(pos) > 0 {
		name, _ := pos[0].(string)
		if test = testByName(name); test == nil {
			return nil, errorf("No test named '%s'", name)
		}
		rest.pos = pos[1:]
	}
	out := []any{}
	for _, it := range items {
		x := it
		if byAttr {
			if x, err = attrGetter(it, attr); err != nil {
				return nil, err
			}
		}
		ok := truthy(x)
		if test != nil {
			if ok, err = test(st, x, rest); err != nil {
				return nil, err
			}
		}
		if ok == keep {
			out = append(out, it)
		}
	}
	return out, nil
}

func keyFunc(a *args, attrPos, csPos int) func(any) (any, error) {
	cs := false
	if x, ok := a.get(csPos, "case_sensitive"); ok {
		cs = truthy(x)
	}
	attr, hasAttr := a.get(attrPos, "attribute")
	return func(it any) (any, error) {
		if hasAttr && attr != nil {
			var err error
			if it, err = attrGetter(it, attr); err != nil {
				return nil, err
			}
		}
		return sortKey(it, cs), nil
	}
}

func uniqueItems(v any, a *args) ([]any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	key := keyFunc(a, 1, 0)
	seen := NewMap(len(items)) // Python's unique keeps a set: keys must hash
	out := []any{}
	for _, it := range items {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		switch x := k.(type) {
		case Undefined:
			k = undefinedKey{} // jinja2's undefined values hash and compare equal
		case tuple:
			k = tupleKey(toStr(x)) // a tuple hashes in Python; its repr stands for it
		default:
			if err := hashable(k); err != nil {
				return nil, err
			}
		}
		if _, dup := seen.get(k); dup {
			continue
		}
		seen.set(k, nil)
		out = append(out, it)
	}
	return out, nil
}

func minMax(v any, a *args, isMax bool) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{name: "min"}, nil
	}
	key := keyFunc(a, 1, 0)
	best, bestKey := items[0], any(nil)
	if bestKey, err = key(best); err != nil {
		return nil, err
	}
	for _, it := range items[1:] {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		c, err := compare(k, bestKey, "<")
		if err != nil {
			return nil, err
		}
		if isMax && c > 0 || !isMax && c < 0 {
			best, bestKey = it, k
		}
	}
	return best, nil
}

func fSum(_ *state, v any, a *args) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr, hasAttr := a.get(0, "attribute")
	total, ok := a.get(1, "start")
	if !ok {
		total = 0
	}
	for _, it := range items {
		if hasAttr && attr != nil {
			if it, err = attrGetter(it, attr); err != nil {
				return nil, err
			}
		}
		if total, err = binop("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

// fReverse is jinja2's reverse: a string reversed; a list's or dict's
// reversed iterator (a generator here); anything else iterable as a
// reversed list.
// undefinedKey and tupleKey stand for an undefined value and a tuple as
// a set's key.
type (
	undefinedKey struct{}
	tupleKey     string
)

func fReverse(_ *state, v any, _ *args) (any, error) {
	switch x := v.(type) {
	case string:
		r := []rune(x)
		slices.Reverse(r)
		return string(r), nil
	case []any, tuple, *Map, Undefined:
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		out := slices.Clone(items)
		slices.Reverse(out)
		return &generator{name: reversedName(x), items: out}, nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(items)
	slices.Reverse(out)
	return out, nil
}

func fSort(_ *state, v any, a *args) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	rev := false
	if x, ok := a.get(0, "reverse"); ok {
		rev = truthy(x)
	}
	return sortItems(items, keyFunc(a, 2, 1), rev)
}

func batchItems(v any, a *args) ([]any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	n, err := argInt(a, 0, "linecount", 0)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, errorf("batch size must be positive")
	}
	fill, hasFill := a.get(1, "fill_with")
	out := []any{}
	for i := 0; i < len(items); i += n {
		b := slices.Clone(items[i:min(i+n, len(items))])
		for hasFill && fill != nil && len(b) < n {
			b = append(b, fill)
		}
		out = append(out, b)
	}
	return out, nil
}

// reversedName is the type of Python's reversed(v).
func reversedName(v any) string {
	switch v.(type) {
	case []any:
		return "list_reverseiterator"
	case *Map:
		return "dict_reversekeyiterator"
	}
	return "reversed"
}

// The generator filters: lazy, as jinja2's generator functions are.

func fMap(st *state, v any, a *args) (any, error) {
	return lazy("sync_do_map", func() ([]any, error) { return mapItems(st, v, a) }), nil
}

func fUnique(_ *state, v any, a *args) (any, error) {
	return lazy("sync_do_unique", func() ([]any, error) { return uniqueItems(v, a) }), nil
}

func fBatch(_ *state, v any, a *args) (any, error) {
	return lazy("do_batch", func() ([]any, error) { return batchItems(v, a) }), nil
}

func fItems(_ *state, v any, _ *args) (any, error) {
	return lazy("do_items", func() ([]any, error) { return itemPairs(v) }), nil
}
