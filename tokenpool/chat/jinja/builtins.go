package jinja

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// builtinFunc is a global function (range, namespace, raise_exception).
type builtinFunc func(st *state, a *args) (any, error)

// global is the function a name not set by the template or the caller
// names: jinja2's globals and transformers' additions.
func global(name string) any {
	switch name {
	case "range":
		return builtinFunc(fnRange)
	case "namespace":
		return builtinFunc(fnNamespace)
	case "dict":
		return builtinFunc(fnDict)
	case "raise_exception":
		return builtinFunc(fnRaise)
	case "strftime_now":
		return builtinFunc(fnStrftimeNow)
	case "cycler":
		return builtinFunc(fnCycler)
	case "joiner":
		return builtinFunc(fnJoiner)
	}
	return nil
}

func fnRange(_ *state, a *args) (any, error) {
	var bounds [3]int
	bounds[2] = 1
	if len(a.pos) == 0 || len(a.pos) > 3 || len(a.kwNames) > 0 {
		return nil, errorf("range expected 1 to 3 arguments, got %d", len(a.pos))
	}
	for i, v := range a.pos {
		n, ok := index(v)
		if !ok {
			return nil, errorf("'%s' object cannot be interpreted as an integer", typeName(v))
		}
		bounds[i] = n
	}
	start, stop, step := 0, bounds[0], 1
	if len(a.pos) > 1 {
		start, stop, step = bounds[0], bounds[1], bounds[2]
	}
	if step == 0 {
		return nil, errorf("range() arg 3 must not be zero")
	}
	n := 0
	if step > 0 && stop > start {
		n = (stop-start-1)/step + 1
	} else if step < 0 && stop < start {
		n = (start-stop-1)/(-step) + 1
	}
	if n > maxRange || n < 0 {
		return nil, errorf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	out := make([]any, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

func kwMap(a *args, m *Map) {
	for i, k := range a.kwNames {
		m.set(k, a.kwVals[i])
	}
}

func fnNamespace(_ *state, a *args) (any, error) {
	m := NewMap(len(a.kwNames))
	if len(a.pos) > 1 {
		return nil, errorf("namespace expected at most 1 positional argument")
	}
	if len(a.pos) == 1 {
		src, ok := a.pos[0].(*Map)
		if !ok {
			return nil, errorf("cannot convert '%s' to a namespace", typeName(a.pos[0]))
		}
		for i, k := range src.keys {
			m.set(k, src.vals[i])
		}
	}
	kwMap(a, m)
	return &Namespace{attrs: m}, nil
}

func fnDict(_ *state, a *args) (any, error) {
	m := NewMap(len(a.kwNames))
	if len(a.pos) > 1 {
		return nil, errorf("dict expected at most 1 argument")
	}
	if len(a.pos) == 1 {
		switch src := a.pos[0].(type) {
		case *Map:
			for i, k := range src.keys {
				m.set(k, src.vals[i])
			}
		case []any, tuple, *generator:
			pairs, err := iterate(a.pos[0])
			if err != nil {
				return nil, err
			}
			for _, p := range pairs {
				kv, ok := seq(p)
				if !ok || len(kv) != 2 {
					return nil, errorf("dictionary update sequence element has wrong length")
				}
				if err := hashable(kv[0]); err != nil {
					return nil, err
				}
				m.set(kv[0], kv[1])
			}
		default:
			return nil, errorf("'%s' object is not iterable", typeName(src))
		}
	}
	kwMap(a, m)
	return m, nil
}

func fnRaise(_ *state, a *args) (any, error) {
	v, ok := a.get(0, "message")
	if !ok {
		return nil, errorf("raise_exception() missing 1 required positional argument: 'message'")
	}
	return nil, &RaisedError{Message: toStr(v)}
}

func fnStrftimeNow(st *state, a *args) (any, error) {
	f, ok := a.get(0, "format")
	s, isStr := f.(string)
	if !ok || !isStr {
		return nil, errorf("strftime_now: want one format string")
	}
	return Strftime(st.now, s), nil
}

// cycler and joiner are jinja2's helper objects, as namespaces with
// their state and methods through boundMethod.
type cyclerState struct {
	items []any
	pos   int
}

type joinerState struct {
	sep  string
	used bool
}

func fnCycler(_ *state, a *args) (any, error) {
	if len(a.pos) == 0 {
		return nil, errorf("cycler requires at least one item")
	}
	return &cyclerState{items: slices.Clone(a.pos)}, nil
}

func fnJoiner(_ *state, a *args) (any, error) {
	sep := ", "
	if v, ok := a.get(0, "sep"); ok {
		sep = toStr(v)
	}
	return &joinerState{sep: sep}, nil
}

// boundMethod is a Python method read off a value (s.strip), called
// later.
type boundMethod struct {
	recv any
	name string
	// markup: the receiver was a Markup, whose str methods escape their
	// string arguments and return Markup (markupsafe)
	markup bool
}

func isStrMethod(name string) bool {
	switch name {
	case "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower", "title",
		"capitalize", "swapcase", "casefold", "replace", "find", "rfind", "index", "rindex", "count", "join", "format",
		"isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "isdecimal", "isnumeric", "istitle",
		"center", "ljust", "rjust", "zfill", "removeprefix", "removesuffix", "partition", "rpartition":
		return true
	}
	return false
}

func isDictMethod(name string) bool {
	switch name {
	case "items", "keys", "values", "get", "copy", "update", "pop", "popitem", "setdefault", "clear":
		return true
	}
	return false
}

func isListMethod(name string) bool {
	switch name {
	case "index", "count", "copy", "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear":
		return true
	}
	return false
}

func (st *state) callMethod(m *boundMethod, a *args) (any, error) {
	switch r := m.recv.(type) {
	case string:
		if m.markup {
			return markupMethod(r, m.name, a)
		}
		return strMethod(r, m.name, a)
	case *Map:
		return dictMethod(r, m.name, a)
	case []any:
		return listMethod(r, m.name, a)
	case tuple:
		return listMethod([]any(r), m.name, a)
	case *loopState:
		if m.name == "changed" {
			v := tuple(a.pos)
			if r.hasChanged && equal(r.changed, v, 0) {
				return false, nil
			}
			r.changed, r.hasChanged = slices.Clone(v), true
			return true, nil
		}
		if len(a.pos) == 0 {
			return nil, errorf("no items for cycling given")
		}
		return a.pos[r.i%len(a.pos)], nil
	case *cyclerState:
		switch m.name {
		case "next":
			v := r.items[r.pos]
			r.pos = (r.pos + 1) % len(r.items)
			return v, nil
		case "reset":
			r.pos = 0
			return nil, nil
		}
	case *joinerState:
		if !r.used {
			r.used = true
			return "", nil
		}
		return r.sep, nil
	}
	return nil, errorf("'%s' object has no method '%s'", typeName(m.recv), m.name)
}

// markupMethod is a Markup's str method: string arguments escaped, string
// results (alone, in a list or tuple) Markup, as markupsafe wraps them;
// the predicates and searches (startswith, find, isdigit) are str's.
func markupMethod(s, name string, a *args) (any, error) {
	switch name {
	case "join", "split", "rsplit", "splitlines", "capitalize", "title", "lower", "upper", "replace", "ljust", "rjust",
		"lstrip", "rstrip", "center", "strip", "swapcase", "zfill", "format", "partition", "rpartition", "removeprefix",
		"removesuffix", "casefold":
	default:
		return strMethod(s, name, a)
	}
	esc := func(v any) any {
		if x, ok := v.(string); ok {
			return htmlEscape(x)
		}
		return unmark(v)
	}
	e := &args{pos: make([]any, len(a.pos)), kwNames: a.kwNames, kwVals: make([]any, len(a.kwVals))}
	for i, v := range a.pos {
		e.pos[i] = esc(v)
	}
	for i, v := range a.kwVals {
		e.kwVals[i] = esc(v)
	}
	if name == "join" && len(e.pos) == 1 {
		// join escapes the items, not the iterable
		items, err := iterate(a.pos[0])
		if err != nil {
			return nil, err
		}
		l := make([]any, len(items))
		for i, it := range items {
			l[i] = esc(it)
		}
		e.pos[0] = l
	}
	r, err := strMethod(s, name, e)
	if err != nil {
		return nil, err
	}
	return toMarkup(r), nil
}

// toMarkup makes a string result, or the strings of a list or tuple, Markup.
func toMarkup(v any) any {
	switch x := v.(type) {
	case string:
		return markup(x)
	case []any:
		for i, e := range x {
			x[i] = toMarkup(e)
		}
	case tuple:
		for i, e := range x {
			x[i] = toMarkup(e)
		}
	}
	return v
}

// unsafe is jinja2's ImmutableSandboxedEnvironment refusing a method that
// would change a value (transformers renders in that environment).
func unsafe(v any, name string) error {
	return errorf("access to attribute '%s' of '%s' object is unsafe.", name, typeName(v))
}

func argStr(a *args, i int, name, method string) (string, bool, error) {
	v, ok := a.get(i, name)
	if !ok || v == nil {
		return "", false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", false, errorf("%s arg must be None or str", method)
	}
	return s, true, nil
}

func argInt(a *args, i int, name string, def int) (int, error) {
	v, ok := a.get(i, name)
	if !ok || v == nil {
		return def, nil
	}
	n, isInt := index(v)
	if !isInt {
		return 0, errorf("'%s' object cannot be interpreted as an integer", typeName(v))
	}
	return n, nil
}

func strMethod(s, name string, a *args) (any, error) {
	switch name {
	case "strip", "lstrip", "rstrip":
		chars, ok, err := argStr(a, 0, "chars", name)
		if err != nil {
			return nil, err
		}
		cut := pySpace
		if ok {
			cut = func(r rune) bool { return strings.ContainsRune(chars, r) }
		}
		if name != "rstrip" {
			s = strings.TrimLeftFunc(s, cut)
		}
		if name != "lstrip" {
			s = strings.TrimRightFunc(s, cut)
		}
		return s, nil
	case "split", "rsplit":
		sep, ok, err := argStr(a, 0, "sep", name)
		if err != nil {
			return nil, err
		}
		maxSplit, err := argInt(a, 1, "maxsplit", -1)
		if err != nil {
			return nil, err
		}
		if ok && sep == "" {
			return nil, errorf("empty separator")
		}
		return toList(pySplit(s, sep, ok, maxSplit, name == "rsplit")), nil
	case "splitlines":
		keep := false
		if v, ok := a.get(0, "keepends"); ok {
			keep = truthy(v)
		}
		return toList(splitLines(s, keep)), nil
	case "startswith", "endswith":
		v, ok := a.get(0, "prefix")
		if !ok {
			return nil, errorf("%s takes at least 1 argument", name)
		}
		var cands []any
		switch x := v.(type) {
		case string:
			cands = []any{x}
		case tuple:
			cands = x
		default:
			return nil, errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(v))
		}
		for _, c := range cands {
			p, ok := c.(string)
			if !ok {
				return nil, errorf("tuple for %s must only contain str, not %s", name, typeName(c))
			}
			if name == "startswith" && strings.HasPrefix(s, p) || name == "endswith" && strings.HasSuffix(s, p) {
				return true, nil
			}
		}
		return false, nil
	case "upper":
		return strings.ToUpper(s), nil
	case "lower", "casefold":
		return strings.ToLower(s), nil
	case "title":
		return pyTitle(s), nil
	case "capitalize":
		return capitalize(s), nil
	case "swapcase":
		return strings.Map(func(r rune) rune {
			if unicode.IsUpper(r) {
				return unicode.ToLower(r)
			}
			return unicode.ToUpper(r)
		}, s), nil
	case "replace":
		old, ok1, err := argStr(a, 0, "old", name)
		if err != nil {
			return nil, err
		}
		nw, ok2, err := argStr(a, 1, "new", name)
		if err != nil {
			return nil, err
		}
		if !ok1 || !ok2 {
			return nil, errorf("replace expected at least 2 arguments")
		}
		n, err := argInt(a, 2, "count", -1)
		if err != nil {
			return nil, err
		}
		return replace(s, old, nw, n)
	case "find", "rfind", "index", "rindex", "count":
		sub, ok, err := argStr(a, 0, "sub", name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errorf("%s takes at least 1 argument", name)
		}
		switch name {
		case "count":
			if sub == "" {
				return runeLen(s) + 1, nil
			}
			return strings.Count(s, sub), nil
		case "find", "index":
			i := strings.Index(s, sub)
			if i < 0 && name == "index" {
				return nil, errorf("substring not found")
			}
			if i < 0 {
				return -1, nil
			}
			return runeLen(s[:i]), nil
		default:
			i := strings.LastIndex(s, sub)
			if i < 0 && name == "rindex" {
				return nil, errorf("substring not found")
			}
			if i < 0 {
				return -1, nil
			}
			return runeLen(s[:i]), nil
		}
	case "join":
		v, ok := a.get(0, "iterable")
		if !ok {
			return nil, errorf("join takes exactly one argument")
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, it := range items {
			p, ok := unmark(it).(string)
			if !ok {
				return nil, errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			parts[i] = p
		}
		return joinCapped(parts, s)
	case "format":
		return strFormat(s, a)
	case "isdigit", "isdecimal", "isnumeric":
		return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsDigit(r) }), nil
	case "isalpha":
		return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) }), nil
	case "isalnum":
		return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }), nil
	case "isspace":
		return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !pySpace(r) }), nil
	case "isupper", "islower":
		cased := false
		for _, r := range s {
			if unicode.IsUpper(r) || unicode.IsTitle(r) {
				if name == "islower" {
					return false, nil
				}
				cased = true
			} else if unicode.IsLower(r) {
				if name == "isupper" {
					return false, nil
				}
				cased = true
			}
		}
		return cased, nil
	case "istitle":
		return isTitle(s), nil
	case "center", "ljust", "rjust":
		w, err := argInt(a, 0, "width", 0)
		if err != nil {
			return nil, err
		}
		fill, ok, err := argStr(a, 1, "fillchar", name)
		if err != nil {
			return nil, err
		}
		if !ok {
			fill = " "
		}
		return pad(s, w, fill, name)
	case "zfill":
		w, err := argInt(a, 0, "width", 0)
		if err != nil {
			return nil, err
		}
		n := runeLen(s)
		if w <= n {
			return s, nil
		}
		if w > MaxOutput {
			return nil, errorf("string longer than %d bytes", MaxOutput)
		}
		sign := ""
		if s != "" && (s[0] == '-' || s[0] == '+') {
			sign, s = s[:1], s[1:]
		}
		return sign + strings.Repeat("0", w-n) + s, nil
	case "removeprefix", "removesuffix":
		p, _, err := argStr(a, 0, "prefix", name)
		if err != nil {
			return nil, err
		}
		if name == "removeprefix" {
			return strings.TrimPrefix(s, p), nil
		}
		return strings.TrimSuffix(s, p), nil
	case "partition", "rpartition":
		sep, ok, err := argStr(a, 0, "sep", name)
		if err != nil {
			return nil, err
		}
		if !ok || sep == "" {
			return nil, errorf("empty separator")
		}
		i := strings.Index(s, sep)
		if name == "rpartition" {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "rpartition" {
				return tuple{"", "", s}, nil
			}
			return tuple{s, "", ""}, nil
		}
		return tuple{s[:i], sep, s[i+len(sep):]}, nil
	}
	return nil, errorf("'str' object has no method '%s'", name)
}

// isTitle is Python's str.istitle: an upper-case letter only after an
// uncased character, a lower-case one only after a cased one, and at
// least one cased.
func isTitle(s string) bool {
	cased, prevCased := false, false
	for _, r := range s {
		switch {
		case unicode.IsUpper(r) || unicode.IsTitle(r):
			if prevCased {
				return false
			}
			prevCased, cased = true, true
		case unicode.IsLower(r):
			if !prevCased {
				return false
			}
			prevCased, cased = true, true
		default:
			prevCased = false
		}
	}
	return cased
}

func toList(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func joinCapped(parts []string, sep string) (string, error) {
	n := len(sep) * max(len(parts)-1, 0)
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxOutput {
		return "", errorf("string longer than %d bytes", MaxOutput)
	}
	return strings.Join(parts, sep), nil
}

func replace(s, old, nw string, n int) (string, error) {
	count := strings.Count(s, old)
	if n >= 0 && n < count {
		count = n
	}
	if len(s)+count*(len(nw)-len(old)) > MaxOutput {
		return "", errorf("string longer than %d bytes", MaxOutput)
	}
	return strings.Replace(s, old, nw, n), nil
}

func pad(s string, w int, fill, how string) (string, error) {
	if runeLen(fill) != 1 {
		return "", errorf("The fill character must be exactly one character long")
	}
	n := runeLen(s)
	if w <= n {
		return s, nil
	}
	if w > MaxOutput {
		return "", errorf("string longer than %d bytes", MaxOutput)
	}
	total := w - n
	left := 0
	switch how {
	case "center":
		// Python's str.center: the extra space goes left when the
		// padding and the width are both odd.
		left = total / 2
		if total%2 == 1 && w%2 == 1 {
			left++
		}
	case "rjust":
		left = total
	}
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, total-left), nil
}

// pySplit is Python's str.split and rsplit.
func pySplit(s, sep string, hasSep bool, maxSplit int, right bool) []string {
	if hasSep {
		if maxSplit < 0 {
			return strings.Split(s, sep)
		}
		if !right {
			return strings.SplitN(s, sep, maxSplit+1)
		}
		var out []string
		for maxSplit > 0 {
			i := strings.LastIndex(s, sep)
			if i < 0 {
				break
			}
			out = append(out, s[i+len(sep):])
			s = s[:i]
			maxSplit--
		}
		out = append(out, s)
		slices.Reverse(out)
		return out
	}
	if maxSplit < 0 {
		return strings.FieldsFunc(s, pySpace)
	}
	var out []string
	if right {
		rest := strings.TrimRightFunc(s, pySpace)
		for maxSplit > 0 && rest != "" {
			i := strings.LastIndexFunc(rest, pySpace)
			if i < 0 {
				break
			}
			_, n := utf8DecodeAt(rest, i)
			out = append(out, rest[i+n:])
			rest = strings.TrimRightFunc(rest[:i], pySpace)
			maxSplit--
		}
		if rest != "" {
			out = append(out, rest)
		}
		slices.Reverse(out)
		return out
	}
	rest := strings.TrimLeftFunc(s, pySpace)
	for maxSplit > 0 && rest != "" {
		i := strings.IndexFunc(rest, pySpace)
		if i < 0 {
			break
		}
		out = append(out, rest[:i])
		rest = strings.TrimLeftFunc(rest[i:], pySpace)
		maxSplit--
	}
	if rest != "" {
		out = append(out, rest)
	}
	return out
}

func utf8DecodeAt(s string, i int) (rune, int) {
	for _, r := range s[i:] {
		return r, len(string(r))
	}
	return 0, 0
}

// lineBreak is Python's str.splitlines boundary.
func lineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// splitLines is Python's str.splitlines.
func splitLines(s string, keep bool) []string {
	var out []string
	for s != "" {
		i := strings.IndexFunc(s, lineBreak)
		if i < 0 {
			out = append(out, s)
			break
		}
		_, n := utf8DecodeAt(s, i)
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			n = 2
		}
		if keep {
			out = append(out, s[:i+n])
		} else {
			out = append(out, s[:i])
		}
		s = s[i+n:]
	}
	return out
}

// pyTitle is Python's str.title: a letter after a non-letter is upper
// case, other letters lower case.
func pyTitle(s string) string {
	prevCased := false
	return strings.Map(func(r rune) rune {
		cased := unicode.IsLetter(r)
		if cased && !prevCased {
			r = unicode.ToTitle(r)
		} else if cased {
			r = unicode.ToLower(r)
		}
		prevCased = cased
		return r
	}, s)
}

func capitalize(s string) string {
	for i, r := range s {
		return string(unicode.ToTitle(r)) + strings.ToLower(s[i+len(string(r)):])
	}
	return s
}

// strFormat is str.format with automatic ({}), numbered ({0}) and named
// ({name}) fields, without format specs beyond the empty one.
func strFormat(s string, a *args) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				i++
			}
			b.WriteByte('}')
			continue
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, errorf("Single '{' encountered in format string")
		}
		field := s[i+1 : i+j]
		i += j
		if k := strings.IndexAny(field, ":!"); k >= 0 {
			if field[k+1:] != "" && field[k+1:] != "s" {
				return nil, errorf("format spec %q is not supported", field[k:])
			}
			field = field[:k]
		}
		var v any
		var ok bool
		if field == "" {
			v, ok = a.get(auto, "")
			auto++
		} else if n, err := strconv.Atoi(field); err == nil {
			v, ok = a.get(n, "")
		} else {
			v, ok = a.kw(field)
		}
		if !ok {
			return nil, errorf("Replacement index %s out of range for positional args tuple", field)
		}
		b.WriteString(toStr(v))
		if b.Len() > MaxOutput {
			return nil, errorf("string longer than %d bytes", MaxOutput)
		}
	}
	return b.String(), nil
}

// printf is Python's str % args for %s, %r, %d, %i, %f (with a
// precision) and %%.
func printf(s string, v any) (any, error) {
	vals, isTuple := v.(tuple)
	if !isTuple {
		vals = []any{v}
	}
	var b strings.Builder
	k := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		i++
		if i < len(s) && s[i] == '%' {
			b.WriteByte('%')
			continue
		}
		prec := -1
		if i < len(s) && s[i] == '.' {
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			prec = 0 // "%.f": Python's precision 0
			if j > i+1 {
				n, err := strconv.Atoi(s[i+1 : j])
				if err != nil || n > 100 {
					return nil, errorf("precision too big")
				}
				prec = n
			}
			i = j
		}
		if i >= len(s) {
			return nil, errorf("incomplete format")
		}
		if k >= len(vals) {
			return nil, errorf("not enough arguments for format string")
		}
		arg := vals[k]
		k++
		switch s[i] {
		case 's':
			b.WriteString(toStr(arg))
		case 'r':
			writeRepr(&b, arg, 0)
		case 'd', 'i':
			n, f, isF, ok := number(arg)
			if !ok {
				return nil, errorf("%%%c format: a real number is required, not %s", s[i], typeName(arg))
			}
			if isF {
				n = int(f)
			}
			b.WriteString(strconv.Itoa(n))
		case 'f':
			n, f, isF, ok := number(arg)
			if !ok {
				return nil, errorf("must be real number, not %s", typeName(arg))
			}
			if !isF {
				f = float64(n)
			}
			if prec < 0 {
				prec = 6
			}
			b.WriteString(strconv.FormatFloat(f, 'f', prec, 64))
		default:
			return nil, errorf("unsupported format character '%c'", s[i])
		}
	}
	if k < len(vals) {
		// Python leaves an argument unused only if it has __getitem__
		// and is no tuple or str (a dict, list, undefined).
		switch v.(type) {
		case *Map, []any, Undefined:
		default:
			return nil, errorf("not all arguments converted during string formatting")
		}
	}
	return b.String(), nil
}

func dictMethod(m *Map, name string, a *args) (any, error) {
	switch name {
	case "items":
		out := make([]any, m.Len())
		for i, k := range m.keys {
			out[i] = tuple{k, norm(m.vals[i])}
		}
		return out, nil
	case "keys":
		return slices.Clone(m.keys), nil
	case "values":
		out := make([]any, m.Len())
		for i, v := range m.vals {
			out[i] = norm(v)
		}
		return out, nil
	case "get":
		k, ok := a.get(0, "key")
		if !ok {
			return nil, errorf("get expected at least 1 argument, got 0")
		}
		if err := hashable(k); err != nil {
			return nil, err
		}
		if v, ok := m.get(k); ok {
			return norm(v), nil
		}
		d, _ := a.get(1, "default") // absent: None
		return d, nil
	case "copy":
		c := NewMap(m.Len())
		for i, k := range m.keys {
			c.set(k, m.vals[i])
		}
		return c, nil
	}
	return nil, unsafe(m, name)
}

func listMethod(l []any, name string, a *args) (any, error) {
	switch name {
	case "index", "count":
		v, ok := a.get(0, "value")
		if !ok {
			return nil, errorf("%s expected 1 argument", name)
		}
		n := 0
		for i, e := range l {
			if equal(e, v, 0) {
				if name == "index" {
					return i, nil
				}
				n++
			}
		}
		if name == "index" {
			return nil, errorf("%s is not in list", toStr(v))
		}
		return n, nil
	case "copy":
		return slices.Clone(l), nil
	}
	return nil, unsafe(l, name)
}

// Tests.

type testFunc func(st *state, v any, a *args) (bool, error)

// testByName is jinja2's test of that name, or nil. As in Python, a test
// given more arguments than it takes fails (`x is string in y` parses as
// the test string with the argument `in`, and fails so in jinja2 too).
func testByName(name string) testFunc {
	f := testImpl(name)
	if f == nil {
		return nil
	}
	takes := 0
	switch name {
	case "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "sameas":
		takes = 1
	}
	return func(st *state, v any, a *args) (bool, error) {
		if name != "escaped" {
			v = unmark(v)
		}
		a = a.unmarked()
		if n := len(a.pos) + len(a.kwNames); n > takes {
			return false, errorf("test_%s() takes %d positional argument(s) but %d were given", name, takes+1, n+1)
		}
		return f(st, v, a)
	}
}

func testImpl(name string) testFunc {
	switch name {
	case "defined":
		return func(_ *state, v any, _ *args) (bool, error) { _, u := v.(Undefined); return !u, nil }
	case "undefined":
		return func(_ *state, v any, _ *args) (bool, error) { _, u := v.(Undefined); return u, nil }
	case "none":
		return func(_ *state, v any, _ *args) (bool, error) { return v == nil, nil }
	case "string":
		return func(_ *state, v any, _ *args) (bool, error) { _, ok := v.(string); return ok, nil }
	case "number":
		return func(_ *state, v any, _ *args) (bool, error) { _, _, _, ok := number(v); return ok, nil }
	case "integer":
		return func(_ *state, v any, _ *args) (bool, error) { _, ok := v.(int); return ok, nil }
	case "float":
		return func(_ *state, v any, _ *args) (bool, error) { _, ok := v.(float64); return ok, nil }
	case "boolean":
		return func(_ *state, v any, _ *args) (bool, error) { _, ok := v.(bool); return ok, nil }
	case "true":
		return func(_ *state, v any, _ *args) (bool, error) { b, ok := v.(bool); return ok && b, nil }
	case "false":
		return func(_ *state, v any, _ *args) (bool, error) { b, ok := v.(bool); return ok && !b, nil }
	case "mapping":
		return func(_ *state, v any, _ *args) (bool, error) { _, ok := v.(*Map); return ok, nil }
	case "iterable":
		return func(_ *state, v any, _ *args) (bool, error) {
			switch v.(type) {
			case string, []any, tuple, *Map, Undefined, *generator:
				return true, nil
			}
			return false, nil
		}
	case "sequence":
		return func(_ *state, v any, _ *args) (bool, error) {
			switch v.(type) {
			case string, []any, tuple, *Map, Undefined:
				return true, nil
			}
			return false, nil
		}
	case "callable":
		return func(_ *state, v any, _ *args) (bool, error) {
			switch v.(type) {
			case *boundMethod, *Macro, builtinFunc, *joinerState, Undefined: // jinja2's Undefined has __call__
				return true, nil
			}
			return false, nil
		}
	case "odd", "even":
		// Python's value % 2 == 1 (odd) or == 0 (even): 2.5 is neither.
		want := 0
		if name == "odd" {
			want = 1
		}
		return func(_ *state, v any, _ *args) (bool, error) {
			r, err := binop("%", v, 2)
			if err != nil {
				return false, err
			}
			return equal(r, want, 0), nil
		}
	case "divisibleby":
		return func(_ *state, v any, a *args) (bool, error) {
			d, ok := a.get(0, "num")
			if !ok {
				return false, errorf("divisibleby takes one argument")
			}
			r, err := binop("%", v, d)
			if err != nil {
				return false, err
			}
			return equal(r, 0, 0), nil
		}
	case "eq", "equalto", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=":
		op := map[string]string{"eq": "==", "equalto": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[name]
		if op == "" {
			op = name
		}
		return func(_ *state, v any, a *args) (bool, error) {
			o, ok := a.get(0, "other")
			if !ok {
				return false, errorf("test '%s' takes one argument", name)
			}
			return compareOp(op, v, o)
		}
	case "in":
		return func(_ *state, v any, a *args) (bool, error) {
			seq, ok := a.get(0, "seq")
			if !ok {
				return false, errorf("test 'in' takes one argument")
			}
			return contains(seq, v)
		}
	case "lower", "upper":
		return func(_ *state, v any, _ *args) (bool, error) {
			r, err := strMethod(toStr(v), "is"+name, &args{})
			return r == true, err
		}
	case "sameas":
		return func(_ *state, v any, a *args) (bool, error) {
			o, _ := a.get(0, "other") // absent: None, as jinja2 would fail; rare
			switch x := v.(type) {
			case nil, bool:
				return v == o, nil
			case *Map:
				y, ok := o.(*Map)
				return ok && x == y, nil
			case *Namespace:
				y, ok := o.(*Namespace)
				return ok && x == y, nil
			case []any:
				y, ok := o.([]any)
				return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0]), nil
			}
			return equal(v, o, 0) && typeName(v) == typeName(o), nil
		}
	case "escaped":
		return func(_ *state, v any, _ *args) (bool, error) { _, ok := v.(markup); return ok, nil }
	case "filter":
		return func(_ *state, v any, _ *args) (bool, error) {
			s, ok := v.(string)
			return ok && filterByName(s) != nil, nil
		}
	case "test":
		return func(_ *state, v any, _ *args) (bool, error) {
			s, ok := v.(string)
			return ok && testByName(s) != nil, nil
		}
	}
	return nil
}
