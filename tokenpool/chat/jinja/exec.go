package jinja

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// state is one rendering's: the output, the budgets and the caller's
// variables. Nothing of it outlives Render.
type state struct {
	out   []byte
	vars  map[string]any
	now   time.Time
	steps int // loop iterations and macro calls so far
	work  int // bytes of strings and lists built so far
	depth int // macro calls in progress
	// the Template's bounds
	maxSteps, maxWork int
}

// scope is one frame of variables: the template's top level, a loop
// iteration, a macro call, a with block. jinja2's scoping: a set inside a
// loop or macro is that frame's and does not leak out (hence namespace);
// an if does not make a frame.
type scope struct {
	parent *scope
	names  []string
	vals   []any
	// room for a loop iteration's few names without more allocations
	inlineNames [4]string
	inlineVals  [4]any
}

func newScope(parent *scope) *scope {
	sc := &scope{parent: parent}
	sc.names, sc.vals = sc.inlineNames[:0], sc.inlineVals[:0]
	return sc
}

func (sc *scope) set(name string, v any) {
	for i, n := range sc.names {
		if n == name {
			sc.vals[i] = v
			return
		}
	}
	sc.names = append(sc.names, name)
	sc.vals = append(sc.vals, v)
}

func (st *state) lookup(sc *scope, name string) any {
	for s := sc; s != nil; s = s.parent {
		for i := len(s.names) - 1; i >= 0; i-- {
			if s.names[i] == name {
				return s.vals[i]
			}
		}
	}
	if v, ok := st.vars[name]; ok {
		return norm(v)
	}
	if g := global(name); g != nil {
		return g
	}
	return Undefined{name: name}
}

func (st *state) step() error {
	st.steps++
	if st.steps > st.maxSteps {
		return errorf("template ran more than %d loop iterations", st.maxSteps)
	}
	return nil
}

// charge counts v, just built or about to be walked, against the
// rendering's work bound: a string's bytes, 16 for a list's or dict's
// item.
func (st *state) charge(v any) error {
	switch x := v.(type) {
	case string:
		st.work += len(x)
	case []any:
		st.work += 16 * len(x)
	case tuple:
		st.work += 16 * len(x)
	case *Map:
		st.work += 16 * x.Len()
	default:
		return nil
	}
	if st.work > st.maxWork {
		return errorf("template built more than %d bytes of values", st.maxWork)
	}
	return nil
}

func (st *state) write(s string) error {
	if len(st.out)+len(s) > MaxOutput {
		return errorf("template output exceeds %d bytes", MaxOutput)
	}
	st.out = append(st.out, s...)
	return nil
}

// capture renders body into a string of its own (a block set, a macro
// call, a filter block).
func (st *state) capture(body []node, sc *scope) (string, ctl, error) {
	saved := st.out
	st.out = make([]byte, 0, 256)
	c, err := st.execBody(body, sc)
	s := string(st.out)
	st.out = saved
	if err == nil {
		err = st.charge(s)
	}
	return s, c, err
}

type ctl uint8

const (
	ctlNone ctl = iota
	ctlBreak
	ctlContinue
)

type node interface {
	exec(st *state, sc *scope) (ctl, error)
}

type expr interface {
	eval(st *state, sc *scope) (any, error)
}

func (st *state) execBody(body []node, sc *scope) (ctl, error) {
	for _, n := range body {
		c, err := n.exec(st, sc)
		if err != nil || c != ctlNone {
			return c, err
		}
	}
	return ctlNone, nil
}

type textNode struct{ text string }

func (n *textNode) exec(st *state, _ *scope) (ctl, error) { return ctlNone, st.write(n.text) }

type outputNode struct {
	e   expr
	pos int
}

func (n *outputNode) exec(st *state, sc *scope) (ctl, error) {
	v, err := n.e.eval(st, sc)
	if err != nil {
		return ctlNone, err
	}
	switch x := v.(type) {
	case string:
		return ctlNone, st.write(x)
	case markup:
		return ctlNone, st.write(string(x))
	case Undefined:
		return ctlNone, nil
	}
	return ctlNone, st.write(toStr(v))
}

type ifNode struct {
	tests  []expr
	bodies [][]node
	orElse []node
}

func (n *ifNode) exec(st *state, sc *scope) (ctl, error) {
	for i, t := range n.tests {
		v, err := t.eval(st, sc)
		if err != nil {
			return ctlNone, err
		}
		if truthy(v) {
			return st.execBody(n.bodies[i], sc)
		}
	}
	return st.execBody(n.orElse, sc)
}

type target struct {
	names []string
	attr  string // set ns.attr = ...
	tuple bool
}

// assign binds v to the target in sc, unpacking a tuple target.
func (st *state) assign(sc *scope, tg *target, v any) error {
	if tg.attr != "" {
		ns, ok := st.lookup(sc, tg.names[0]).(*Namespace)
		if !ok {
			return errorf("cannot assign attribute on non-namespace object")
		}
		ns.attrs.set(tg.attr, v)
		return nil
	}
	if !tg.tuple {
		sc.set(tg.names[0], v)
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(tg.names) {
		if len(items) > len(tg.names) {
			return errorf("too many values to unpack (expected %d)", len(tg.names))
		}
		return errorf("not enough values to unpack (expected %d, got %d)", len(tg.names), len(items))
	}
	for i, name := range tg.names {
		sc.set(name, items[i])
	}
	return nil
}

type forNode struct {
	target target
	iter   expr
	filter expr
	body   []node
	orElse []node
}

func (n *forNode) exec(st *state, sc *scope) (ctl, error) {
	v, err := n.iter.eval(st, sc)
	if err != nil {
		return ctlNone, err
	}
	items, err := iterate(v)
	if err != nil {
		return ctlNone, err
	}
	if n.filter != nil {
		kept := make([]any, 0, len(items))
		for _, it := range items {
			if err := st.step(); err != nil {
				return ctlNone, err
			}
			fs := newScope(sc)
			if err := st.assign(fs, &n.target, it); err != nil {
				return ctlNone, err
			}
			ok, err := n.filter.eval(st, fs)
			if err != nil {
				return ctlNone, err
			}
			if truthy(ok) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	loop := &loopState{items: items}
	for i, it := range items {
		if err := st.step(); err != nil {
			return ctlNone, err
		}
		loop.i = i
		body := newScope(sc)
		body.names = append(body.names, "loop")
		body.vals = append(body.vals, loop)
		if err := st.assign(body, &n.target, it); err != nil {
			return ctlNone, err
		}
		c, err := st.execBody(n.body, body)
		if err != nil {
			return ctlNone, err
		}
		if c == ctlBreak {
			break
		}
	}
	if len(items) == 0 {
		return st.execBody(n.orElse, sc)
	}
	return ctlNone, nil
}

// iterate is the items a for loop or a filter walks: a list's, a dict's
// keys, a string's characters; undefined is empty.
func iterate(v any) ([]any, error) {
	v = unmark(v)
	switch x := v.(type) {
	case []any:
		return x, nil
	case tuple:
		return x, nil
	case *generator:
		return x.rest()
	case *Map:
		return x.keys, nil
	case string:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *Namespace:
		return nil, errorf("'Namespace' object is not iterable")
	}
	return nil, errorf("'%s' object is not iterable", typeName(v))
}

// loopState is the loop variable: loop.index and the rest computed from
// the position.
type loopState struct {
	items []any
	i     int
	// changed: the arguments of the last loop.changed call, if any
	changed    tuple
	hasChanged bool
}

func (l *loopState) attr(name string) any {
	n := len(l.items)
	switch name {
	case "index":
		return l.i + 1
	case "index0":
		return l.i
	case "revindex":
		return n - l.i
	case "revindex0":
		return n - l.i - 1
	case "first":
		return l.i == 0
	case "last":
		return l.i == n-1
	case "length":
		return n
	case "depth":
		return 1
	case "depth0":
		return 0
	case "previtem":
		if l.i == 0 {
			return Undefined{name: "previtem", owner: "LoopContext"}
		}
		return l.items[l.i-1]
	case "nextitem":
		if l.i+1 >= n {
			return Undefined{name: "nextitem", owner: "LoopContext"}
		}
		return l.items[l.i+1]
	case "cycle", "changed":
		return &boundMethod{recv: l, name: name}
	}
	return Undefined{name: name, owner: "LoopContext"}
}

type setNode struct {
	target  target
	e       expr
	block   bool
	body    []node
	filters []*filterNode
	pos     int
}

func (n *setNode) exec(st *state, sc *scope) (ctl, error) {
	var v any
	if n.block {
		s, _, err := st.capture(n.body, sc)
		if err != nil {
			return ctlNone, err
		}
		if v, err = applyFilters(st, sc, n.filters, s); err != nil {
			return ctlNone, err
		}
	} else {
		var err error
		if v, err = n.e.eval(st, sc); err != nil {
			return ctlNone, err
		}
	}
	return ctlNone, st.assign(sc, &n.target, v)
}

func applyFilters(st *state, sc *scope, fs []*filterNode, v any) (any, error) {
	for _, f := range fs {
		a, err := f.args.eval(st, sc)
		if err != nil {
			return nil, err
		}
		if v, err = f.fn(st, v, a); err != nil {
			return nil, err
		}
	}
	return v, nil
}

type filterBlockNode struct {
	filters []*filterNode
	body    []node
}

func (n *filterBlockNode) exec(st *state, sc *scope) (ctl, error) {
	s, _, err := st.capture(n.body, sc)
	if err != nil {
		return ctlNone, err
	}
	v, err := applyFilters(st, sc, n.filters, s)
	if err != nil {
		return ctlNone, err
	}
	if err := st.charge(v); err != nil {
		return ctlNone, err
	}
	return ctlNone, st.write(toStr(v))
}

type withNode struct {
	names []string
	vals  []expr
	body  []node
}

func (n *withNode) exec(st *state, sc *scope) (ctl, error) {
	inner := newScope(sc)
	for i, e := range n.vals {
		v, err := e.eval(st, sc)
		if err != nil {
			return ctlNone, err
		}
		inner.set(n.names[i], v)
	}
	return st.execBody(n.body, inner)
}

type blockNode struct{ body []node }

func (n *blockNode) exec(st *state, sc *scope) (ctl, error) { return st.execBody(n.body, sc) }

type loopCtlNode struct {
	brk bool
	pos int
}

func (n *loopCtlNode) exec(*state, *scope) (ctl, error) {
	if n.brk {
		return ctlBreak, nil
	}
	return ctlContinue, nil
}

type doNode struct{ e expr }

func (n *doNode) exec(st *state, sc *scope) (ctl, error) {
	_, err := n.e.eval(st, sc)
	return ctlNone, err
}

// macroDef is a parsed macro; a Macro is one bound in a rendering, with
// the frame it was defined in (it reads that frame's variables).
type macroDef struct {
	name     string
	params   []string
	defaults []expr // nil: no default
	body     []node
}

// Macro is a template's macro as a value.
type Macro struct {
	*macroDef
	sc *scope
}

type macroNode struct{ m *macroDef }

func (n *macroNode) exec(st *state, sc *scope) (ctl, error) {
	sc.set(n.m.name, &Macro{macroDef: n.m, sc: sc})
	return ctlNone, nil
}

func (st *state) callMacro(m *Macro, a *args) (any, error) {
	if len(a.pos) > len(m.params) {
		return nil, errorf("macro '%s' takes not more than %d argument(s)", m.name, len(m.params))
	}
	if err := st.step(); err != nil {
		return nil, err
	}
	if st.depth >= maxCallDepth {
		return nil, errorf("macro calls nested deeper than %d", maxCallDepth)
	}
	st.depth++
	defer func() { st.depth-- }()
	fs := newScope(m.sc)
	for i, p := range m.params {
		if i < len(a.pos) {
			fs.set(p, a.pos[i])
			continue
		}
		if v, ok := a.kw(p); ok {
			fs.set(p, v)
			continue
		}
		if m.defaults[i] != nil {
			v, err := m.defaults[i].eval(st, fs)
			if err != nil {
				return nil, err
			}
			fs.set(p, v)
			continue
		}
		fs.set(p, Undefined{name: p})
	}
	for _, k := range a.kwNames {
		found := false
		for i, p := range m.params {
			if p == k {
				found = true
				if i < len(a.pos) {
					return nil, errorf("macro '%s' got multiple values for argument '%s'", m.name, k)
				}
			}
		}
		if !found {
			return nil, errorf("macro '%s' takes no keyword argument '%s'", m.name, k)
		}
	}
	s, _, err := st.capture(m.body, fs)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Expressions.

type constNode struct{ v any }

func (n *constNode) eval(*state, *scope) (any, error) { return n.v, nil }

type nameNode struct{ name string }

func (n *nameNode) eval(st *state, sc *scope) (any, error) { return st.lookup(sc, n.name), nil }

// listNode is a list literal, or with isTuple a tuple.
type listNode struct {
	items   []expr
	isTuple bool
}

func (n *listNode) eval(st *state, sc *scope) (any, error) {
	out := make([]any, len(n.items))
	for i, e := range n.items {
		v, err := e.eval(st, sc)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	if n.isTuple {
		return tuple(out), nil
	}
	return out, nil
}

type dictNode struct{ keys, vals []expr }

func (n *dictNode) eval(st *state, sc *scope) (any, error) {
	m := NewMap(len(n.keys))
	for i := range n.keys {
		k, err := n.keys[i].eval(st, sc)
		if err != nil {
			return nil, err
		}
		if err := hashable(k); err != nil {
			return nil, err
		}
		v, err := n.vals[i].eval(st, sc)
		if err != nil {
			return nil, err
		}
		m.set(k, v)
	}
	return m, nil
}

func hashable(k any) error {
	k = unmark(k)
	switch x := k.(type) {
	case nil, bool, int, float64, string:
		return nil
	case Undefined:
		return x.err()
	}
	return errorf("unhashable type: '%s'", typeName(k))
}

type getattrNode struct {
	x    expr
	name string
}

func (n *getattrNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.x.eval(st, sc)
	if err != nil {
		return nil, err
	}
	return getattr(v, n.name)
}

// getattr is jinja2's attribute lookup: the Python attribute (a method)
// first, then the item; missing is undefined; of undefined an error.
func getattr(v any, name string) (any, error) {
	if m, ok := v.(markup); ok && isStrMethod(name) {
		return &boundMethod{recv: string(m), name: name, markup: true}, nil
	}
	v = unmark(v)
	switch x := v.(type) {
	case *Map:
		if isDictMethod(name) {
			return &boundMethod{recv: x, name: name}, nil
		}
		if r, ok := x.get(name); ok {
			return norm(r), nil
		}
		return Undefined{name: name, owner: "dict object"}, nil
	case *Namespace:
		if r, ok := x.attrs.get(name); ok {
			return r, nil
		}
		return Undefined{name: name, owner: "Namespace object"}, nil
	case string:
		if isStrMethod(name) {
			return &boundMethod{recv: x, name: name}, nil
		}
	case []any:
		if isListMethod(name) {
			return &boundMethod{recv: x, name: name}, nil
		}
	case tuple:
		if name == "index" || name == "count" {
			return &boundMethod{recv: x, name: name}, nil
		}
	case *loopState:
		return x.attr(name), nil
	case *cyclerState:
		switch name {
		case "next", "reset":
			return &boundMethod{recv: x, name: name}, nil
		case "current":
			return x.items[x.pos], nil
		}
	case Undefined:
		return nil, x.err()
	}
	return Undefined{name: name, owner: typeName(v) + " object"}, nil
}

type getitemNode struct {
	x   expr
	key expr
}

func (n *getitemNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.x.eval(st, sc)
	if err != nil {
		return nil, err
	}
	k, err := n.key.eval(st, sc)
	if err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		// indexing a string walks it (for its characters)
		if err := st.charge(s); err != nil {
			return nil, err
		}
	}
	return getitem(v, k)
}

// getitem is jinja2's subscript: the item first, then for a string key
// the attribute; missing is undefined.
func getitem(v, k any) (any, error) {
	v, k = unmark(v), unmark(k)
	switch x := v.(type) {
	case *Map:
		if r, ok := x.get(k); ok {
			return norm(r), nil
		}
	case []any, tuple:
		if i, ok := index(k); ok {
			xs, _ := seq(x)
			if i < 0 {
				i += len(xs)
			}
			if i >= 0 && i < len(xs) {
				return norm(xs[i]), nil
			}
			return Undefined{owner: typeName(v) + " object"}, nil
		}
	case string:
		if i, ok := index(k); ok {
			if isASCII(x) {
				if i < 0 {
					i += len(x)
				}
				if i >= 0 && i < len(x) {
					return x[i : i+1], nil
				}
				return Undefined{owner: "str object"}, nil
			}
			rs := []rune(x)
			if i < 0 {
				i += len(rs)
			}
			if i >= 0 && i < len(rs) {
				return string(rs[i]), nil
			}
			return Undefined{owner: "str object"}, nil
		}
	case Undefined:
		return nil, x.err()
	}
	if name, ok := k.(string); ok {
		return getattr(v, name)
	}
	return Undefined{owner: typeName(v) + " object"}, nil
}

func index(k any) (int, bool) {
	switch x := k.(type) {
	case int:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

type sliceNode struct {
	x                 expr
	start, stop, step expr
}

func (n *sliceNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.x.eval(st, sc)
	if err != nil {
		return nil, err
	}
	var bounds [3]any
	for i, e := range [3]expr{n.start, n.stop, n.step} {
		if e == nil {
			continue
		}
		if bounds[i], err = e.eval(st, sc); err != nil {
			return nil, err
		}
	}
	if err := st.charge(v); err != nil {
		return nil, err
	}
	return slice(v, bounds[0], bounds[1], bounds[2])
}

// slice is Python's v[start:stop:step].
func slice(v, start, stop, step any) (any, error) {
	if m, ok := v.(markup); ok {
		r, err := slice(string(m), start, stop, step)
		return toMarkup(r), err // markupsafe's slice is a Markup
	}
	var n int
	var rs []rune
	switch x := v.(type) {
	case []any:
		n = len(x)
	case tuple:
		n = len(x)
	case string:
		if isASCII(x) {
			n = len(x)
		} else {
			rs = []rune(x)
			n = len(rs)
		}
	case Undefined:
		return nil, x.err()
	default:
		// jinja2 slices with Python's own subscript, not its getitem:
		// no undefined here.
		return nil, errorf("'%s' object is not subscriptable", typeName(v))
	}
	bound := func(b any, def int) (int, error) {
		if b == nil {
			return def, nil
		}
		if _, ok := b.(Undefined); ok {
			return def, nil
		}
		i, ok := index(b)
		if !ok {
			return 0, errorf("slice indices must be integers or None")
		}
		return i, nil
	}
	stp, err := bound(step, 1)
	if err != nil {
		return nil, err
	}
	if stp == 0 {
		return nil, errorf("slice step cannot be zero")
	}
	lo, hi := 0, n
	if stp < 0 {
		lo, hi = n-1, -1
	}
	clamp := func(i int, def int, isSet bool) int {
		if !isSet {
			return def
		}
		if i < 0 {
			i += n
			if i < 0 {
				if stp < 0 {
					return -1
				}
				return 0
			}
		}
		if i >= n {
			if stp < 0 {
				return n - 1
			}
			return n
		}
		return i
	}
	s, err := bound(start, 0)
	if err != nil {
		return nil, err
	}
	e, err := bound(stop, 0)
	if err != nil {
		return nil, err
	}
	_, su := start.(Undefined)
	_, eu := stop.(Undefined)
	lo = clamp(s, lo, start != nil && !su)
	hi = clamp(e, hi, stop != nil && !eu)
	var idx []int
	if stp > 0 {
		for i := lo; i < hi; i += stp {
			idx = append(idx, i)
		}
	} else {
		for i := lo; i > hi; i += stp {
			idx = append(idx, i)
		}
	}
	switch x := v.(type) {
	case []any:
		out := make([]any, len(idx))
		for k, i := range idx {
			out[k] = x[i]
		}
		return out, nil
	case tuple:
		out := make(tuple, len(idx))
		for k, i := range idx {
			out[k] = x[i]
		}
		return out, nil
	default:
		s := v.(string)
		if stp == 1 {
			if rs == nil {
				return s[lo:max(lo, hi)], nil
			}
			return string(rs[lo:max(lo, hi)]), nil
		}
		var b strings.Builder
		for _, i := range idx {
			if rs == nil {
				b.WriteByte(s[i])
			} else {
				b.WriteRune(rs[i])
			}
		}
		return b.String(), nil
	}
}

type callArgs struct {
	pos     []expr
	kwNames []string
	kwVals  []expr
}

// args are a call's evaluated arguments.
type args struct {
	pos     []any
	kwNames []string
	kwVals  []any
}

// unmarked is a with its markup values as plain strings: only the +, %
// and * operators and printing tell Markup from its text.
func (a *args) unmarked() *args {
	has := false
	for _, v := range a.pos {
		_, m := v.(markup)
		has = has || m
	}
	for _, v := range a.kwVals {
		_, m := v.(markup)
		has = has || m
	}
	if !has {
		return a
	}
	b := &args{pos: make([]any, len(a.pos)), kwNames: a.kwNames, kwVals: make([]any, len(a.kwVals))}
	for i, v := range a.pos {
		b.pos[i] = unmark(v)
	}
	for i, v := range a.kwVals {
		b.kwVals[i] = unmark(v)
	}
	return b
}

func (a *args) kw(name string) (any, bool) {
	for i, n := range a.kwNames {
		if n == name {
			return a.kwVals[i], true
		}
	}
	return nil, false
}

// get is the argument at position i or named name, Python-style.
func (a *args) get(i int, name string) (any, bool) {
	if i >= 0 && i < len(a.pos) {
		return a.pos[i], true
	}
	return a.kw(name)
}

func (c *callArgs) eval(st *state, sc *scope) (*args, error) {
	a := &args{kwNames: c.kwNames}
	if len(c.pos) > 0 {
		a.pos = make([]any, len(c.pos))
		for i, e := range c.pos {
			v, err := e.eval(st, sc)
			if err != nil {
				return nil, err
			}
			a.pos[i] = v
		}
	}
	if len(c.kwVals) > 0 {
		a.kwVals = make([]any, len(c.kwVals))
		for i, e := range c.kwVals {
			v, err := e.eval(st, sc)
			if err != nil {
				return nil, err
			}
			a.kwVals[i] = v
		}
	}
	return a, nil
}

type callNode struct {
	fn   expr
	args *callArgs
}

func (n *callNode) eval(st *state, sc *scope) (any, error) {
	f, err := n.fn.eval(st, sc)
	if err != nil {
		return nil, err
	}
	a, err := n.args.eval(st, sc)
	if err != nil {
		return nil, err
	}
	a = a.unmarked()
	switch x := f.(type) {
	case *boundMethod:
		if err := st.charge(x.recv); err != nil {
			return nil, err
		}
		v, err := st.callMethod(x, a)
		if err == nil {
			err = st.charge(v)
		}
		return v, err
	case *Macro:
		return st.callMacro(x, a)
	case builtinFunc:
		return x(st, a)
	case *joinerState:
		return st.callMethod(&boundMethod{recv: x}, a)
	case Undefined:
		return nil, x.err()
	}
	return nil, errorf("'%s' object is not callable", typeName(f))
}

type filterNode struct {
	x    expr
	name string
	fn   filterFunc
	args *callArgs
	pos  int
}

func (n *filterNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.x.eval(st, sc)
	if err != nil {
		return nil, err
	}
	a, err := n.args.eval(st, sc)
	if err != nil {
		return nil, err
	}
	// A filter walks its input: a loop calling one on a large value is
	// work in proportion.
	if err := st.charge(v); err != nil {
		return nil, err
	}
	if v, err = n.fn(st, v, a); err != nil {
		return nil, err
	}
	return v, st.charge(v)
}

type testNode struct {
	x      expr
	name   string
	fn     testFunc
	args   *callArgs
	negate bool
}

func (n *testNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.x.eval(st, sc)
	if err != nil {
		return nil, err
	}
	a, err := n.args.eval(st, sc)
	if err != nil {
		return nil, err
	}
	ok, err := n.fn(st, v, a)
	if err != nil {
		return nil, err
	}
	return ok != n.negate, nil
}

type unaryNode struct {
	neg bool
	x   expr
}

func (n *unaryNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.x.eval(st, sc)
	if err != nil {
		return nil, err
	}
	i, f, isF, ok := number(v)
	if !ok {
		if u, ok := v.(Undefined); ok {
			return nil, u.err()
		}
		op := "+"
		if n.neg {
			op = "-"
		}
		return nil, errorf("bad operand type for unary %s: '%s'", op, typeName(v))
	}
	if !n.neg {
		if isF {
			return f, nil
		}
		return i, nil
	}
	if isF {
		return -f, nil
	}
	return -i, nil
}

type notNode struct{ x expr }

func (n *notNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.x.eval(st, sc)
	if err != nil {
		return nil, err
	}
	return !truthy(v), nil
}

type andNode struct{ a, b expr }

func (n *andNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.a.eval(st, sc)
	if err != nil || !truthy(v) {
		return v, err
	}
	return n.b.eval(st, sc)
}

type orNode struct{ a, b expr }

func (n *orNode) eval(st *state, sc *scope) (any, error) {
	v, err := n.a.eval(st, sc)
	if err != nil || truthy(v) {
		return v, err
	}
	return n.b.eval(st, sc)
}

type condNode struct{ test, then, orElse expr }

func (n *condNode) eval(st *state, sc *scope) (any, error) {
	t, err := n.test.eval(st, sc)
	if err != nil {
		return nil, err
	}
	if truthy(t) {
		return n.then.eval(st, sc)
	}
	if n.orElse == nil {
		return Undefined{}, nil
	}
	return n.orElse.eval(st, sc)
}

type compareNode struct {
	first expr
	ops   []string
	rest  []expr
}

func (n *compareNode) eval(st *state, sc *scope) (any, error) {
	a, err := n.first.eval(st, sc)
	if err != nil {
		return nil, err
	}
	for i, op := range n.ops {
		b, err := n.rest[i].eval(st, sc)
		if err != nil {
			return nil, err
		}
		// a comparison or a search walks its operands
		if err := st.charge(a); err != nil {
			return nil, err
		}
		if err := st.charge(b); err != nil {
			return nil, err
		}
		ok, err := compareOp(op, a, b)
		if err != nil || !ok {
			return false, err
		}
		a = b
	}
	return true, nil
}

func compareOp(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return equal(a, b, 0), nil
	case "!=":
		return !equal(a, b, 0), nil
	case "in":
		return contains(b, a)
	case "notin":
		ok, err := contains(b, a)
		return !ok, err
	}
	c, err := compare(a, b, op)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// contains is Python's item in container.
func contains(container, item any) (bool, error) {
	container, item = unmark(container), unmark(item)
	switch x := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if u, ok := item.(Undefined); ok {
				return false, u.err()
			}
			return false, errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(x, s), nil
	case []any, tuple:
		xs, _ := seq(x)
		for _, e := range xs {
			if equal(e, item, 0) {
				return true, nil
			}
		}
		return false, nil
	case *Map:
		switch item.(type) {
		case nil, bool, int, float64, string:
			_, ok := x.get(item)
			return ok, nil
		case []any, *Map:
			return false, errorf("unhashable type: '%s'", typeName(item))
		}
		return false, nil // hashable in Python (a tuple, undefined, a generator), and no key here
	case *generator:
		// Python's in reads the iterator up to the item found
		if err := x.load(); err != nil {
			return false, err
		}
		for i := x.pos; i < len(x.items); i++ {
			if equal(x.items[i], item, 0) {
				x.pos = i + 1
				return true, nil
			}
		}
		x.pos = len(x.items)
		return false, nil
	case Undefined:
		return false, nil
	}
	return false, errorf("argument of type '%s' is not iterable", typeName(container))
}

// addChain is a + b + c + ...: chat templates build each turn so
// ('<|im_start|>' + role + '\n' + content + ...), and adding the strings
// pairwise would copy the growing string once per operand. Evaluated
// left to right as Python does; strings are joined once, anything else
// goes through binop in order (so errors are Python's).
type addChain struct{ xs []expr }

func (n *addChain) eval(st *state, sc *scope) (any, error) {
	acc, err := n.xs[0].eval(st, sc)
	if err != nil {
		return nil, err
	}
	var parts []string // strings to join onto acc, a string
	size := 0          // acc's and parts' length
	flush := func() {
		if len(parts) == 0 {
			return
		}
		var b strings.Builder
		b.Grow(size)
		b.WriteString(acc.(string))
		for _, p := range parts {
			b.WriteString(p)
		}
		acc, parts = b.String(), parts[:0]
	}
	for _, x := range n.xs[1:] {
		v, err := x.eval(st, sc)
		if err != nil {
			return nil, err
		}
		if s, ok := v.(string); ok {
			if a, ok := acc.(string); ok {
				if len(parts) == 0 {
					size = len(a)
				}
				if size += len(s); size > MaxOutput {
					return nil, errorf("string longer than %d bytes", MaxOutput)
				}
				if parts == nil {
					parts = make([]string, 0, len(n.xs)-1)
				}
				parts = append(parts, s)
				continue
			}
		}
		flush()
		if acc, err = binop("+", acc, v); err != nil {
			return nil, err
		}
	}
	flush()
	return acc, st.charge(acc)
}

type binNode struct {
	op   string
	a, b expr
}

func (n *binNode) eval(st *state, sc *scope) (any, error) {
	a, err := n.a.eval(st, sc)
	if err != nil {
		return nil, err
	}
	b, err := n.b.eval(st, sc)
	if err != nil {
		return nil, err
	}
	if n.op == "~" {
		s := toStr(a) + toStr(b)
		if len(s) > MaxOutput {
			return nil, errorf("string longer than %d bytes", MaxOutput)
		}
		return s, st.charge(s)
	}
	v, err := binop(n.op, a, b)
	if err != nil {
		return nil, err
	}
	return v, st.charge(v)
}

func binop(op string, a, b any) (any, error) {
	if r, ok, err := markupOp(op, a, b); ok {
		return r, err
	}
	a, b = unmark(a), unmark(b)
	if s, ok := a.(string); ok && op == "%" {
		return printf(s, b) // str % undefined formats it, as Python does
	}
	if u, ok := a.(Undefined); ok {
		return nil, u.err()
	}
	if u, ok := b.(Undefined); ok {
		return nil, u.err()
	}
	ai, af, afl, aok := number(a)
	bi, bf, bfl, bok := number(b)
	if aok && bok {
		if afl || bfl || op == "/" {
			if op == "/" && !afl && !bfl && bi == 0 {
				return nil, errorf("division by zero")
			}
			if !afl {
				af = float64(ai)
			}
			if !bfl {
				bf = float64(bi)
			}
			return floatOp(op, af, bf)
		}
		return intOp(op, ai, bi)
	}
	switch op {
	case "+":
		switch x := a.(type) {
		case string:
			if y, ok := b.(string); ok {
				if len(x)+len(y) > MaxOutput {
					return nil, errorf("string longer than %d bytes", MaxOutput)
				}
				return x + y, nil
			}
			return nil, errorf(`can only concatenate str (not "%s") to str`, typeName(b))
		case []any:
			if y, ok := b.([]any); ok {
				out := make([]any, 0, len(x)+len(y))
				return append(append(out, x...), y...), nil
			}
			return nil, errorf(`can only concatenate list (not "%s") to list`, typeName(b))
		case tuple:
			if y, ok := b.(tuple); ok {
				out := make(tuple, 0, len(x)+len(y))
				return append(append(out, x...), y...), nil
			}
			return nil, errorf(`can only concatenate tuple (not "%s") to tuple`, typeName(b))
		}
	case "*":
		if bok && !bfl {
			return repeat(a, bi)
		}
		if aok && !afl {
			return repeat(b, ai)
		}
	case "%":
		if s, ok := a.(string); ok {
			return printf(s, b)
		}
	}
	return nil, errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

// markupOp is a + b, a % b or a * b where a markup is involved, as
// markupsafe computes them; ok is false for the other operations.
func markupOp(op string, a, b any) (any, bool, error) {
	am, aIs := a.(markup)
	bm, bIs := b.(markup)
	if !aIs && !bIs {
		return nil, false, nil
	}
	switch op {
	case "+":
		// Markup + str escapes the str, either side; Markup + int is
		// Python's TypeError.
		other := b
		if !aIs {
			other = a
		}
		var text string
		switch o := other.(type) {
		case markup:
			text = string(o)
		case string:
			text = htmlEscape(o)
		default:
			return nil, true, errorf("unsupported operand type(s) for +: '%s' and '%s'", typeName(a), typeName(b))
		}
		if len(text)+len(am)+len(bm) > MaxOutput {
			return nil, true, errorf("string longer than %d bytes", MaxOutput)
		}
		if aIs {
			return markup(string(am) + text), true, nil
		}
		return markup(text + string(bm)), true, nil
	case "%":
		if !aIs {
			return nil, false, nil // str % Markup formats its text
		}
		args, isTuple := b.(tuple)
		if !isTuple {
			switch b.(type) {
			case []any, *Map, Undefined:
				// markupsafe takes an argument with __getitem__ as a
				// mapping, as str's % does
				r, err := printf(string(am), b)
				if err != nil {
					return nil, true, err
				}
				return markup(r.(string)), true, nil
			}
			args = tuple{b}
		}
		esc := make(tuple, len(args))
		for i, x := range args {
			switch x.(type) {
			case bool, int, float64, markup:
				esc[i] = x
			default:
				esc[i] = markup(htmlEscape(toStr(x)))
			}
		}
		var arg any = esc
		if !isTuple {
			arg = esc[0]
		}
		r, err := printf(string(am), arg)
		if err != nil {
			return nil, true, err
		}
		return markup(r.(string)), true, nil
	case "*":
		var r any
		var err error
		if aIs {
			r, err = binop("*", string(am), b)
		} else {
			r, err = binop("*", a, string(bm))
		}
		if s, ok := r.(string); ok && err == nil {
			return markup(s), true, nil
		}
		return r, true, err
	}
	return nil, false, nil
}

func repeat(v any, n int) (any, error) {
	n = max(n, 0)
	switch x := v.(type) {
	case string:
		if n > 0 && len(x) > MaxOutput/n {
			return nil, errorf("string longer than %d bytes", MaxOutput)
		}
		return strings.Repeat(x, n), nil
	case []any:
		if n > 0 && len(x) > MaxSteps/n {
			return nil, errorf("list longer than %d items", MaxSteps)
		}
		out := make([]any, 0, len(x)*n)
		for range n {
			out = append(out, x...)
		}
		return out, nil
	case tuple:
		l, err := repeat([]any(x), n)
		if err != nil {
			return nil, err
		}
		return tuple(l.([]any)), nil
	}
	return nil, errorf("can't multiply sequence by non-int of type '%s'", typeName(v))
}

func intOp(op string, a, b int) (any, error) {
	switch op {
	case "+":
		r := a + b
		if (r > a) != (b > 0) {
			return nil, errorf("integer overflow")
		}
		return r, nil
	case "-":
		r := a - b
		if (r < a) != (b > 0) {
			return nil, errorf("integer overflow")
		}
		return r, nil
	case "*":
		if a != 0 && b != 0 {
			r := a * b
			if r/b != a || (a == -1 && b == math.MinInt) || (b == -1 && a == math.MinInt) {
				return nil, errorf("integer overflow")
			}
			return r, nil
		}
		return 0, nil
	case "//", "%":
		if b == 0 && op == "%" {
			return nil, errorf("integer modulo by zero")
		}
		if b == 0 {
			return nil, errorf("integer division or modulo by zero")
		}
		if a == math.MinInt && b == -1 {
			return nil, errorf("integer overflow")
		}
		q, r := a/b, a%b
		if r != 0 && (r < 0) != (b < 0) {
			q--
			r += b
		}
		if op == "//" {
			return q, nil
		}
		return r, nil
	case "**":
		switch {
		case b < 0:
			return math.Pow(float64(a), float64(b)), nil
		case a == 0 || a == 1:
			if b == 0 {
				return 1, nil
			}
			return a, nil
		case a == -1:
			if b%2 == 1 {
				return -1, nil
			}
			return 1, nil
		case b > 63:
			return nil, errorf("integer overflow")
		}
		r := 1
		for range b {
			if abs(r) > math.MaxInt/abs(a) {
				return nil, errorf("integer overflow")
			}
			r *= a
		}
		return r, nil
	}
	return nil, errorf("unsupported operand %s", op)
}

// floorDiv is Python's float //, from its float_divmod: 7 // 1e-05 is
// 699999.0 (math.Floor(7/1e-05) would be 700000).
func floorDiv(a, b float64) float64 {
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 && (b < 0) != (mod < 0) {
		div--
	}
	if div == 0 {
		return math.Copysign(0, a/b)
	}
	f := math.Floor(div)
	if div-f > 0.5 {
		f++
	}
	return f
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func floatOp(op string, a, b float64) (any, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errorf("float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, errorf("float floor division by zero")
		}
		return floorDiv(a, b), nil
	case "%":
		if b == 0 {
			return nil, errorf("float modulo")
		}
		r := math.Mod(a, b)
		if r != 0 && (r < 0) != (b < 0) {
			r += b
		}
		if r == 0 {
			r = math.Copysign(0, b) // Python's zero takes the divisor's sign
		}
		return r, nil
	case "**":
		if a == 0 && b < 0 {
			return nil, errorf("0.0 cannot be raised to a negative power")
		}
		return math.Pow(a, b), nil
	}
	return nil, errorf("unsupported operand %s", op)
}

// runeLen is a string's length in characters, as Python counts.
func runeLen(s string) int { return utf8.RuneCountInString(s) }
