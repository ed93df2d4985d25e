# crosscheck.py: checks that chat.mjs's patched @huggingface/jinja renders
# every golden conversation exactly as Python's jinja2 does (the engines'
# renderer; transformers' environment: sandboxed, trim_blocks,
# lstrip_blocks). Optional, not part of `make golden`; needs python3 and
# jinja2.
#
#   cd tokenpool/testdata/gen && CHAT_DUMP=/tmp/chat.json node chat.mjs
#   cd .. && python3 gen/crosscheck.py /tmp/chat.json
import json, gzip, sys, jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
dump = json.load(open(sys.argv[1]))
cases = json.loads(gzip.open('corpus/chat.json.gz').read())
tmpls = json.load(open('chat/templates.json'))
cfg = {m: json.load(open(f'models/{m}/tokenizer_config.json')) for m in ['llama3','qwen3','mistral7b']}
def tokstr(t): return '' if t is None else (t if isinstance(t,str) else t['content'])
def raise_exception(msg): raise jinja2.exceptions.TemplateError(msg)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # as transformers does
env.globals['raise_exception'] = raise_exception
def prep(m):
    m = dict(m)
    c = m.get('content')
    if isinstance(c, list):
        m['content'] = '\n'.join(p['text'] if p['type']=='text' else ('<part>' if len(p['type'])>32 else '<'+p['type']+'>') for p in c)
    elif c is None: m['content'] = ''
    return m
bad = False
combos = [('llama3','llama3'),('qwen3','qwen3'),('qwen3','chatml'),('mistral7b','mistral'),('mistral7b','llama2')]
for model, name in combos:
    t = env.from_string(tmpls[name]); same = diff = err = 0
    # the dump holds the prompts the template rendered, in corpus order
    js = [d['prompt'] for d in dump if d['model']==model and d['name']==name]
    k = 0
    for c in cases:
        ctx = dict(messages=[prep(m) for m in c['messages']], add_generation_prompt=c['add_generation_prompt'], bos_token=tokstr(cfg[model].get('bos_token')), eos_token=tokstr(cfg[model].get('eos_token')))
        if 'enable_thinking' in c: ctx['enable_thinking'] = c['enable_thinking']
        try:
            p = t.render(**ctx)
        except jinja2.exceptions.TemplateError:
            err += 1; continue
        if k < len(js) and js[k] == p: same += 1
        else:
            diff += 1
            if diff <= 2: print(model, name, repr(p[:200]), repr(js[k][:200]) if k < len(js) else None)
        k += 1
    print(model, name, 'python==js', same, 'differ', diff, 'python raised', err, 'js rendered', len(js))
    bad = bad or diff > 0 or same != len(js)
sys.exit(1 if bad else 0)
