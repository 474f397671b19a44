// Issue 41, the server's smaller defects, each on a real daemon: a 1 MB
// `user` (and a long path) makes a bounded log line; `seed` is range-checked
// on both sides of int64; a stream the client killed counts as 499 in
// /metrics; gRPC Generate with both text and token_ids is INVALID_ARGUMENT;
// SIGUSR1/SIGUSR2 are ignored and SIGHUP drains like SIGTERM; a gRPC port in
// use is one error line with the reason.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { BIN, MODEL, openSse, randomModel12M, sleep, startDaemon } from './harness.mjs';
import { Status, connect, freePort, generate, grpcAddress } from './grpc_client.mjs';

let daemon; // the bundled model, with gRPC
let grpcClients;
const stopped = [];

before(async () => {
  daemon = await startDaemon({ args: ['--grpc-port', String(await freePort())] });
  grpcClients = connect(grpcAddress(daemon.stderr));
});
after(async () => {
  grpcClients?.close();
  if (daemon) assert.deepEqual(await daemon.stop(), { code: 0, signal: null }, daemon.stderr.slice(-2000));
  for (const d of stopped) await d.stop({ signal: 'SIGKILL' });
});

/** The log lines written after `mark` (a stderr length) that match `re`. */
function linesSince(d, mark, re) {
  return d.stderr.slice(mark).split('\n').filter((l) => re.test(l));
}

test('a 1 MB user field and a 10 kB path are logged truncated, with their lengths', async () => {
  const mark = daemon.stderr.length;
  const user = 'u'.repeat(1_000_000);
  const res = await daemon.post('/v1/completions', { model: 'stories260K', prompt: 'Once', max_tokens: 1, user });
  const text = await res.text();
  assert.equal(res.status, 200, text.slice(0, 500));
  const longPath = `/${'p'.repeat(10_000)}`;
  const missing = await daemon.fetch(longPath);
  assert.equal(missing.status, 404);
  await missing.arrayBuffer();
  let userLines;
  let pathLines;
  for (const until = Date.now() + 5_000; ; await sleep(20)) {
    userLines = linesSince(daemon, mark, /, user "/);
    pathLines = linesSince(daemon, mark, /"GET \/ppp/);
    if ((userLines.length && pathLines.length) || Date.now() > until) break;
  }
  assert.equal(userLines.length, 1, daemon.stderr.slice(mark, mark + 3000));
  // 256 bytes of the value, then its length: `"uuu... ... (1000000 bytes)"`.
  assert.ok(userLines[0].includes(`, user "${'u'.repeat(256)} ... (1000000 bytes)"`), userLines[0].slice(0, 600));
  assert.ok(userLines[0].length < 600, `a ${userLines[0].length}-byte log line`);
  assert.equal(pathLines.length, 1);
  assert.ok(pathLines[0].includes(`"GET /${'p'.repeat(255)} ... (10001 bytes)" 404`), pathLines[0].slice(0, 600));
  assert.ok(pathLines[0].length < 600, `a ${pathLines[0].length}-byte log line`);
});

test('seed outside int64 is 400 on both sides; both ends of int64 are accepted', async () => {
  const body = (seed) => `{"model": "stories260K", "prompt": "Once", "max_tokens": 2, "seed": ${seed}}`;
  for (const seed of ['9223372036854775808', '-9223372036854775809', '-9223372036854775808.0', '-1e19', '1e19']) {
    const res = await daemon.post('/v1/completions', body(seed));
    const json = await res.json();
    assert.equal(res.status, 400, `seed ${seed}: ${JSON.stringify(json)}`);
    assert.equal(json.error.param, 'seed', seed);
    assert.match(json.error.message, /integer in \[-9223372036854775808, 9223372036854775807\]/, seed);
  }
  for (const seed of ['9223372036854775807', '-9223372036854775808']) {
    const res = await daemon.post('/v1/completions', body(seed));
    const text = await res.text();
    assert.equal(res.status, 200, `seed ${seed}: ${text}`);
  }
});

test('gRPC Generate with both text and token_ids is INVALID_ARGUMENT (docs/grpc.md: exactly one)', async () => {
  const both = await generate(grpcClients.generation, { text: 'Once', token_ids: { ids: [1, 2] }, sampling: { max_tokens: 2 } });
  assert.equal(both.status, Status.INVALID_ARGUMENT, `${both.status} ${both.details}`);
  assert.match(both.details, /text .*token_ids|token_ids .*text/);
  const one = await generate(grpcClients.generation, { token_ids: { ids: [1, 2] }, sampling: { max_tokens: 2 } });
  assert.equal(one.status, Status.OK, one.details);
});

test('a stream its client killed is counted as 499, not 200', async () => {
  const modelDir = randomModel12M();
  const d = await startDaemon({ model: modelDir, args: ['--kv-cache-dtype', 'fp32', '--max-model-len', '512'] });
  stopped.push(d);
  const count = (m, code) => m.sum('tqserve_api_requests_total', { protocol: 'http', route: '/v1/completions', code });
  const before = await d.metrics();
  const controller = new AbortController();
  const res = await fetch(`${d.baseURL}/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: path.basename(modelDir), prompt: 'A story:', max_tokens: 400, ignore_eos: true, stream: true }),
    signal: controller.signal,
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  await reader.read(); // the first event: the stream is under way
  controller.abort();
  let m;
  for (const until = Date.now() + 5_000; ; await sleep(20)) {
    m = await d.metrics();
    if (count(m, '499') > count(before, '499') || Date.now() > until) break;
  }
  assert.equal(count(m, '499') - count(before, '499'), 1, 'the killed stream is not counted as 499');
  assert.equal(count(m, '200') - count(before, '200'), 0, 'the killed stream is counted as 200');
});

test('SIGUSR1 and SIGUSR2 are ignored; SIGHUP drains like SIGTERM (streams finish, exit 0)', async () => {
  const modelDir = randomModel12M();
  const d = await startDaemon({ model: modelDir, args: ['--kv-cache-dtype', 'fp32', '--max-model-len', '512'] });
  stopped.push(d);
  for (const signal of ['SIGUSR1', 'SIGUSR2']) {
    d.proc.kill(signal);
    for (const until = Date.now() + 5_000; !d.stderr.includes(`received ${signal}: ignored`); await sleep(20)) {
      assert.ok(Date.now() < until, `no log line for ${signal}:\n${d.stderr.slice(-1000)}`);
    }
    assert.equal(d.exitStatus, undefined, `${signal} ended the daemon`);
    const health = await d.fetch('/health');
    assert.equal(health.status, 200, `/health after ${signal}`);
    await health.arrayBuffer();
  }
  const stream = openSse(`${d.baseURL}/completions`, {
    model: path.basename(modelDir), prompt: 'A story:', max_tokens: 200, ignore_eos: true, temperature: 0, stream: true,
  });
  await stream.firstData;
  d.proc.kill('SIGHUP');
  const r = await stream.result;
  assert.equal(r.status, 200);
  assert.ok(r.done, `no [DONE] after SIGHUP:\n${r.raw.slice(-400)}`);
  const finishes = r.json.flatMap((c) => c.choices.map((x) => x.finish_reason)).filter(Boolean);
  assert.deepEqual(finishes, ['length'], 'the stream was cut instead of drained');
  assert.deepEqual(await d.exited, { code: 0, signal: null }, d.stderr.slice(-2000));
  assert.match(d.stderr, /received SIGHUP: draining/);
});

test('a gRPC port in use: one error line with the reason, as for the HTTP port', async () => {
  const holder = net.createServer();
  await new Promise((resolve) => holder.listen(0, '127.0.0.1', resolve));
  const port = holder.address().port;
  try {
    const r = spawnSync(BIN(), ['serve', '--model', MODEL(), '--host', '127.0.0.1', '--port', '0', '--grpc-port', String(port)], {
      encoding: 'utf8', timeout: 60_000,
    });
    assert.equal(r.status, 1, r.stderr);
    const lines = r.stderr.split('\n').filter((l) => l !== '' && !/^tqserve: listening on /.test(l));
    assert.deepEqual(lines, [`tqserve: error: --grpc-port ${port}: cannot listen on 127.0.0.1:${port} (Address already in use)`]);
  } finally {
    holder.close();
  }
  // The HTTP port's message, for comparison (its wording predates issue 41).
  const http = net.createServer();
  await new Promise((resolve) => http.listen(0, '127.0.0.1', resolve));
  try {
    const r = spawnSync(BIN(), ['serve', '--model', MODEL(), '--host', '127.0.0.1', '--port', String(http.address().port), '--grpc-port', '0'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /cannot listen there \(Address already in use\)/);
  } finally {
    http.close();
  }
});
