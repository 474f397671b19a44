// Liveness that tells the truth (issue 41): a wedged engine step
// (tqserve_fault_inject, TQSERVE_FAULT_INJECT=engine_stall:N blocks the
// engine thread in its N-th step for good) turns GET /livez 503 "stalled" and
// the gRPC health service "liveness" NOT_SERVING once --stall-timeout has
// passed, not before, while /health (readiness) and gRPC health "" stay 200 /
// SERVING: an orchestrator restarts the pod instead of leaving it wedged. The
// shipped tqserve binary ignores the hook (the last test).
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, test } from 'node:test';

import { FAULT_BIN, SANITIZED, openSse, randomModel12M, sleep, startDaemon } from './harness.mjs';
import { connect, freePort, grpcAddress, healthStatus } from './grpc_client.mjs';

const STALL_STEP = 30;
const STALL_TIMEOUT_S = 2;
// The probe is answered on an I/O thread; the gRPC monitor re-checks every
// 100 ms. Slack for a loaded CI machine (and the sanitizers' slower threads).
const SLACK_MS = SANITIZED() ? 3_000 : 1_500;
const daemons = [];

after(async () => {
  for (const d of daemons) await d.stop({ signal: 'SIGKILL' });
});

async function livez(daemon) {
  const res = await daemon.fetch('/livez');
  return { status: res.status, body: await res.json() };
}

test(`a wedged engine step: /livez 503 "stalled" after --stall-timeout ${STALL_TIMEOUT_S} s, /health stays 200`, async () => {
  const modelDir = randomModel12M();
  const daemon = await startDaemon({
    bin: FAULT_BIN(),
    env: { TQSERVE_FAULT_INJECT: `engine_stall:${STALL_STEP}` },
    model: modelDir,
    args: ['--kv-cache-dtype', 'fp32', '--max-model-len', '512', '--stall-timeout', String(STALL_TIMEOUT_S),
      '--grpc-port', String(await freePort())],
  });
  daemons.push(daemon);
  assert.match(daemon.stderr, new RegExp(`fault injection: engine step ${STALL_STEP} will stall`));
  const clients = connect(grpcAddress(daemon.stderr));
  try {
    assert.deepEqual(await livez(daemon), { status: 200, body: { status: 'alive' } });
    assert.equal(await healthStatus(clients.health, 'liveness'), 'SERVING');
    assert.equal(await healthStatus(clients.health, ''), 'SERVING');

    // A stream longer than STALL_STEP steps: the engine wedges in its middle.
    const stream = openSse(`${daemon.baseURL}/completions`, {
      model: path.basename(modelDir), prompt: 'A long story:', max_tokens: 200, ignore_eos: true, temperature: 0, stream: true,
    });
    stream.result.catch(() => {});  // ends when the daemon is killed
    await stream.firstData;
    const stallLine = `engine step ${STALL_STEP} stalls`;
    for (const until = Date.now() + 30_000; !daemon.stderr.includes(stallLine); await sleep(5)) {
      assert.ok(Date.now() < until, `the engine never reached step ${STALL_STEP}:\n${daemon.stderr.slice(-2000)}`);
    }
    const stalledAt = Date.now();

    // Within the bound: still alive (a slow step is no reason to restart).
    const early = await livez(daemon);
    if (Date.now() - stalledAt < STALL_TIMEOUT_S * 1000 - 500) {
      assert.deepEqual(early, { status: 200, body: { status: 'alive' } }, 'failed before --stall-timeout');
    }

    let late;
    for (;;) {
      late = await livez(daemon);
      if (late.status === 503 || Date.now() - stalledAt > STALL_TIMEOUT_S * 1000 + SLACK_MS) break;
      await sleep(20);
    }
    const elapsedMs = Date.now() - stalledAt;
    assert.equal(late.status, 503, `/livez still ${late.status} ${elapsedMs} ms into the stall`);
    assert.equal(late.body.status, 'stalled');
    assert.match(late.body.reason, /the engine has been in one step for \d+\.\d s \(--stall-timeout 2\.0\)/);
    assert.ok(elapsedMs >= STALL_TIMEOUT_S * 1000 - 100, `503 after ${elapsedMs} ms, before the bound`);

    // Readiness keeps its meaning: the daemon is loaded, its loop has not
    // failed and it is not draining.
    const health = await daemon.fetch('/health');
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { status: 'ok' });
    let grpcLive;
    for (const until = Date.now() + 1_000; ; await sleep(20)) {
      grpcLive = await healthStatus(clients.health, 'liveness');
      if (grpcLive === 'NOT_SERVING' || Date.now() > until) break;
    }
    assert.equal(grpcLive, 'NOT_SERVING');
    assert.equal(await healthStatus(clients.health, ''), 'SERVING');
    console.log(`# /livez 503 ${elapsedMs} ms after the engine stalled (--stall-timeout ${STALL_TIMEOUT_S})`);
  } finally {
    clients.close();
  }
});

test('the shipped tqserve ignores TQSERVE_FAULT_INJECT=engine_stall:N', async () => {
  const daemon = await startDaemon({ env: { TQSERVE_FAULT_INJECT: 'engine_stall:1' }, args: ['--stall-timeout', '1'] });
  daemons.push(daemon);
  const res = await daemon.client().completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(res.usage.completion_tokens, 8);
  assert.deepEqual(await livez(daemon), { status: 200, body: { status: 'alive' } });
  assert.doesNotMatch(daemon.stderr, /fault injection/);
  assert.deepEqual(await daemon.stop(), { code: 0, signal: null });
});
