// HF tokenizers (npm tokenizers@0.23.2, the Rust library) encode speed, one
// thread, the same measurement as bench/tokenizer_bench.cc:
//   RAYON_NUM_THREADS=1 node bench/tokenizer_bench.mjs --json FILE.json --file TEXT \
//       [--repeats N] [--mode whole|lines]
// Loaded from tests/tokenizer/node_modules (scripts/install_deps.sh).
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../tests/tokenizer/package.json'));
const { Tokenizer } = require('tokenizers');
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
};
const jsonFile = arg('json');
const file = arg('file');
const repeats = Number(arg('repeats', '5'));
const mode = arg('mode', 'whole');
const text = fs.readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');
const lines = mode === 'lines' ? text.split('\n') : [];
if (lines.length && lines[lines.length - 1] === '') lines.pop();  // as std::getline
const t0 = process.hrtime.bigint();
const tok = Tokenizer.fromFile(jsonFile);
const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
let best = Infinity;
let tokens = 0;
for (let r = 0; r < repeats; ++r) {
  const start = process.hrtime.bigint();
  tokens = 0;
  if (mode === 'whole') {
    tokens = (await tok.encode(text, null, { addSpecialTokens: false })).getIds().length;
  } else {
    for (const line of lines) tokens += (await tok.encode(line, null, { addSpecialTokens: false })).getIds().length;
  }
  best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
}
console.log(JSON.stringify({ impl: 'hf-tokenizers', mode, bytes, tokens, best_s: +best.toFixed(4),
  mb_per_s: +(bytes / best / 1e6).toFixed(2), load_s: +loadS.toFixed(3) }));
