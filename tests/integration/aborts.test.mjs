// Client disconnects mid-stream abort the request and free its KV blocks: 200
// streams closed by the client (half through the openai client's
// AbortController, half by destroying the socket) leave
// tqserve_num_requests_running 0 and tqserve_kv_cache_blocks_used 0 within a
// second, and the daemon still serves.
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';

import { sleep, serveForTests } from './harness.mjs';
import { workload } from './workload.mjs';

const MODEL = 'stories260K';
const COUNT = 200;

const srv = serveForTests();

/** Opens a stream with the openai client and aborts it after `afterChunks` chunks. */
async function abortWithController(client, req, afterChunks) {
  const controller = new AbortController();
  const stream = await client.completions.create({ model: MODEL, stream: true, ...req }, { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.finish_reason) return 'finished';
      if (++chunks >= afterChunks) controller.abort();
    }
  } catch (e) {
    if (e.name !== 'AbortError' && !(e.constructor?.name ?? '').includes('Abort')) throw e;
  }
  return 'aborted';
}

/** Opens a stream over a fresh TCP connection and destroys the socket after the first bytes. */
function abortWithSocket(req) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: MODEL, stream: true, ...req });
    const r = http.request(`${srv.daemon.url}/v1/completions`, {
      method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`HTTP ${res.statusCode}`));
      res.on('error', () => {});  // the reset that destroy() causes
      res.once('data', () => {
        r.destroy();
        resolve('aborted');
      });
    });
    r.on('error', (e) => (r.destroyed ? resolve('aborted') : reject(e)));
    r.end(body);
  });
}

test(`${COUNT} streams closed by the client free everything within 1 s`, async () => {
  const client = srv.client;
  // Long generations (ignore_eos, 300 tokens) so that every stream is closed mid-generation.
  const requests = workload(COUNT, { minTokens: 300, maxTokens: 300 }).map((r) => ({ ...r, ignore_eos: true, temperature: 0.8, seed: 1 }));
  const outcomes = await Promise.all(requests.map((req, i) => (i % 2 ? abortWithSocket(req) : abortWithController(client, req, 1 + (Math.floor(i / 2) % 2)))));
  const lastAbort = Date.now();
  assert.equal(outcomes.filter((o) => o !== 'aborted').length, 0, 'some streams finished before the client closed them');

  let m;
  for (;;) {
    m = await srv.daemon.metrics();
    if (m.get('tqserve_num_requests_running') === 0 && m.get('tqserve_kv_cache_blocks_used') === 0 && m.get('tqserve_num_requests_waiting') === 0) break;
    assert.ok(Date.now() - lastAbort < 1000,
      `1 s after the last disconnect: running ${m.get('tqserve_num_requests_running')}, waiting ${m.get('tqserve_num_requests_waiting')}, ` +
      `blocks used ${m.get('tqserve_kv_cache_blocks_used')}`);
    await sleep(20);
  }
  console.log(`# freed ${Date.now() - lastAbort} ms after the last disconnect`);
  // Aborted requests are counted as such, not as successes of another kind.
  assert.ok(m.sum('tqserve_request_success_total', { finish_reason: 'abort' }) >= COUNT * 0.9,
    `abort count ${m.sum('tqserve_request_success_total', { finish_reason: 'abort' })}`);

  // Still serving.
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(r.usage.completion_tokens, 8);
});
