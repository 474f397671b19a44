// The README's "Serving" examples work as written: a daemon on the bundled
// model listens on port 8000 (what `make serve` starts), every ```sh block
// (curl) and ```js block (the openai npm client) of the section runs, and a
// ```text block right after an example is its exact output. CTest holds the
// resource lock "port-8000" for this test.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

import { SOURCE_DIR, WORK_DIR, serveForTests } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

const srv = serveForTests({ port: 8000 });

/** The fenced blocks of README.md's "## Serving" section: [{ lang, code, output }]. */
function servingExamples() {
  const readme = fs.readFileSync(path.join(SOURCE_DIR(), 'README.md'), 'utf8');
  const start = readme.search(/^## Serving\s*$/m);
  assert.ok(start >= 0, 'README.md has no "## Serving" section');
  const rest = readme.slice(start + 1);
  const end = rest.search(/^## /m);
  const section = end >= 0 ? rest.slice(0, end) : rest;
  const examples = [];
  let prevEnd = -1;
  let prevExample = false;
  for (const m of section.matchAll(/^```(\w*)\n([\s\S]*?)^```[ \t]*$/gm)) {
    const [lang, code] = [m[1], m[2]];
    const adjacent = prevEnd >= 0 && section.slice(prevEnd, m.index).trim() === '';
    prevEnd = m.index + m[0].length;
    if (lang === 'text' && adjacent && prevExample) examples.at(-1).output = code;
    else if (lang === 'sh' || lang === 'js') examples.push({ lang, code });
    prevExample = lang === 'sh' || lang === 'js';
  }
  return examples;
}

test('make serve runs `tqserve serve` on the bundled model', () => {
  const dry = execFileSync('make', ['-n', '-C', SOURCE_DIR(), 'serve'], { encoding: 'utf8' });
  assert.match(dry, /tqserve serve --model \S*models\/stories260K/);
});

test('every curl and openai example of the Serving section works as written', () => {
  const examples = servingExamples();
  assert.ok(examples.some((e) => e.lang === 'js'), 'no js example');
  assert.ok(examples.filter((e) => e.lang === 'sh' && e.code.includes('curl')).length >= 2, 'fewer than 2 curl examples');
  // The js examples import 'openai' from this directory's node_modules.
  const dir = path.join(WORK_DIR(), 'readme');
  fs.mkdirSync(dir, { recursive: true });
  const link = path.join(dir, 'node_modules');
  if (!fs.existsSync(link)) fs.symlinkSync(path.join(here, 'node_modules'), link);
  let ran = 0;
  for (const [i, ex] of examples.entries()) {
    if (ex.lang === 'sh' && /^\s*make\s/m.test(ex.code)) continue;  // the daemon is already running
    let r;
    if (ex.lang === 'sh') {
      r = spawnSync('bash', ['-euo', 'pipefail', '-c', ex.code], { encoding: 'utf8', cwd: SOURCE_DIR(), timeout: 60_000 });
    } else {
      const file = path.join(dir, `example_${i}.mjs`);
      fs.writeFileSync(file, ex.code);
      r = spawnSync(process.execPath, [file], { encoding: 'utf8', cwd: dir, timeout: 60_000 });
    }
    assert.equal(r.status, 0, `example ${i} (${ex.lang}) failed:\n${ex.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
    assert.ok(r.stdout.length > 0, `example ${i} printed nothing:\n${ex.code}`);
    if (ex.output !== undefined) assert.equal(r.stdout.trimEnd(), ex.output.trimEnd(), `example ${i} output:\n${ex.code}`);
    // No JSON answer (or SSE payload) may be an error.
    for (const line of r.stdout.split('\n')) {
      let value;
      try {
        value = JSON.parse(line.replace(/^data: /, ''));
      } catch {
        continue;
      }
      assert.equal(value?.error, undefined, `example ${i}: ${line}`);
    }
    ran++;
  }
  assert.ok(ran >= 3, `only ${ran} examples ran`);
  console.log(`# ${ran} README examples ran`);
});
