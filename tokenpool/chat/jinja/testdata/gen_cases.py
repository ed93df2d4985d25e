#!/usr/bin/env python3
"""Writes cases.json: each case's template, data and what Python's jinja2
renders in HuggingFace transformers' chat-template environment (the
expected outputs of TestJinja2Cases). Run from this directory with
jinja2 3.1 installed: python3 gen_cases.py."""
import json
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime(2026, 12, 6, 17, 5, 9).strftime(format)


class Generation(Extension):
    # transformers' AssistantTracker, without the tracking: the body renders.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now


def main():
    with open("cases.txt") as f:
        src = f.read()
    out = []
    for block in src.split("\n====\n"):
        if not block.strip():
            continue
        tmpl, _, data = block.partition("\n----\n")
        data = json.loads(data) if data.strip() else {}
        case = {"template": tmpl, "data": data}
        try:
            case["want"] = env.from_string(tmpl).render(**data)
        except TemplateError as e:
            case["raised"] = str(e)
        except Exception as e:
            case["error"] = type(e).__name__ + ": " + str(e)
        out.append(case)
    with open("cases.json", "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(len(out), "cases")


if __name__ == "__main__":
    main()
