// 64 concurrent streaming greedy requests with different prompts and lengths
// all finish, and each output is identical to the same request sent alone
// (sequentially, beforehand): batching must not change any sequence's result.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { sampleMetric, serveForTests } from './harness.mjs';
import { streamGreedy, workload } from './workload.mjs';

const MODEL = 'stories260K';
const COUNT = 64;

const srv = serveForTests();

test(`${COUNT} concurrent streams equal the same requests sent alone`, async () => {
  const client = srv.client;
  const requests = workload(COUNT);
  const alone = [];
  for (const req of requests) alone.push(await streamGreedy(srv.client, MODEL, req));
  for (const [i, a] of alone.entries()) {
    assert.ok(a.finish === 'stop' || a.finish === 'length', `request ${i} alone: finish ${a.finish}`);
  }

  const t0 = Date.now();
  const sampler = sampleMetric(srv.daemon, 'tqserve_num_requests_running');
  const together = await Promise.all(requests.map((req) => streamGreedy(srv.client, MODEL, req)));
  const seconds = (Date.now() - t0) / 1000;
  const running = await sampler.stop();

  const differ = [];
  for (let i = 0; i < COUNT; i++) {
    if (together[i].text !== alone[i].text || together[i].finish !== alone[i].finish) {
      differ.push(`#${i} ${JSON.stringify(requests[i])}\n  alone:    ${JSON.stringify(alone[i].text)} (${alone[i].finish})` +
        `\n  together: ${JSON.stringify(together[i].text)} (${together[i].finish})`);
    }
  }
  assert.equal(differ.length, 0, `${differ.length} of ${COUNT} outputs changed under concurrency:\n${differ.join('\n')}`);
  // The engine ran many of them at once.
  assert.ok(Math.max(...running) >= 8, `at most ${Math.max(...running)} requests ran at once (samples ${running})`);
  const m = await srv.daemon.metrics();
  assert.equal(m.get('tqserve_num_requests_running'), 0);
  assert.equal(m.get('tqserve_kv_cache_blocks_used'), 0);
  assert.ok(m.sum('tqserve_request_success_total') >= 2 * COUNT);
  console.log(`# ${COUNT} concurrent streams in ${seconds.toFixed(2)} s, up to ${Math.max(...running)} running at once`);
});
