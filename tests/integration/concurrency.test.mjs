// 64 concurrent streaming greedy requests with different prompts and lengths
// all finish, and each output is identical to the same request sent alone
// (sequentially, beforehand): batching must not change any sequence's result.
// And bursts of connections are accepted at once (no SYN retries).
import assert from 'node:assert/strict';
import net from 'node:net';
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
  for (const req of requests) alone.push(await streamGreedy(client, MODEL, req));
  for (const [i, a] of alone.entries()) {
    assert.ok(a.finish === 'stop' || a.finish === 'length', `request ${i} alone: finish ${a.finish}`);
  }

  const t0 = Date.now();
  const sampler = sampleMetric(srv.daemon, 'tqserve_num_requests_running', 5);
  const together = await Promise.all(requests.map((req) => streamGreedy(client, MODEL, req)));
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

test('bursts of 256 simultaneous connections are all answered within 0.9 s', async () => {
  // A listen backlog smaller than the burst drops connections; the client's
  // kernel retries the SYN after 1 s, 3 s, 7 s..., so a full accept queue
  // shows up as seconds of delay (or resets), never as a clean failure.
  const N = 256;
  const once = () =>
    new Promise((resolve) => {
      const start = performance.now();
      const sock = net.connect(srv.daemon.port, '127.0.0.1', () => sock.write('GET /health HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n'));
      let reply = '';
      sock.on('data', (b) => (reply += b));
      sock.on('end', () => resolve({ ms: performance.now() - start, status: reply.split(' ')[1] }));
      sock.on('error', (e) => resolve({ ms: performance.now() - start, status: e.code }));
      sock.setTimeout(5000, () => {
        sock.destroy();
        resolve({ ms: performance.now() - start, status: 'no answer in 5 s' });
      });
    });
  for (let burst = 0; burst < 8; burst++) {
    const results = await Promise.all(Array.from({ length: N }, once));
    const bad = results.filter((r) => r.status !== '200');
    const slowest = Math.max(...results.map((r) => r.ms));
    assert.equal(bad.length, 0, `burst ${burst}: ${bad.length} of ${N} connections failed: ${JSON.stringify(bad.slice(0, 3))}`);
    assert.ok(slowest < 900, `burst ${burst}: the slowest of ${N} connections took ${slowest.toFixed(0)} ms (listen backlog too small?)`);
  }
});
