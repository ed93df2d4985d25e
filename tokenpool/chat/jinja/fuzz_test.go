package jinja

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// seedTemplates are the unit cases' templates, the fuzz seeds.
func seedTemplates(tb testing.TB) []string {
	raw, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		tb.Fatal(err)
	}
	var cases []struct {
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		tb.Fatal(err)
	}
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.Template
	}
	return out
}

// checkRender renders t with vars and fails on a recovered panic (an
// engine bug: every other failure is an error value).
func checkRender(t *testing.T, tmpl *Template, vars map[string]any) {
	t.Helper()
	out, err := tmpl.Render(vars)
	if err != nil {
		if strings.HasPrefix(err.Error(), "BUG:") {
			t.Fatal(err)
		}
		if out != "" {
			t.Fatalf("an error with output %q", out)
		}
		return
	}
	if len(out) > MaxOutput {
		t.Fatalf("output of %d bytes", len(out))
	}
}

// FuzzParse: any source either compiles or is a *SyntaxError with a
// line, never a panic or a hang; what compiles renders (with a few
// variables) or fails with an error.
func FuzzParse(f *testing.F) {
	for _, s := range seedTemplates(f) {
		f.Add(s)
	}
	f.Add("{% for x in range(100000) %}{% for y in range(100000) %}{% endfor %}{% endfor %}")
	f.Add("{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}")
	f.Add("{{ 'x' * 1000000 * 100 }}{{ (((((((1))))))) }}{% raw %}{{{% endraw %}")
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 8192 {
			t.Skip()
		}
		tmpl, err := Parse(src)
		if err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("Parse error of type %T: %v", err, err)
			}
			return
		}
		tmpl.maxSteps, tmpl.maxWork = 100_000, 16<<20
		checkRender(t, tmpl, map[string]any{"xs": []any{1, "a", nil}, "s": "str", "d": fromGoMap(map[string]any{"k": "v"})})
	})
}

// renderTemplates are chat-template shapes FuzzRender renders fuzzed data
// with: every value of the data is a client's.
var renderTemplates = [...]string{
	`{% for m in messages %}{{ m.role | upper }}: {{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor %}`,
	`{% set ns = namespace(sys='') %}{% for m in messages %}{% if m['role'] == 'system' %}{% set ns.sys = m['content'] %}{% elif m.content is string %}{{ m.content.split('</think>')[-1].lstrip('\n') }}{% else %}{% for p in m.content %}{{ p.text if p.type == 'text' else '<img>' }}{% endfor %}{% endif %}{% endfor %}{{ ns.sys }}`,
	`{{ messages | tojson }}|{{ messages | tojson(indent=2) }}|{{ messages }}|{{ messages | length }}|{{ messages[-1] }}`,
	`{% for m in messages %}{% for k, v in m.items() %}{{ k }}={{ v }}{{ v | string | length }}{% endfor %}{{ m.get('content', '') ~ '' }}{{ (m.content or '') * 2 if m.content is string }}{% endfor %}`,
	`{{ messages | map(attribute='role') | unique | join(',') }}|{{ messages | selectattr('role', 'eq', 'user') | list | length }}|{{ messages | sort(attribute='role') | first }}|{{ messages[1:3] }}`,
	`{% macro show(v, d) %}{% if v is mapping %}{% for k in v %}{{ k }}:{{ show(v[k], d + 1) }}{% endfor %}{% elif v is iterable and v is not string %}{% for x in v %}{{ show(x, d + 1) }}{% endfor %}{% else %}{{ v }}{% endif %}{% endmacro %}{{ show(messages, 0) }}`,
	`{% for m in messages %}{{ m.content + m.role }}{{ m.n + 1 }}{{ m.n / m.d }}{{ m.n // m.d }}{{ m.n % m.d }}{{ m.n ** 2 }}{{ m.n < m.d }}{{ m.n in m.content }}{{ m.content[m.n] }}{{ m.content[m.n:m.d] }}{% endfor %}`,
	`{% for m in messages %}{{ m.content | int }}{{ m.content | float }}{{ m.content | round }}{{ m.content | abs }}{{ m.content | default('d', true) }}{{ m.content | indent(2) }}{{ m.content | title }}{{ m.content | wordcount }}{{ '%s' % m.content }}{{ m.content.format(1) }}{% endfor %}`,
}

// FuzzRender: the fixed templates above with fuzzed data (a JSON object
// of variables): a rendering or an error, never a panic.
func FuzzRender(f *testing.F) {
	f.Add(`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"a</think>\nb"},{"role":"user","content":[{"type":"text","text":"t"},{"type":"image"}]}]}`)
	f.Add(`{"messages":[{"role":"user","content":"abc","n":1,"d":2},{"role":"x","content":5,"n":-1,"d":0}]}`)
	f.Add(`{"messages":[{"role":1,"content":[[[[{"a":{"b":[1.5,null,true]}}]]]]}]}`)
	f.Add(`{"messages":"str"}`)
	f.Add(`{"messages":[{"content":"{} {0} %s\n\nx","n":100,"d":3}]}`)
	tmpls := make([]*Template, len(renderTemplates))
	for i, s := range renderTemplates {
		var err error
		if tmpls[i], err = Parse(s); err != nil {
			f.Fatalf("template %d: %v", i, err)
		}
	}
	f.Fuzz(func(t *testing.T, data string) {
		v, err := DecodeJSON([]byte(data))
		if err != nil {
			return
		}
		m, ok := v.(*Map)
		if !ok {
			return
		}
		vars := map[string]any{}
		for i, k := range m.Keys() {
			if s, ok := k.(string); ok {
				vars[s] = m.Value(i)
			}
		}
		for _, tmpl := range tmpls {
			checkRender(t, tmpl, vars)
		}
	})
}

// TestBounds: each bound of a rendering stops it with its error.
func TestBounds(t *testing.T) {
	t.Parallel()
	f := func(src string, steps, work int, want string) {
		t.Helper()
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if tmpl.maxSteps != MaxSteps || tmpl.maxWork != MaxWork {
			t.Fatalf("Parse's bounds %d %d", tmpl.maxSteps, tmpl.maxWork)
		}
		if steps > 0 {
			tmpl.maxSteps, tmpl.maxWork = steps, work
		}
		out, err := tmpl.Render(nil)
		if err == nil || !strings.Contains(err.Error(), want) || out != "" {
			t.Errorf("%q: %q, %v; want an error containing %q", src, out, err, want)
		}
	}
	f("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", 1000, MaxWork, "more than 1000 loop iterations")
	f("{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxx' %}{% endfor %}", MaxSteps, 1<<20, "more than 1048576 bytes")
	f("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}", 0, 0, "output exceeds")
	f("{{ 'x' * 100000000 }}", 0, 0, "string longer than")
	f("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", 0, 0, "nested deeper than 100")
	f("{{ range(100001) }}", 0, 0, "Range too big")
	f("{{ 2 ** 64 }}", 0, 0, "integer overflow")
}
