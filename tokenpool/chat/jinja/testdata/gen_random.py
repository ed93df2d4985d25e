#!/usr/bin/env python3
"""Writes random.json: random expressions over a fixed context, each with
what Python's jinja2 renders in transformers' environment (gen_cases.py's)
or that it fails, for TestJinja2Random. Run from this directory with
jinja2 3.1 installed: python3 gen_random.py. Seeded: the same file each
run."""
import copy
import json
import random
import re

from jinja2.nodes import EvalContext

from gen_cases import env

CONTEXT = {
    "s": "Hello World", "w": " a b ", "e": "", "n": 3, "z": 0, "m": -2, "f": 2.5, "g": 1e-05,
    "t": True, "no": None, "l": [3, 1, 2], "ls": ["b", "A", "c"], "d": {"k": "v", "a": 1},
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "x": 1}],
}
ATOMS = ["s", "w", "e", "n", "z", "m", "f", "g", "t", "no", "l", "ls", "d", "msgs", "u", "0", "1", "2", "-1", "7",
         "0.5", "2.0", "1e3", "'a'", "'ab c'", "' x '", "''", "none", "true", "false", "[]", "[1, 'a']", "{'k': 1}",
         "(1, 2)", "msgs[0]", "d.k", "d['a']", "l[0]", "msgs[-1].content", "loopless"]
VARS = ["s", "w", "e", "n", "z", "m", "f", "g", "t", "no", "l", "ls", "d", "msgs", "u", "loopless"]


def constant(src):
    """Whether jinja2 folds the expression src to a constant."""
    try:
        node = env.parse("{{ " + src + " }}").body[0].nodes[0]
        node.as_const(EvalContext(env))
        return True
    except Exception:
        return False

BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "upper", "lower", "trim", "first", "last", "list", "string", "int", "float", "abs", "round",
           "join(',')", "join", "tojson", "default('z')", "default('z', true)", "sort", "unique | list", "sum", "min", "max",
           "title", "capitalize", "count", "dictsort", "replace('l', 'L')", "indent(2)", "wordcount",
           "center(9)", "batch(2) | list", "select('odd') | list", "reject('even') | list", "map('string') | list",
           "items | list", "round(1)", "int(5)", "float(1.5)", "reverse | list", "sort(reverse=true)", "tojson(indent=1)",
           "map(attribute='role') | list", "selectattr('role', 'eq', 'user') | list", "format(1)",
           # generators, bare: true when empty, no length, used up by a walk
           "select('odd')", "map('string')", "reverse", "unique", "items", "reject('none')",
           # Markup: escapes what is added to it
           "safe", "escape", "e", "forceescape", "safe + '<&>'", "e ~ '<'", "safe % '<'"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "mapping", "iterable",
         "sequence", "odd", "even", "divisibleby 2", "eq 3", "lt 2", "in [1, 3]", "true", "false", "lower", "upper",
         "callable"]
METHODS = ["upper()", "lower()", "strip()", "split()", "split(' ')", "startswith('H')", "endswith('d')", "title()",
           "capitalize()", "count('l')", "find('o')", "replace('o', '0')", "lstrip()", "rstrip('d')", "get('k')",
           "get('q', 'dflt')", "items() | list", "keys() | list", "values() | list", "index(1)", "isdigit()", "splitlines()",
           "format(1, 2)", "join(['x', 'y'])", "rsplit(' ', 1)", "zfill(5)", "partition(' ')"]


def expr(r, depth):
    if depth <= 0 or r.random() < 0.25:
        return r.choice(ATOMS)
    k = r.random()
    if k < 0.3:
        return f"{expr(r, depth - 1)} {r.choice(BINOPS)} {expr(r, depth - 1)}"
    if k < 0.45:
        return f"({expr(r, depth - 1)}) | {r.choice(FILTERS)}"
    if k < 0.55:
        neg = "not " if r.random() < 0.3 else ""
        return f"({expr(r, depth - 1)}) is {neg}{r.choice(TESTS)}"
    if k < 0.65:
        return f"({expr(r, depth - 1)}).{r.choice(METHODS)}"
    if k < 0.75:
        return f"({expr(r, depth - 1)} if {expr(r, depth - 1)} else {expr(r, depth - 1)})"
    if k < 0.82:
        # jinja2 folds a constant's slice through its getitem (undefined
        # when it fails) where a variable's raises: slice what has a name.
        base = expr(r, depth - 1)
        if constant(base):
            base = r.choice(VARS)
        return f"({base})[{r.choice(['0', '-1', '1:', '::-1', ':2', '-2:', '1::2', repr('k'), repr('role')])}]"
    if k < 0.9:
        return f"{r.choice(['not ', '-'])}({expr(r, depth - 1)})"
    return f"[{expr(r, depth - 1)}, {expr(r, depth - 1)}]"


# Layout: text with spaces, tabs and newlines around tags with whitespace
# control, comments and raw blocks, for trim_blocks and lstrip_blocks.
TEXTS = ["", " ", "  ", "\t", "\n", "\n\n", " \n", "\n  ", "a", " a ", "a\n", "\n b", "x \t\n  y"]


def tag(r, inner, kind="%"):
    left = r.choice(["", "", "-", "+"] if kind != "{" else ["", "", "-"])
    right = r.choice(["", "", "-"] + (["+"] if kind == "%" else []))
    close = {"%": "%}", "#": "#}", "{": "}}"}[kind]
    return "{" + kind + left + " " + inner + " " + right + close


def layout(r, depth):
    parts = []
    for _ in range(r.randint(1, 4)):
        parts.append(r.choice(TEXTS))
        k = r.random()
        if k < 0.3:
            parts.append(tag(r, r.choice(["n", "s", "'v'", "l | length"]), "{"))
        elif k < 0.45:
            parts.append(tag(r, "comment", "#"))
        elif k < 0.55:
            parts.append(tag(r, "raw") + r.choice(TEXTS) + "{{ not }}" + r.choice(TEXTS) + tag(r, "endraw"))
        elif k < 0.65:
            parts.append(tag(r, "set q = 1"))
        elif depth > 0 and k < 0.85:
            parts.append(tag(r, "if " + r.choice(["t", "z", "n > 1"])) + layout(r, depth - 1)
                         + (tag(r, "else") + layout(r, depth - 1) if r.random() < 0.4 else "") + tag(r, "endif"))
        elif depth > 0:
            parts.append(tag(r, "for x in " + r.choice(["l", "[]", "ls"])) + layout(r, depth - 1) + tag(r, "endfor"))
    parts.append(r.choice(TEXTS))
    return "".join(parts)


class Iter:
    """A filter's generator or reversed iterator with a fixed repr (the
    engine's): otherwise the same iterator, so a printed generator has no
    address to differ by."""

    def __init__(self, it, rep):
        self.it, self.rep = it, rep

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.it)

    def __repr__(self):
        return self.rep

    __str__ = __repr__


def fixed_repr(name, func):
    def wrapper(*args, **kwargs):
        v = func(*args, **kwargs)
        if isinstance(v, (str, list)) or not hasattr(v, "__next__"):
            return v
        t = type(v).__name__
        if t == "generator":
            return Iter(v, f"<generator object {v.__name__} at 0x7f0000000000>")
        return Iter(v, f"<{t} object at 0x7f0000000000>")

    if hasattr(func, "jinja_pass_arg"):
        wrapper.jinja_pass_arg = func.jinja_pass_arg
    return wrapper


for _name in ["map", "select", "reject", "selectattr", "rejectattr", "unique", "batch", "items", "reverse"]:
    env.filters[_name] = fixed_repr(_name, env.filters[_name])


# Python prints these unlike this engine (package doc, "Known
# differences"), or with an address: such cases are left out.
SKIP = re.compile(r"dict_items|dict_keys|dict_values|range\(|\d{19}")


def main(count=1000, seed=34, path="random.json"):
    r = random.Random(seed)
    out = []
    while len(out) < count:
        src = "{{ " + expr(r, 3) + " }}" if len(out) % 4 else layout(r, 2)
        case = {"template": src}
        try:
            # a copy: jinja2's indent filter extends a list given to it in place
            case["want"] = env.from_string(src).render(**copy.deepcopy(CONTEXT))
            if SKIP.search(case["want"]):
                continue
        except OverflowError:
            continue
        except Exception as ex:
            case["error"] = type(ex).__name__
        out.append(case)
    with open(path, "w") as f:
        json.dump({"context": CONTEXT, "cases": out}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(len(out), "cases,", sum("error" in c for c in out), "errors")


if __name__ == "__main__":
    import sys

    # optional: count, seed and path, for a longer run than the committed file
    main(*(int(a) for a in sys.argv[1:3]), *sys.argv[3:4])
