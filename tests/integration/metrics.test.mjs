// GET /metrics after known traffic: `promtool check metrics` (Prometheus's own
// linter, Debian package prometheus) passes silently, every metric of issue 4
// is there, and the counters add up to the traffic sent (token counts from
// the Python sentencepiece library and from max_tokens with ignore_eos).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';

import { sentencepiece, serveForTests } from './harness.mjs';

const MODEL = 'stories260K';
const PROMPTS = ['Once upon a time', 'The little dog went to the park', 'Lily and Tom'];
const GEN = [5, 17, 30];

// Issue 4's list, with tqserve_kv_cache_num_blocks for its blocks_total (a gauge
// may not end in _total: promtool; docs/metrics.md).
const REQUIRED = [
  'tqserve_num_requests_running', 'tqserve_num_requests_waiting', 'tqserve_kv_cache_usage_perc',
  'tqserve_kv_cache_num_blocks', 'tqserve_kv_cache_blocks_used', 'tqserve_kv_cache_capacity_tokens',
  'tqserve_num_preemptions_total', 'tqserve_prompt_tokens_total', 'tqserve_generation_tokens_total',
  'tqserve_request_success_total', 'tqserve_time_to_first_token_seconds_count', 'tqserve_inter_token_latency_seconds_count',
  'tqserve_e2e_request_latency_seconds_count', 'tqserve_request_queue_time_seconds_count', 'tqserve_memory_weights_bytes',
  'tqserve_memory_kv_cache_bytes', 'tqserve_memory_device_bytes', 'tqserve_info',
];

const srv = serveForTests();

test('metrics add up to the traffic, and promtool check metrics passes silently', async () => {
  const client = srv.client;
  for (const [i, prompt] of PROMPTS.entries()) {
    const r = await client.completions.create({ model: MODEL, prompt, max_tokens: GEN[i], temperature: 0, ignore_eos: true, stream: i === 1 });
    if (i === 1) for await (const chunk of r) assert.ok(chunk.choices);  // read the stream to its end
  }
  await assert.rejects(client.completions.create({ model: MODEL, prompt: 'x', top_p: 5 }));  // an error too

  const res = await srv.daemon.fetch('/metrics');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/plain/);
  const text = await res.text();
  const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(check.error, undefined, `promtool: ${check.error}`);
  assert.equal(check.stdout + check.stderr, '', 'promtool check metrics printed problems');
  assert.equal(check.status, 0);

  const m = await srv.daemon.metrics();
  for (const name of REQUIRED) assert.ok(m.samples.some((s) => s.name === name), `missing ${name}`);
  for (const s of m.samples) assert.ok(s.value >= 0 && Number.isFinite(s.value), `${s.name}${JSON.stringify(s.labels)} = ${s.value}`);

  const sp = sentencepiece({ encode: PROMPTS });
  const promptTokens = sp.encode.reduce((a, ids) => a + 1 + ids.length, 0);  // BOS each
  const generated = GEN.reduce((a, n) => a + n, 0);
  assert.equal(m.get('tqserve_prompt_tokens_total'), promptTokens);
  assert.equal(m.get('tqserve_generation_tokens_total'), generated);
  assert.equal(m.get('tqserve_request_success_total', { finish_reason: 'length' }), PROMPTS.length);
  assert.equal(m.sum('tqserve_e2e_request_latency_seconds_count'), PROMPTS.length);
  assert.equal(m.sum('tqserve_time_to_first_token_seconds_count'), PROMPTS.length);
  assert.equal(m.sum('tqserve_inter_token_latency_seconds_count'), generated - PROMPTS.length);
  assert.equal(m.get('tqserve_num_requests_running'), 0);
  assert.equal(m.get('tqserve_kv_cache_blocks_used'), 0);
  assert.equal(m.get('tqserve_kv_cache_usage_perc'), 0);
  assert.ok(m.get('tqserve_memory_weights_bytes', { precision: 'fp32' }) >= 260_000 * 4);
  assert.ok(m.get('tqserve_memory_device_bytes', { kind: 'used' }) > 0);
  // The start-up line of each tensor-parallel rank names its device.
  assert.match(srv.daemon.stderr, /rank 0\/\d+ on cpu: weights \d+ bytes, KV pool \d+ bytes, \d+ tokens/);
  const kvUsed = m.get('tqserve_memory_kv_cache_bytes', { state: 'used' });
  const kvFree = m.get('tqserve_memory_kv_cache_bytes', { state: 'free' });
  assert.equal(kvUsed, 0);
  assert.ok(kvFree > 0);
  // Histogram buckets are cumulative and end in +Inf = _count.
  const buckets = m.samples.filter((s) => s.name === 'tqserve_e2e_request_latency_seconds_bucket');
  assert.ok(buckets.length > 2);
  for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i].value >= buckets[i - 1].value);
  assert.equal(buckets.at(-1).labels.le, '+Inf');
  assert.equal(buckets.at(-1).value, PROMPTS.length);
});
