// SIGTERM drains gRPC streams as it drains HTTP ones: grpc.health.v1 turns
// NOT_SERVING and a new Generate gets UNAVAILABLE while the streams in flight
// run to their end, then the daemon exits 0.
//
// The bundled model generates too fast to keep streams in flight for long, so
// this test serves a random-weight model (as sigterm.test.mjs does) whose
// decode steps take milliseconds.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { connect, freePort, generate, grpcAddress, healthStatus, Status } from './grpc_client.mjs';
import { BIN, MODEL, WORK_DIR, sleep, startDaemon } from './harness.mjs';

const STREAMS = 4;
const TOKENS = 200;
let daemon;
let clients;

before(async () => {
  const modelDir = path.join(WORK_DIR(), 'random_12m');
  if (!fs.existsSync(path.join(modelDir, 'config.json'))) {
    execFileSync(BIN(), ['make-random-model', '--out', modelDir, '--hidden-size', '512', '--intermediate-size', '1376',
      '--num-layers', '4', '--num-heads', '8', '--vocab-size', '512', '--dtype', 'fp32',
      '--tokenizer', path.join(MODEL(), 'tokenizer.model')]);
  }
  daemon = await startDaemon({
    model: modelDir,
    args: ['--grpc-port', String(await freePort()), '--served-model-name', 'random', '--kv-cache-dtype', 'fp32',
      '--max-model-len', '256', '--shutdown-timeout', '60'],
  });
  clients = connect(grpcAddress(daemon.stderr));
});
after(async () => {
  clients?.close();
  await daemon?.stop({ signal: 'SIGKILL' });
});

test(`SIGTERM during ${STREAMS} gRPC streams: NOT_SERVING, new calls UNAVAILABLE, the streams complete, exit 0`, async () => {
  assert.equal(await healthStatus(clients.health), 'SERVING');
  const request = { text: 'Story number 1:', sampling: { temperature: 0, max_tokens: TOKENS, ignore_eos: true } };
  const firsts = [];
  const streams = Array.from({ length: STREAMS }, () => {
    let first;
    firsts.push(new Promise((r) => (first = r)));
    const call = clients.generation.Generate(request);
    return new Promise((resolve) => {
      const out = { tokens: 0, endedAt: 0 };
      call.on('data', (m) => {
        out.tokens += m.token_ids.length;
        out.last = m;
        first();
      });
      call.on('error', () => {});
      call.on('status', (s) => {
        first();
        Object.assign(out, { code: s.code, details: s.details, endedAt: Date.now() });
        resolve(out);
      });
    });
  });
  await Promise.all(firsts);

  daemon.proc.kill('SIGTERM');
  const signalledAt = Date.now();
  let status;
  for (;;) {
    status = await healthStatus(clients.health);
    if (status === 'NOT_SERVING' || Date.now() - signalledAt > 2000) break;
    await sleep(5);
  }
  assert.equal(status, 'NOT_SERVING', 'grpc.health.v1 did not turn NOT_SERVING within 2 s of SIGTERM');
  assert.equal(await healthStatus(clients.health, 'tqserve.v1.GenerationService'), 'NOT_SERVING');
  const refused = await generate(clients.generation, { text: 'late', sampling: { max_tokens: 4 } });
  assert.equal(refused.status, Status.UNAVAILABLE, refused.details);
  const checkedAt = Date.now();

  for (const [i, r] of (await Promise.all(streams)).entries()) {
    assert.equal(r.code, Status.OK, `stream ${i}: ${r.details}`);
    assert.ok(r.endedAt > checkedAt, `stream ${i} ended before the drain checks: the model is too fast for this test`);
    assert.equal(r.tokens, TOKENS, `stream ${i}`);
    assert.equal(r.last.finish_reason, 'FINISH_REASON_LENGTH');
    assert.equal(r.last.usage.completion_tokens, TOKENS);
  }
  assert.deepEqual(await daemon.exited, { code: 0, signal: null }, daemon.stderr);
  console.log(`# drained ${STREAMS} gRPC streams in ${Date.now() - signalledAt} ms after SIGTERM`);
});
