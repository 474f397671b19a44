// SIGTERM with hostile clients (issue 19): a slowloris connection trickling
// its headers, a stalled reader (a long stream whose client never reads: it
// holds the drain until it ends or --shutdown-timeout aborts it) and STREAMS
// open streams. The
// streams all finish (every token, [DONE]); the daemon exits 0 within
// --shutdown-timeout + 2 s (sanitizer builds: EXIT_SLACK_S) whatever the two
// others do.
// Served on a random-weight model (12.6M parameters, as sigterm.test.mjs) so
// that the streams are still running when the signal comes. TQ_HTTP_FULL=1:
// the 200 streams; CI: 100.
import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { SANITIZED, openSse, randomModel12M, startDaemon } from './harness.mjs';

// Under ASan + UBSan the decode steps are several times slower: 100 streams of
// 32 tokens then outlast --shutdown-timeout, and the test would measure the
// sanitizer. 24 streams keep the same hostile clients and the same bound.
const STREAMS = process.env.TQ_HTTP_FULL === '1' ? 200 : SANITIZED() ? 24 : 100;
const TOKENS = 32;
// The stalled reader holds the drain until --shutdown-timeout aborts it; the
// daemon then has EXIT_SLACK_S to exit. Under ThreadSanitizer the 24 streams
// took 9 s of the 15 and the exit 1.7 s of the 2 on an idle machine
// (2026-12-05): the sanitizer builds get more of both; Release keeps 15 + 2.
const SHUTDOWN_TIMEOUT_S = SANITIZED() ? 45 : 15;
const EXIT_SLACK_S = SANITIZED() ? 10 : 2;
let daemon;
let modelDir;

before(async () => {
  modelDir = randomModel12M();
  daemon = await startDaemon({
    model: modelDir,
    args: ['--kv-cache-dtype', 'fp32', '--max-model-len', '256', '--shutdown-timeout', String(SHUTDOWN_TIMEOUT_S),
      '--disable-log-requests'],
  });
});
after(async () => {
  await daemon?.stop({ signal: 'SIGKILL' });
});

test(`SIGTERM with a slowloris client, a stalled reader and ${STREAMS} streams: they finish, exit 0 in time`, async () => {
  const name = path.basename(modelDir);
  const connect = () => new Promise((resolve) => {
    const s = net.connect(daemon.port, '127.0.0.1', () => resolve(s));
    s.on('error', () => {});
  });
  // Slowloris: one header byte every 500 ms, forever.
  const slow = await connect();
  const slowTimer = setInterval(() => slow.destroyed || slow.write('a'), 500);
  slow.write('GET /health HTTP/1.1\r\nX-Slow: ');
  // Stalled reader: a stream it never reads (paused socket).
  const stalled = await connect();
  const body = JSON.stringify({ model: name, prompt: 'A stalled reader', max_tokens: 200, ignore_eos: true, stream: true, logprobs: 5 });
  stalled.pause();
  stalled.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);

  // The hostile sockets and the timer are closed on every path: left open they
  // keep node's event loop alive and a failed assertion becomes a CTest timeout.
  try {
    const streams = Array.from({ length: STREAMS }, (_, i) =>
      openSse(`${daemon.baseURL}/completions`, {
        model: name, prompt: `Story number ${i}:`, max_tokens: TOKENS, ignore_eos: true, temperature: 0, stream: true,
      }));
    await Promise.all(streams.map((s) => s.firstData));
    daemon.proc.kill('SIGTERM');
    const signalledAt = Date.now();
    const results = await Promise.all(streams.map((s) => s.result));
    const status = await daemon.exited;
    const exitMs = Date.now() - signalledAt;
    const drainedMs = Math.max(...results.map((r) => r.endedAt)) - signalledAt;
    console.log(`# ${STREAMS} streams finished ${drainedMs} ms after SIGTERM; exit after ${exitMs} ms ` +
      `(bound ${(SHUTDOWN_TIMEOUT_S + EXIT_SLACK_S) * 1000} ms)`);
    for (const [i, r] of results.entries()) {
      assert.equal(r.status, 200);
      assert.ok(r.done, `stream ${i} did not end with [DONE]:\n${r.raw.slice(-300)}`);
      const finishes = r.json.flatMap((ch) => ch.choices.map((c) => c.finish_reason)).filter(Boolean);
      assert.deepEqual(finishes, ['length'], `stream ${i}`);
    }
    assert.deepEqual(status, { code: 0, signal: null }, daemon.stderr.slice(-2000));
    assert.ok(exitMs < (SHUTDOWN_TIMEOUT_S + EXIT_SLACK_S) * 1000, `exit took ${exitMs} ms`);
  } finally {
    clearInterval(slowTimer);
    slow.destroy();
    stalled.destroy();
  }
});
