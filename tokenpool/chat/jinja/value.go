package jinja

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values a template sees are Go values of these types: nil (None), bool,
// int, float64, string, []any (a list or tuple), *Map (a dict), and the
// engine's own Undefined, *Namespace, *Macro, callables and loop objects.
// Data given to Render may also hold map[string]any (a dict in key order:
// a Go map has none), other integer and float types and []string; they
// are converted where a template reads them (norm).

// Map is a dict that keeps its keys in insertion order, as Python's does,
// so a template's loops and tojson see a message's fields in the order the
// caller built them. Keys are strings, ints, floats, bools or nil (Python
// hashes an integral float as the int: 1 and 1.0 are one key). A Map
// given to Render is only read; a template cannot change it (transformers'
// environment is immutable).
type Map struct {
	keys []any
	vals []any
	// index maps a key to its position once the Map is large enough for a
	// scan to cost more than a lookup.
	index map[any]int
}

// mapIndexFrom is the size from which a Map keeps an index: below it a
// scan of the keys is as fast as a hash lookup (messages have 2 to 6).
const mapIndexFrom = 16

// NewMap returns an empty Map with room for n entries.
func NewMap(n int) *Map {
	buf := make([]any, 2*n) // keys and values in one allocation
	return &Map{keys: buf[:0:n], vals: buf[n : n : 2*n]}
}

// Len is the number of entries.
func (m *Map) Len() int {
	if m == nil {
		return 0
	}
	return len(m.keys)
}

// Set sets key to v, keeping key's position if it is there.
func (m *Map) Set(key string, v any) { m.set(key, v) }

// Get returns the value of key.
func (m *Map) Get(key string) (any, bool) { return m.get(key) }

// Keys returns the keys in order (the Map's own slice: do not modify).
func (m *Map) Keys() []any { return m.keys }

// Value returns the value at position i, in key order.
func (m *Map) Value(i int) any { return m.vals[i] }

func mapKey(k any) any {
	switch x := k.(type) {
	case markup:
		return string(x)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return int(x)
		}
	case bool:
		if x {
			return 1
		}
		return 0
	}
	return k
}

func (m *Map) find(key any) int {
	key = mapKey(key)
	if m.index != nil {
		if i, ok := m.index[key]; ok {
			return i
		}
		return -1
	}
	for i, k := range m.keys {
		if k == key {
			return i
		}
	}
	return -1
}

func (m *Map) get(key any) (any, bool) {
	if m == nil {
		return nil, false
	}
	switch key.(type) {
	case []any, tuple, *Map, *Namespace:
		return nil, false // unhashable (a tuple key is not supported)
	}
	if i := m.find(key); i >= 0 {
		return m.vals[i], true
	}
	return nil, false
}

func (m *Map) set(key, v any) {
	key = mapKey(key)
	if i := m.find(key); i >= 0 {
		m.vals[i] = v
		return
	}
	m.keys = append(m.keys, key)
	m.vals = append(m.vals, v)
	if m.index != nil {
		m.index[key] = len(m.keys) - 1
	} else if len(m.keys) >= mapIndexFrom {
		m.index = make(map[any]int, len(m.keys)*2)
		for i, k := range m.keys {
			m.index[k] = i
		}
	}
}

// fromGoMap is a Go map as a dict, its keys sorted (a Go map has no
// order; sorted is at least the same each time).
func fromGoMap(g map[string]any) *Map {
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	m := NewMap(len(keys))
	for _, k := range keys {
		m.set(k, g[k])
	}
	return m
}

// tuple is a Python tuple: a list that prints in parentheses and never
// equals a list (dict.items() pairs, (a, b) literals).
type tuple []any

// seq is v's items if v is a list or a tuple.
func seq(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case tuple:
		return x, true
	}
	return nil, false
}

// generator is what jinja2's map, select, reject, selectattr,
// rejectattr, unique, batch and items filters return, and reverse of a
// list or dict: a Python iterator, not a list. It is true even when empty,
// has no length, prints as Python's repr (with a fixed address),
// is no JSON, and a walk uses it up: a second loop over it is empty, and
// first takes one item. |list makes it a list. The filters' generators are
// lazy, as Python's: their work, and its errors, come with the first walk.
type generator struct {
	name  string                // Python's type name; "" is "generator"
	fn    string                // a generator's function, for its repr
	fill  func() ([]any, error) // computes items on first use (then nil)
	items []any
	pos   int // items[pos:] are still to come
}

// load computes g's items if that was not done yet.
func (g *generator) load() error {
	if g.fill == nil {
		return nil
	}
	f := g.fill
	g.fill = nil
	items, err := f()
	if err != nil {
		return err
	}
	g.items = items
	return nil
}

// rest is what is left of g, used up.
func (g *generator) rest() ([]any, error) {
	if err := g.load(); err != nil {
		return nil, err
	}
	r := g.items[g.pos:]
	g.pos = len(g.items)
	return r, nil
}

func lazy(fn string, fill func() ([]any, error)) *generator {
	return &generator{fn: fn, fill: fill}
}

// markup is markupsafe's Markup, what safe and escape return: a string
// that, added to a plain one with + (either side), gets that one
// HTML-escaped, formats its % arguments escaped, and prints as
// Markup('...') inside a list. Everywhere else it is its text (unmark):
// transformers renders without autoescape.
type markup string

// unmark is v, a markup as its plain string.
func unmark(v any) any {
	if m, ok := v.(markup); ok {
		return string(m)
	}
	return v
}

// Namespace is what namespace(...) makes: a dict whose attributes a
// template may set from inside a loop ({% set ns.x = ... %}).
type Namespace struct{ attrs *Map }

// Undefined is a name or attribute that is not there. Printed it is "",
// tested it is false, iterated it is empty; reading its attribute, calling
// it or computing with it is an error (jinja2's default Undefined, which
// transformers keeps).
type Undefined struct {
	name  string // the variable's or attribute's name
	owner string // for an attribute or item: what it is missing from
}

func (u Undefined) err() error {
	switch {
	case u.owner != "" && u.name != "":
		return errorf("'%s' has no attribute '%s'", u.owner, u.name)
	case u.owner != "":
		return errorf("'%s' has no such item", u.owner)
	case u.name == "":
		return errorf("undefined value")
	}
	return errorf("'%s' is undefined", u.name)
}

// norm converts the Go types Render accepts beyond the engine's own.
func norm(v any) any {
	switch x := v.(type) {
	case nil, bool, int, float64, string, []any, *Map, tuple:
		return v
	case map[string]any:
		return fromGoMap(x)
	case []string:
		l := make([]any, len(x))
		for i, s := range x {
			l[i] = s
		}
		return l
	case int64:
		return int(x)
	case int32:
		return int(x)
	case uint32:
		return int(x)
	case uint64:
		if x > math.MaxInt64 {
			return float64(x)
		}
		return int(x)
	case float32:
		return float64(x)
	case Map:
		return &x
	}
	return v
}

// typeName is Python's name of v's type, for error messages.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case *Map:
		return "dict"
	case markup:
		return "Markup"
	case *generator:
		if x.name != "" {
			return x.name
		}
		return "generator"
	case *Namespace:
		return "Namespace"
	case Undefined:
		return "Undefined"
	case *Macro:
		return "Macro"
	case *loopState:
		return "LoopContext"
	case *boundMethod, builtinFunc:
		return "builtin_function_or_method"
	}
	return fmt.Sprintf("%T", v)
}

// truthy is Python's bool(v).
func truthy(v any) bool {
	switch x := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return x
	case int:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case markup:
		return x != ""
	case []any:
		return len(x) > 0
	case tuple:
		return len(x) > 0
	case *Map:
		return x.Len() > 0
	}
	return true
}

// toStr is Python's str(v) as jinja2 prints it: Undefined is "".
func toStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case markup:
		return string(x)
	case Undefined:
		return ""
	}
	var b strings.Builder
	writeStr(&b, v, 0)
	return b.String()
}

// maxReprDepth bounds the nesting printed or compared: client data can
// nest as deep as its JSON decoder allows.
const maxReprDepth = 200

func writeStr(b *strings.Builder, v any, depth int) {
	switch x := v.(type) {
	case string:
		b.WriteString(x)
	case markup:
		b.WriteString(string(x))
	case Undefined:
	default:
		writeRepr(b, v, depth)
	}
}

// writeRepr writes Python's repr(v) (lists and dicts print their items so).
func writeRepr(b *strings.Builder, v any, depth int) {
	if depth > maxReprDepth {
		b.WriteString("...")
		return
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case Undefined:
		b.WriteString("Undefined")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case float64:
		b.WriteString(pyFloat(x))
	case string:
		pyRepr(b, x)
	case markup:
		b.WriteString("Markup(")
		pyRepr(b, string(x))
		b.WriteByte(')')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e, depth+1)
		}
		b.WriteByte(']')
	case tuple:
		b.WriteByte('(')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e, depth+1)
		}
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Map:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, depth+1)
			b.WriteString(": ")
			writeRepr(b, x.vals[i], depth+1)
		}
		b.WriteByte('}')
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.attrs, depth+1)
		b.WriteString(">")
	case *Macro:
		b.WriteString("<Macro '" + x.name + "'>")
	case *generator:
		// Python's repr, with a fixed address of its usual length
		if x.name == "" {
			b.WriteString("<generator object " + x.fn + " at 0x7f0000000000>")
		} else {
			b.WriteString("<" + x.name + " object at 0x7f0000000000>")
		}
	default:
		fmt.Fprintf(b, "<%s object>", typeName(v))
	}
}

// pyFloat is Python's repr of a float: the shortest digits that round
// trip, in positional notation for exponents -4 to 15 (with ".0" when
// integral), else as 1e-05 or 1.5e+16.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	e := strings.IndexByte(s, 'e')
	exp, err := strconv.Atoi(s[e+1:])
	if err != nil {
		panic("BUG: strconv.FormatFloat wrote the exponent " + s[e+1:])
	}
	digits := strings.Replace(s[:e], ".", "", 1)
	var out string
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		out = fmt.Sprintf("%se%s%02d", m, sign, exp)
	} else if exp < 0 {
		out = "0." + strings.Repeat("0", -exp-1) + digits
	} else if len(digits) <= exp+1 {
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	} else {
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		return "-" + out
	}
	return out
}

// pyRepr writes Python's repr of a string: single quotes unless the
// string has one and no double quote.
func pyRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\ufffd`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x80 || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// isNumber: int, float or bool (a Python bool is an int).
func number(v any) (i int, f float64, isFloat, ok bool) {
	switch x := v.(type) {
	case int:
		return x, 0, false, true
	case float64:
		return 0, x, true, true
	case bool:
		if x {
			return 1, 0, false, true
		}
		return 0, 0, false, true
	}
	return 0, 0, false, false
}

// equal is Python's ==.
func equal(a, b any, depth int) bool {
	a, b = unmark(a), unmark(b)
	if depth > maxReprDepth {
		return false
	}
	ai, af, afl, aok := number(a)
	bi, bf, bfl, bok := number(b)
	if aok && bok {
		switch {
		case !afl && !bfl:
			return ai == bi
		case afl && bfl:
			return af == bf
		case afl:
			return af == float64(bi)
		default:
			return float64(ai) == bf
		}
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case []any, tuple:
		_, xl := a.([]any)
		_, yl := b.([]any)
		xs, _ := seq(a)
		ys, ok := seq(b)
		if !ok || xl != yl || len(xs) != len(ys) {
			return false
		}
		for i := range xs {
			if !equal(xs[i], ys[i], depth+1) {
				return false
			}
		}
		return true
	case *Map:
		y, ok := b.(*Map)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			v, ok := y.get(k)
			if !ok || !equal(x.vals[i], v, depth+1) {
				return false
			}
		}
		return true
	case *Namespace, *Macro, *generator:
		return a == b
	}
	return false
}

// compare is Python's ordering of a and b: -1, 0 or 1, or an error for
// types Python does not order.
func compare(a, b any, op string) (int, error) {
	a, b = unmark(a), unmark(b)
	ai, af, afl, aok := number(a)
	bi, bf, bfl, bok := number(b)
	if aok && bok {
		if !afl && !bfl {
			return cmpOrdered(ai, bi), nil
		}
		if !afl {
			af = float64(ai)
		}
		if !bfl {
			bf = float64(bi)
		}
		if af < bf {
			return -1, nil
		}
		if af > bf {
			return 1, nil
		}
		return 0, nil
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case []any, tuple:
		xs, _ := seq(x)
		_, xl := a.([]any)
		_, yl := b.([]any)
		if ys, ok := seq(b); ok && xl == yl {
			for i := 0; i < len(xs) && i < len(ys); i++ {
				if equal(xs[i], ys[i], 0) {
					continue
				}
				return compare(xs[i], ys[i], op)
			}
			return cmpOrdered(len(xs), len(ys)), nil
		}
	case Undefined:
		return 0, x.err()
	}
	if u, ok := b.(Undefined); ok {
		return 0, u.err()
	}
	return 0, errorf("'%s' not supported between instances of '%s' and '%s'", op, typeName(a), typeName(b))
}

func cmpOrdered[T int | float64](a, b T) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// pyLen is len(v), or false where Python's len fails.
func pyLen(v any) (int, bool) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), true
	case []any:
		return len(x), true
	case tuple:
		return len(x), true
	case *Map:
		return x.Len(), true
	case Undefined:
		return 0, true
	case *Namespace:
		return x.attrs.Len(), true
	}
	return 0, false
}

// isASCII reports whether s is all ASCII (string positions are bytes).
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// pySpace is Python's str.isspace for one character: what str.strip and
// str.split strip by default (\x1c-\x1f included, unlike Go's
// unicode.IsSpace).
func pySpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x7f && unicode.IsSpace(r)
}
