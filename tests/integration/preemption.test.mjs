// Preemption by recompute: with a KV budget that holds only ~4 sequences of
// max-model-len tokens, 32 concurrent greedy requests all finish with outputs
// identical to an unconstrained daemon's, and tqserve_num_preemptions_total > 0.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import { startDaemon } from './harness.mjs';
import { streamGreedy, workload } from './workload.mjs';

const MODEL = 'stories260K';
const MAX_LEN = 256;
const FITS = 4;  // sequences of MAX_LEN tokens the small pool holds
const COUNT = 32;
// Long generations (ignore_eos) so that every sequence needs most of MAX_LEN.
const requests = workload(COUNT, { minTokens: 150, maxTokens: 230 }).map((r) => ({ ...r, ignore_eos: true }));
const daemons = [];

after(async () => {
  for (const d of daemons) await d.stop({ signal: 'SIGKILL' });
});

async function runAll(daemon) {
  const client = daemon.client();
  return Promise.all(requests.map((req) => streamGreedy(client, MODEL, req)));
}

test(`${COUNT} requests through a pool of ${FITS} sequences equal an unconstrained run`, async () => {
  const big = await startDaemon({ args: ['--max-model-len', String(MAX_LEN)] });
  daemons.push(big);
  // The pool's geometry, from /metrics: bytes per block and tokens per block.
  const m0 = await big.metrics();
  const blocks = m0.get('tqserve_kv_cache_num_blocks');
  const capacity = m0.get('tqserve_kv_cache_capacity_tokens');
  const poolBytes = m0.sum('tqserve_memory_kv_cache_bytes');
  const blockSize = capacity / blocks;
  const bytesPerBlock = poolBytes / blocks;
  assert.ok(Number.isInteger(blockSize) && blockSize > 0, `block size ${blockSize}`);
  assert.ok(Number.isInteger(bytesPerBlock) && bytesPerBlock > 0, `bytes per block ${bytesPerBlock}`);
  assert.ok(capacity >= COUNT * MAX_LEN, `the default pool (${capacity} tokens) is not unconstrained for this test`);

  const expected = await runAll(big);
  assert.equal((await big.metrics()).get('tqserve_num_preemptions_total'), 0);
  assert.equal((await big.stop()).code, 0);

  const budget = (FITS * MAX_LEN / blockSize) * bytesPerBlock;
  const small = await startDaemon({ args: ['--max-model-len', String(MAX_LEN), '--kv-cache-memory', String(budget)] });
  daemons.push(small);
  const m1 = await small.metrics();
  assert.equal(m1.get('tqserve_kv_cache_capacity_tokens'), FITS * MAX_LEN);

  const got = await runAll(small);
  const differ = [];
  for (let i = 0; i < COUNT; i++) {
    assert.equal(got[i].finish, 'length', `request ${i}: finish ${got[i].finish}`);
    if (got[i].text !== expected[i].text) {
      differ.push(`#${i} ${JSON.stringify(requests[i])}\n  unconstrained: ${JSON.stringify(expected[i].text)}\n  preempted:     ${JSON.stringify(got[i].text)}`);
    }
  }
  const m2 = await small.metrics();
  const preemptions = m2.get('tqserve_num_preemptions_total');
  assert.equal(differ.length, 0, `${differ.length} of ${COUNT} outputs differ (${preemptions} preemptions):\n${differ.join('\n')}`);
  assert.ok(preemptions > 0, 'no preemption happened');
  assert.equal(m2.get('tqserve_num_requests_running'), 0);
  assert.equal(m2.get('tqserve_kv_cache_blocks_used'), 0);
  console.log(`# ${preemptions} preemptions`);
  assert.equal((await small.stop()).code, 0);
});
