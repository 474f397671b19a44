// The greedy completion of "Once upon a time" by the bundled model, served
// over HTTP, equals the published llama2.c reference text (decoded from the
// reference ids by the Python sentencepiece library), and its logprobs equal
// log-softmax of an independent float64 forward pass (tests/reference/llama_ref.py).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { MODEL, PYTHON, SOURCE_DIR, WORK_DIR, referenceCompletion, referenceIds, serveForTests } from './harness.mjs';

const N = 100;  // tokens a float32 engine must reproduce (../shared/models/README.md)

// fp32 KV: the uncompressed baseline that must follow the reference exactly.
const srv = serveForTests({ args: ['--kv-cache-dtype', 'fp32'] });

/** log_softmax rows of llama_ref.py's float64 logits for `ids` (TQREF1 file). */
function float64LogSoftmax(ids) {
  const out = path.join(WORK_DIR(), 'reference_greedy_logits.bin');
  execFileSync(PYTHON(), [path.join(SOURCE_DIR(), 'tests/reference/llama_ref.py'), '--model', MODEL(), '--out', out, '--ids', ids.join(',')]);
  const buf = fs.readFileSync(out);
  assert.equal(buf.subarray(0, 7).toString('latin1'), 'TQREF1\n');
  const n = buf.readInt32LE(7);
  const vocab = buf.readInt32LE(11);
  const base = 15 + 4 * n;
  const rows = [];
  for (let t = 0; t < n; t++) {
    const row = Array.from({ length: vocab }, (_, v) => buf.readDoubleLE(base + 8 * (t * vocab + v)));
    const max = Math.max(...row);
    const lse = max + Math.log(row.reduce((a, x) => a + Math.exp(x - max), 0));
    rows.push(row.map((x) => x - lse));
  }
  return rows;
}

test(`greedy "Once upon a time" (${N} tokens) equals the reference text`, async () => {
  const client = srv.client;
  const r = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: N, temperature: 0, logprobs: 5 });
  const expected = referenceCompletion(N);
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, N);

  // Streamed, the same text.
  const s = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: N, temperature: 0, stream: true });
  let streamed = '';
  for await (const chunk of s) streamed += chunk.choices[0]?.text ?? '';
  assert.equal(streamed, expected);

  // Logprobs: position k of the completion is predicted by row 4 + k of
  // [BOS, 4 prompt ids, generated ids...].
  const ids = [1, ...referenceIds().slice(0, 4 + N - 1)];
  const rows = float64LogSoftmax(ids);
  const lp = r.choices[0].logprobs;
  let worst = 0;
  for (let k = 0; k < N; k++) {
    const row = rows[4 + k];
    const want = row[referenceIds()[4 + k]];
    worst = Math.max(worst, Math.abs(lp.token_logprobs[k] - want));
    const refTop = [...row].sort((a, b) => b - a).slice(0, 5);
    for (const v of Object.values(lp.top_logprobs[k])) {
      assert.ok(refTop.some((x) => Math.abs(x - v) < 2e-3), `position ${k}: top logprob ${v} not among the reference's ${refTop}`);
    }
  }
  assert.ok(worst < 2e-3, `chosen-token logprobs differ from float64 by up to ${worst}`);
});
