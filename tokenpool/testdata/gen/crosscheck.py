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
MODALITY = {'image_url': 'image', 'input_image': 'image', 'image_pil': 'image', 'image_embeds': 'image',
            'audio_url': 'audio', 'input_audio': 'audio', 'audio_embeds': 'audio', 'video_url': 'video'}
UNTYPED = ['image_url', 'image_pil', 'image_embeds', 'audio_embeds', 'prompt_embeds', 'audio_url', 'input_audio', 'video_url', 'tool_reference']
def part(p):  # (text, media) as chat.mjs's partText
    if isinstance(p, str): return p, None
    t = p.get('type')
    if t is None: t = next((k for k in UNTYPED if k in p and (k != 'input_audio' or p[k] is not None)), None)
    if t in ('text', 'input_text', 'output_text'): return p.get('text'), None
    if t in ('refusal', 'thinking'): return p.get(t), None
    if t == 'tool_reference': return p.get('name'), None
    if t == 'prompt_embeds': return '<prompt_embeds>', None
    m = MODALITY.get(t, t)
    return None, ('<part>' if len(m) > 32 else '<' + m + '>')
def prep(m):
    o = {'role': m['role']}
    c = m.get('content')
    if isinstance(c, list):
        ps = [part(p) for p in c]
        texts = [t for t, _ in ps if t]
        media = [x for _, x in ps if x]
        o['content'] = '\n'.join(media + (['\n'.join(texts)] if texts else []))
    else: o['content'] = '' if c is None else c
    if m['role'] == 'assistant' and m.get('reasoning') is not None:
        o['reasoning'] = o['reasoning_content'] = m['reasoning']
    return o
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
