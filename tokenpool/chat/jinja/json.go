package jinja

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// fToJSON is transformers' tojson, which replaces jinja2's (that one
// escapes HTML): json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), its arguments in that order.
func fToJSON(_ *state, v any, a *args) (any, error) {
	j := jsonWriter{itemSep: ", ", keySep: ": "}
	if x, ok := a.get(0, "ensure_ascii"); ok {
		j.ascii = truthy(x)
	}
	if x, ok := a.get(1, "indent"); ok && x != nil {
		switch w := x.(type) {
		case string:
			j.indent, j.indented = w, true
		default:
			n, ok := index(x)
			if !ok {
				return nil, errorf("tojson: indent must be an int or a string")
			}
			j.indent, j.indented = strings.Repeat(" ", min(max(n, 0), 64)), true
		}
		j.itemSep = ","
	}
	if x, ok := a.get(2, "separators"); ok && x != nil {
		l, ok := seq(x)
		if !ok || len(l) != 2 {
			return nil, errorf("tojson: separators must be a pair of strings")
		}
		j.itemSep, j.keySep = toStr(l[0]), toStr(l[1])
	}
	if x, ok := a.get(3, "sort_keys"); ok {
		j.sortKeys = truthy(x)
	}
	if err := j.write(v, 0); err != nil {
		return nil, err
	}
	return j.b.String(), nil
}

type jsonWriter struct {
	b               strings.Builder
	ascii, sortKeys bool
	indented        bool
	indent          string
	itemSep, keySep string
}

func (j *jsonWriter) newline(depth int) {
	if j.indented {
		j.b.WriteByte('\n')
		for range depth {
			j.b.WriteString(j.indent)
		}
	}
}

func (j *jsonWriter) write(v any, depth int) error {
	if depth > maxReprDepth {
		return errorf("tojson: nesting deeper than %d", maxReprDepth)
	}
	if j.b.Len() > MaxOutput {
		return errorf("tojson: output longer than %d bytes", MaxOutput)
	}
	switch x := norm(unmark(v)).(type) {
	case nil:
		j.b.WriteString("null")
	case bool:
		if x {
			j.b.WriteString("true")
		} else {
			j.b.WriteString("false")
		}
	case int:
		j.b.WriteString(strconv.Itoa(x))
	case float64:
		j.b.WriteString(jsonFloat(x))
	case string:
		jsonQuote(&j.b, x, j.ascii)
	case []any, tuple:
		items, _ := seq(x)
		if len(items) == 0 {
			j.b.WriteString("[]")
			return nil
		}
		j.b.WriteByte('[')
		for i, e := range items {
			if i > 0 {
				j.b.WriteString(j.itemSep)
			}
			j.newline(depth + 1)
			if err := j.write(e, depth+1); err != nil {
				return err
			}
		}
		j.newline(depth)
		j.b.WriteByte(']')
	case *Map:
		if x.Len() == 0 {
			j.b.WriteString("{}")
			return nil
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if j.sortKeys {
			var err error
			slices.SortStableFunc(order, func(p, q int) int {
				c, e := compare(x.keys[p], x.keys[q], "<")
				if e != nil && err == nil {
					err = e
				}
				return c
			})
			if err != nil {
				return err
			}
		}
		j.b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				j.b.WriteString(j.itemSep)
			}
			j.newline(depth + 1)
			var key string
			switch k := x.keys[i].(type) {
			case string:
				key = k
			case nil:
				key = "null"
			case bool:
				key = strconv.FormatBool(k)
			case int:
				key = strconv.Itoa(k)
			case float64:
				key = jsonFloat(k)
			default:
				return errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			jsonQuote(&j.b, key, j.ascii)
			j.b.WriteString(j.keySep)
			if err := j.write(x.vals[i], depth+1); err != nil {
				return err
			}
		}
		j.newline(depth)
		j.b.WriteByte('}')
	default:
		return errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// jsonFloat is a float as json.dumps writes it: its repr, with
// Infinity and NaN for the non-finite.
func jsonFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return pyFloat(f)
}

// jsonQuote is json.dumps of a string: '"', '\\' and control characters
// escaped, and with ascii everything past '~' as \uXXXX.
func jsonQuote(b *strings.Builder, s string, ascii bool) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || ascii && r > 0x7e && r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			case ascii && r >= 0x10000:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// DecodeJSON decodes JSON as Python's json.loads gives it to a template:
// objects as *Map in their order (a repeated key's last value at its
// first place), arrays as []any, numbers as int when written without a
// fraction or exponent (and in int's range), else float64. It reads with
// fastjson, so a string's raw control characters, which a request's
// scan lets through and chat.AppendCanonical writes back raw (an
// argument pretty-printed with "\n" in a request), are taken, where
// encoding/json would refuse the whole value.
func DecodeJSON(data []byte) (any, error) {
	var p fastjson.Parser
	v, err := p.ParseBytes(data)
	if err != nil {
		return nil, fmt.Errorf("jinja: JSON: %w", err)
	}
	return decodeValue(v, 0)
}

func decodeValue(v *fastjson.Value, depth int) (any, error) {
	if depth > maxReprDepth {
		return nil, fmt.Errorf("jinja: JSON nested deeper than %d", maxReprDepth)
	}
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object() // the type was checked
		m := NewMap(o.Len())
		var err error
		o.Visit(func(k []byte, fv *fastjson.Value) {
			if err != nil {
				return
			}
			var x any
			if x, err = decodeValue(fv, depth+1); err == nil {
				m.set(string(k), x)
			}
		})
		return m, err
	case fastjson.TypeArray:
		a := v.GetArray()
		list := make([]any, len(a))
		for i, e := range a {
			x, err := decodeValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			list[i] = x
		}
		return list, nil
	case fastjson.TypeString:
		return string(v.GetStringBytes()), nil
	case fastjson.TypeNumber:
		raw := string(v.MarshalTo(nil)) // as written
		if !strings.ContainsAny(raw, ".eE") {
			if n, err := strconv.Atoi(raw); err == nil {
				return n, nil
			}
		}
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil && !isRange(err) {
			return nil, err
		}
		return f, nil
	case fastjson.TypeTrue:
		return true, nil
	case fastjson.TypeFalse:
		return false, nil
	}
	return nil, nil // null
}
