#!/usr/bin/env python3
"""chat_tools.py: reference prompts of chat requests with tools, tool calls,
tool results and names (issue 34), rendered by each model's own chat
template as vLLM renders them: the request prepared as vLLM prepares it
(below), then Python's jinja2 in HuggingFace transformers' chat-template
environment. saltus's decoder and chat.NewJinja must give the same prompt
(TestJinjaTools). Needs Python 3 with jinja2 3.1 and pydantic 2; run from
this directory: python3 chat_tools.py (or make golden). go test reads only
the committed outputs:

  corpus/chat_tools.json.gz           the requests, as a client sends them
  golden/chat.tools.<name>.json.gz    per request {"prompt": ...} or
                                      {"error": the template's message}

vLLM's preparation, as its chat path does it (entrypoints/chat_utils.py,
_parse_chat_message_content and _postprocess_messages; the tools as the
request model dumps them):
  - a message: role, then content (null becomes "" for a template that
    takes a string, [] for one that loops over content parts, where a
    string becomes one text part), then for an assistant its tool_calls
    when a non-empty list (each call's function.arguments, a JSON string,
    parsed; "" or absent becoming {}), then reasoning and
    reasoning_content; for a tool message its tool_call_id; then name when
    a string;
  - tools: each as a pydantic model with extra members allowed dumps it:
    type (default "function"), function {name, description, parameters
    (None when absent), then the other members}, then the other members;
  - chat_template_kwargs: template variables.
"""
import gzip
import json
import os
from datetime import datetime
from typing import Any, Optional

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel, ConfigDict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, '..'))


class Function(BaseModel):
    model_config = ConfigDict(extra='allow')
    name: str
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None


class Tool(BaseModel):
    model_config = ConfigDict(extra='allow')
    type: str = 'function'
    function: Function


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime(2026, 12, 6).strftime(fmt)


class Generation(Extension):
    # transformers' {% generation %}: renders its body.
    tags = {'generation'}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(('name:endgeneration',), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method('_render'), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = strftime_now
    return env


def prepare(req, openai_format):
    msgs = []
    for m in req['messages']:
        out = {'role': m['role']}
        c = m.get('content')
        if c is None:
            out['content'] = [] if openai_format else ''
        elif isinstance(c, str):
            out['content'] = [{'type': 'text', 'text': c}] if openai_format else c
        else:
            raise ValueError('tool cases use string or null content')
        if m['role'] == 'assistant':
            tcs = m.get('tool_calls')
            if isinstance(tcs, list) and tcs:
                calls = []
                for tc in tcs:
                    tc = json.loads(json.dumps(tc))
                    args = tc['function'].get('arguments')
                    tc['function']['arguments'] = json.loads(args) if args else {}
                    calls.append(tc)
                out['tool_calls'] = calls
            if isinstance(m.get('reasoning'), str):
                out['reasoning'] = out['reasoning_content'] = m['reasoning']
        elif m['role'] == 'tool' and 'tool_call_id' in m:
            out['tool_call_id'] = m['tool_call_id']
        if isinstance(m.get('name'), str):
            out['name'] = m['name']
        msgs.append(out)
    tools = None
    if req.get('tools') is not None:
        tools = [Tool.model_validate(t).model_dump() for t in req['tools']]
    return msgs, tools


def call(id_, name, args):
    return {'id': id_, 'type': 'function', 'function': {'name': name, 'arguments': args}}


def cases():
    weather = {'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather in a city.', 'parameters': {
        'type': 'object', 'properties': {'city': {'type': 'string', 'description': 'City name'}, 'unit': {'type': 'string', 'enum': ['c', 'f']}},
        'required': ['city']}}}
    search = {'function': {'name': 'search', 'parameters': {'type': 'object', 'properties': {'q': {'type': 'string'}}}, 'strict': True}, 'type': 'function'}
    bare = {'type': 'function', 'function': {'name': 'ping'}}
    u = lambda c, **kw: {'role': 'user', 'content': c, **kw}
    a = lambda c, **kw: {'role': 'assistant', 'content': c, **kw}
    s = lambda c: {'role': 'system', 'content': c}
    t = lambda id_, c, **kw: {'role': 'tool', 'tool_call_id': id_, 'content': c, **kw}
    base = [
        {'messages': [u('Weather in Paris?')], 'tools': [weather]},
        {'messages': [s('You are terse.'), u('Weather in Paris?')], 'tools': [weather, search, bare]},
        {'messages': [u('Weather in Paris?'), a(None, tool_calls=[call('c1', 'get_weather', '{"city": "Paris", "unit": "c"}')]), t('c1', '{"temp": 21}')], 'tools': [weather]},
        {'messages': [u('Two cities'), a('Checking both.', tool_calls=[call('a', 'get_weather', '{"city":"Oslo"}'), call('b', 'get_weather', '{"city":"Rome","unit":"f"}')]),
                      t('a', 'cold', name='get_weather'), t('b', 'warm'), u('Thanks, and Tokyo?')], 'tools': [weather]},
        {'messages': [u('q'), a('', tool_calls=[call('x', 'ping', '')]), t('x', 'pong')], 'tools': [bare]},
        {'messages': [u('q'), a('no calls', tool_calls=[]), u('next')], 'tools': [search]},
        {'messages': [u('unicode 😀 ünïcödé'), a(None, tool_calls=[call('u', 'search', '{"q": "café 東京", "n": 3, "deep": {"z": [1, 2.5, null, true], "b": "x"}}')]),
                      t('u', 'résultats')], 'tools': [search]},
        {'messages': [u('named', name='alice'), a('hi alice', name='bot'), u('again')]},
        {'messages': [u('q1'), a('a1', reasoning='thought one', tool_calls=[call('r', 'ping', '{}')]), t('r', 'ok')], 'tools': [bare]},
        {'messages': [u('no tools given'), a(None, tool_calls=[call('n', 'get_weather', '{"city":"Lima"}')]), t('n', 'mild'), u('ok')]},
        {'messages': [u('think off with tools')], 'tools': [weather], 'chat_template_kwargs': {'enable_thinking': False}},
        {'messages': [s('sys'), u('q'), a(None, tool_calls=[call('p', 'ping', '{"k": "v"}')]), t('p', 'r1'), a('done'), u('more')], 'tools': [bare, weather]},
        # Arguments pretty-printed (raw newlines once the request's string
        # is read), a value with an escaped newline, a float; a
        # description with a newline and a tab.
        {'messages': [u('code'), a(None, tool_calls=[call('m', 'run', '{\n  "src": "a\\nb",\n  "x": 1.5,\n  "q": "\\"q\\""\n}')]), t('m', 'line1\nline2')],
         'tools': [{'type': 'function', 'function': {'name': 'run', 'description': 'Runs\n\tcode.', 'parameters': {'type': 'object'}}}]},
    ]
    out = []
    for c in base:
        for agp in (True, False):
            out.append({**c, 'add_generation_prompt': agp})
    return out


def main():
    with open(os.path.join(OUT, 'models', 'qwen3', 'tokenizer_config.json')) as f:
        qwen3 = json.load(f)
    with open(os.path.join(OUT, 'models', 'llama3', 'tokenizer_config.json')) as f:
        llama3 = json.load(f)
    with open(os.path.join(OUT, 'models', 'gemma3', 'tokenizer_config.json')) as f:
        gemma3 = json.load(f)
    with gzip.open(os.path.join(OUT, 'chat', 'deepseek_v3', 'tokenizer_config.json.gz')) as f:
        deepseek = json.load(f)
    # name: (config, content format); Gemma 3's template loops over a
    # message's content, so vLLM hands it the parts ("openai").
    templates = {'qwen3': (qwen3, False), 'llama3': (llama3, False), 'gemma3': (gemma3, True), 'deepseek_v3': (deepseek, False)}
    reqs = cases()
    env = environment()

    def token(v):
        return v['content'] if isinstance(v, dict) else (v or '')
    for name, (cfg, openai_format) in templates.items():
        tmpl = env.from_string(cfg['chat_template'])
        rows = []
        for req in reqs:
            msgs, tools = prepare(req, openai_format)
            kw = {k: token(v) for k, v in cfg.items() if k.endswith('_token') and isinstance(v, (str, dict))}
            kw.update(req.get('chat_template_kwargs') or {})
            try:
                rows.append({'prompt': tmpl.render(messages=msgs, tools=tools, documents=None, add_generation_prompt=req['add_generation_prompt'], **kw)})
            except TemplateError as e:
                rows.append({'error': str(e)})
        with gzip.open(os.path.join(OUT, 'golden', 'chat.tools.%s.json.gz' % name), 'wt') as f:
            json.dump(rows, f, ensure_ascii=False)
    with gzip.open(os.path.join(OUT, 'corpus', 'chat_tools.json.gz'), 'wt') as f:
        json.dump(reqs, f, ensure_ascii=False)


if __name__ == '__main__':
    main()
