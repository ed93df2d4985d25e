// unicode.mjs: the Unicode tables of saltus's pure-Go tokenizer, in the
// versions HuggingFace tokenizers 0.23.2 (npm) uses, from the npm packages
// @unicode/unicode-<version> (Mathias Bynens' node-unicode-data, MIT).
//
//   cd tokenpool/testdata/gen && npm ci && node unicode.mjs
//
// Writes tokenpool/tokenizer/unicode_tables.go. The versions were measured
// on the prebuilt library itself, code point by code point (see
// tokenpool/testdata/README.md): the Split and ByteLevel regexes
// (Oniguruma: \p{L}, \p{N}, \s) and the added tokens' single_word check
// (Rust regex: \w) are Unicode 16.0.0; the Digits pre-tokenizer (Rust's
// char::is_numeric) is 17.0.0; the NFC normalizer
// (unicode-normalization-alignments 0.1.12) is 9.0.0.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';

const here = path.dirname(new URL(import.meta.url).pathname);
const dst = path.resolve(here, '../../tokenizer/unicode_tables.go');

const load = async (version, prop) =>
  (await import(`@unicode/unicode-${version}/${prop}/code-points.mjs`)).default;

// union of properties, as sorted code points
async function set(version, ...props) {
  const s = new Set();
  for (const p of props) for (const c of await load(version, p)) s.add(c);
  return [...s].sort((a, b) => a - b);
}

// Go *unicode.RangeTable literal for sorted code points.
function rangeTable(cps) {
  const ranges = [];
  for (const c of cps) {
    const r = ranges[ranges.length - 1];
    if (r && r[1] === c - 1) r[1] = c;
    else ranges.push([c, c]);
  }
  const r16 = [], r32 = [];
  let latin = 0;
  for (const [lo, hi] of ranges) {
    if (hi <= 0xffff) { r16.push([lo, hi]); if (hi <= 0xff) latin++; }
    else if (lo > 0xffff) r32.push([lo, hi]);
    else { r16.push([lo, 0xffff]); r32.push([0x10000, hi]); }
  }
  const hex = (n) => '0x' + n.toString(16).padStart(4, '0');
  const rows = (rs, t) => rs.map(([lo, hi]) => `\t\t{${hex(lo)}, ${hex(hi)}, 1},`).join('\n');
  let out = '&unicode.RangeTable{\n';
  if (r16.length) out += `\tR16: []unicode.Range16{\n${rows(r16)}\n\t},\n`;
  if (r32.length) out += `\tR32: []unicode.Range32{\n${rows(r32)}\n\t},\n`;
  if (latin) out += `\tLatinOffset: ${latin},\n`;
  return out + '}';
}

const tables = [
  ['letter16', 'Unicode 16.0.0 General_Category L: Oniguruma\'s \\p{L}.', await set('16.0.0', 'General_Category/Letter')],
  ['number16', 'Unicode 16.0.0 General_Category N: Oniguruma\'s \\p{N}.', await set('16.0.0', 'General_Category/Number')],
  ['numeric17', 'Unicode 17.0.0 General_Category N (Nd, Nl, No): Rust\'s char::is_numeric, which the Digits pre-tokenizer uses.', await set('17.0.0', 'General_Category/Number')],
  ['word16', 'Unicode 16.0.0 \\w of Rust\'s regex crate (Alphabetic, M, Nd, Pc, Join_Control), which single_word checks.',
    await set('16.0.0', 'Binary_Property/Alphabetic', 'General_Category/Mark', 'General_Category/Decimal_Number', 'General_Category/Connector_Punctuation', 'Binary_Property/Join_Control')],
  ['space16', 'Unicode 16.0.0 White_Space: Oniguruma\'s \\s and Rust\'s char::is_whitespace.', await set('16.0.0', 'Binary_Property/White_Space')],
  ['assigned9', 'The code points assigned in Unicode 9.0.0, the version of NFC\'s data (nfc.go).', await assigned('9.0.0')],
];

async function assigned(version) {
  const un = new Set(await load(version, 'General_Category/Unassigned'));
  const out = [];
  for (let c = 0; c <= 0x10ffff; c++) if (!un.has(c)) out.push(c);
  return out;
}

// Check each table against the reference itself, code point by code point,
// before writing it: HuggingFace's Split (Oniguruma) for \p{L}, \p{N} and
// \s, its Digits pre-tokenizer for char::is_numeric, and the single_word
// check of an added token for Rust regex's \w.
const { Tokenizer, digitsPreTokenizer } = await import('tokenizers');
const all = [];
for (let c = 0; c <= 0x10ffff; c++) if (c < 0xd800 || c > 0xdfff) all.push(c);
const chunks = function* (B) { for (let i = 0; i < all.length; i += B) yield all.slice(i, i + B); };
const model = { type: 'WordLevel', vocab: { a: 0, '\u2603': 1 }, unk_token: 'a' };
const tokenizer = (j) => Tokenizer.fromString(JSON.stringify({ version: '1.0', truncation: null, padding: null,
  added_tokens: [], normalizer: null, post_processor: null, decoder: null, model, ...j }));
async function probe(name) {
  if (name === 'numeric17') { // Digits(individual): a numeric character is a piece of its own
    const pt = digitsPreTokenizer(true), out = [];
    for (const ch of chunks(4096)) for (const [p] of pt.preTokenizeString(ch.map((c) => 'a' + String.fromCodePoint(c)).join('') + 'a')) if (!p.includes('a')) out.push(p.codePointAt(0));
    return out;
  }
  if (name === 'word16') { // single_word U+2603 after c matches unless c is \w
    const tok = tokenizer({ pre_tokenizer: { type: 'WhitespaceSplit' }, added_tokens: [{ id: 1, content: '\u2603', single_word: true, lstrip: false, rstrip: false, normalized: false, special: true }] });
    const out = [];
    for (const ch of chunks(2000)) {
      const cs = ch.filter((c) => c !== 0x2603);
      const e = await tok.encode(cs.map((c) => String.fromCodePoint(c) + '\u2603 ').join(''), null, { addSpecialTokens: false });
      const ids = e.getIds(), starts = new Set(e.getOffsets().filter((_, k) => ids[k] === 1).map((o) => o[0])); // offsets count code points
      cs.forEach((c, k) => { if (!starts.has(3 * k + 1)) out.push(c); });
    }
    return out;
  }
  const re = { letter16: '\\p{L}', number16: '\\p{N}', space16: '\\s' }[name];
  if (!re) return null;
  const pt = tokenizer({ pre_tokenizer: { type: 'Split', pattern: { Regex: re }, behavior: 'Removed', invert: false } }).getPreTokenizer();
  const non = new Set();
  for (const ch of chunks(4096)) for (const [p] of pt.preTokenizeString(String.fromCodePoint(...ch))) for (const c of p) non.add(c.codePointAt(0));
  return all.filter((c) => !non.has(c));
}
for (const [name, , cps] of tables) {
  const ref = await probe(name);
  if (!ref) continue;
  const want = new Set(ref), got = new Set(cps);
  const diff = [...ref.filter((c) => !got.has(c)), ...cps.filter((c) => !want.has(c) && c !== 0x2603)];
  if (diff.length) throw new Error(`${name}: ${diff.length} code points differ from tokenizers, e.g. ${diff.slice(0, 8).map((c) => c.toString(16))}`);
  console.log(`${name}: agrees with tokenizers on all code points`);
}

// gc16: where Unicode 16.0.0's General_Category differs from 15.0.0's (Go's
// unicode package): the code points assigned since, and any that moved. The
// regexp2 path of Split (regex.go) classifies text with Go's tables, so it
// stands a proxy of the right category in for each of these.
const gcNames = { Lu: 'Uppercase_Letter', Ll: 'Lowercase_Letter', Lt: 'Titlecase_Letter', Lm: 'Modifier_Letter',
  Lo: 'Other_Letter', Mn: 'Nonspacing_Mark', Mc: 'Spacing_Mark', Me: 'Enclosing_Mark', Nd: 'Decimal_Number',
  Nl: 'Letter_Number', No: 'Other_Number', Pc: 'Connector_Punctuation', Pd: 'Dash_Punctuation',
  Ps: 'Open_Punctuation', Pe: 'Close_Punctuation', Pi: 'Initial_Punctuation', Pf: 'Final_Punctuation',
  Po: 'Other_Punctuation', Sm: 'Math_Symbol', Sc: 'Currency_Symbol', Sk: 'Modifier_Symbol', So: 'Other_Symbol',
  Zs: 'Space_Separator', Zl: 'Line_Separator', Zp: 'Paragraph_Separator', Cc: 'Control', Cf: 'Format',
  Co: 'Private_Use' };
const gcRows = [];
for (const [gc, name] of Object.entries(gcNames)) {
  const was = new Set(await load('15.0.0', `General_Category/${name}`));
  const cps = (await load('16.0.0', `General_Category/${name}`)).filter((c) => !was.has(c)).sort((a, b) => a - b);
  for (const c of cps) {
    const r = gcRows[gcRows.length - 1];
    if (r && r[2] === gc && r[1] === c - 1) r[1] = c;
    else gcRows.push([c, c, gc]);
  }
}
gcRows.sort((a, b) => a[0] - b[0]);

let go = `// Code generated by tokenpool/testdata/gen/unicode.mjs from the npm packages
// @unicode/unicode-9.0.0, -16.0.0 and -17.0.0; DO NOT EDIT.

package tokenizer

import "unicode"

// The Unicode versions of the tables: HuggingFace tokenizers 0.23.2's, as
// measured on its prebuilt library (tokenpool/testdata/README.md). Go's
// unicode package and x/text are 15.0.0.
const (
	UnicodeVersionRegex   = "16.0.0" // \\p{L}, \\p{N}, \\s of the Split and ByteLevel regexes (Oniguruma); \\w of single_word (Rust regex)
	UnicodeVersionNumeric = "17.0.0" // the Digits pre-tokenizer (Rust's char::is_numeric)
	UnicodeVersionNFC     = "9.0.0"  // the NFC normalizer (unicode-normalization-alignments 0.1.12)
)
`;
for (const [name, doc, cps] of tables) go += `\n// ${name}: ${doc}\nvar ${name} = ${rangeTable(cps)}\n`;
go += `\n// gc16Changes: the code points whose Unicode 16.0.0 General_Category is not\n// their 15.0.0 one (Go's unicode package), sorted, with the 16.0.0 category.\nvar gc16Changes = []gcChange{\n` +
  gcRows.map(([lo, hi, gc]) => `\t{0x${lo.toString(16).padStart(4, '0')}, 0x${hi.toString(16).padStart(4, '0')}, "${gc}"},`).join('\n') + '\n}\n';
fs.writeFileSync(dst, go);
execFileSync('gofmt', ['-w', dst]);
console.log('wrote', dst, tables.map(([n, , c]) => `${n}=${c.length}`).join(' '));
