// TLS (`--ssl-certfile`, `--ssl-keyfile`, `--ssl-ca-certs`): a certificate
// made at test time with the `openssl` CLI, the real `openai` client and
// @grpc/grpc-js over TLS, plain HTTP and silent clients on the TLS port,
// start-up errors, and a SIGTERM drain of HTTPS streams. Greedy text is
// checked against the published llama2.c reference ids decoded by the Python
// sentencepiece library.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, test } from 'node:test';

import { connect, freePort, generate, grpc, grpcAddress, healthStatus, Status } from './grpc_client.mjs';
import { BIN, MODEL, SANITIZED, WORK_DIR, collectStream, openSse, randomModel12M, referenceCompletion, sleep, startDaemon } from './harness.mjs';
import { httpsFetch } from './https_fetch.mjs';

const dir = fs.mkdtempSync(path.join(WORK_DIR(), 'tls-'));
const file = (name) => path.join(dir, name);
const openssl = (...args) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

// The server's self-signed certificate (its own CA), for 127.0.0.1.
openssl('req', '-x509', ...newKey, '-keyout', file('server.key'), '-out', file('server.crt'), '-days', '2',
  '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost');
// A client CA and a client certificate it signed (mutual TLS).
openssl('req', '-x509', ...newKey, '-keyout', file('ca.key'), '-out', file('ca.crt'), '-days', '2', '-subj', '/CN=tqserve test client CA');
openssl('req', '-new', ...newKey, '-keyout', file('client.key'), '-out', file('client.csr'), '-subj', '/CN=test client');
openssl('x509', '-req', '-in', file('client.csr'), '-CA', file('ca.crt'), '-CAkey', file('ca.key'), '-CAcreateserial',
  '-out', file('client.crt'), '-days', '2');
const serverCa = fs.readFileSync(file('server.crt'));
const serverFlags = ['--ssl-certfile', file('server.crt'), '--ssl-keyfile', file('server.key')];

/**
 * Opens a TCP connection to the daemon's port, writes `bytes` (if any) and
 * waits until the daemon closes it or `timeoutMs` passes: { ended, data }.
 */
function rawExchange(bytes, timeoutMs = 5_000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(new URL(daemon.url).port), '127.0.0.1');
    let data = '';
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ ended: false, data });
    }, timeoutMs);
    socket.on('connect', () => bytes && socket.write(bytes));
    socket.on('data', (d) => (data += d.toString('latin1')));
    socket.on('error', (e) => (e.code === 'ECONNRESET' ? undefined : reject(e)));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ ended: true, data });
    });
  });
}

const READ_TIMEOUT_S = 1.5; // --http-read-timeout: also the TLS handshake's deadline
const MAX_BODY = 100_000; // --max-body-bytes

/**
 * A TLS connection to the daemon that writes `chunks` (strings) `everyMs`
 * apart and resolves when the daemon closes it: { seconds, data }.
 */
function tlsExchange(chunks, everyMs = 0) {
  return new Promise((resolve, reject) => {
    const start = Date.now();
    const socket = tls.connect({ host: '127.0.0.1', port: Number(new URL(daemon.url).port), ca: serverCa, servername: 'localhost' });
    let data = '';
    let timer;
    socket.on('secureConnect', () => {
      const queue = [...chunks];
      const next = () => {
        if (queue.length === 0 || socket.destroyed) return;
        socket.write(queue.shift());
        timer = setTimeout(next, everyMs);
      };
      next();
    });
    socket.on('data', (d) => (data += d.toString('utf8')));
    socket.on('error', (e) => (['ECONNRESET', 'EPIPE'].includes(e.code) ? undefined : reject(e)));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ seconds: (Date.now() - start) / 1000, data });
    });
  });
}
let daemon;
let grpcClients;
before(async () => {
  daemon = await startDaemon({
    tls: { ca: serverCa },
    args: [...serverFlags, '--grpc-port', String(await freePort()),
      '--kv-cache-dtype', 'fp32', '--http-read-timeout', String(READ_TIMEOUT_S), '--max-body-bytes', String(MAX_BODY)],
  });
});
after(async () => {
  grpcClients?.close();
  if (!daemon) return;
  const status = await daemon.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `daemon exit:\n${daemon.stderr}`);
});

test('the listening line says https and the openai client gets a greedy completion and a stream', async () => {
  assert.match(daemon.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  const client = daemon.client();
  const N = 24;
  const want = referenceCompletion(N);
  const whole = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: N, temperature: 0 });
  assert.equal(whole.choices[0].text, want);
  const stream = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: N, temperature: 0, stream: true,
  });
  const { texts } = await collectStream(stream);
  assert.equal(texts[0], want);
  const chat = await client.chat.completions.create({
    model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, stream: true,
  });
  const got = await collectStream(chat);
  assert.ok(got.chunks.length > 0);
});

test('metrics and probes answer over HTTPS on the same port', async () => {
  for (const route of ['/health', '/livez', '/version']) {
    const res = await daemon.fetch(route);
    await res.arrayBuffer();
    assert.equal(res.status, 200, route);
  }
  // The HTTPS requests are counted like plaintext ones.
  const metrics = await daemon.metrics();
  assert.ok(metrics.sum('tqserve_api_requests_total', { protocol: 'http', route: '/health', code: '200' }) >= 1);
  assert.ok(metrics.sum('tqserve_api_requests_total', { protocol: 'http', route: '/v1/completions', code: '200' }) >= 2);
});

test('a client that does not trust the certificate is refused by its own TLS check', async () => {
  await assert.rejects(fetch(`${daemon.url}/health`));
  const { status } = await daemon.fetch('/health');
  assert.equal(status, 200);
});

test('plain HTTP to the TLS port gets a plaintext 400 and the daemon keeps serving', async () => {
  const plainUrl = daemon.url.replace('https://', 'http://');
  const res = await fetch(`${plainUrl}/health`);
  assert.equal(res.status, 400);
  const body = await res.json();
  assert.match(body.error.message, /HTTPS/);
  // Garbage that is neither HTTP nor TLS: the connection just closes.
  const closed = await rawExchange(Buffer.from('\x00\x01\x02 not tls at all\r\n\r\n'));
  assert.ok(closed.ended);
  const again = await daemon.client().completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
  assert.equal(again.choices[0].text, referenceCompletion(4));
});

test('a client that opens TCP and never handshakes is closed after the deadline', async () => {
  const start = Date.now();
  const result = await rawExchange(null, 10_000);
  const waited = (Date.now() - start) / 1000;
  assert.ok(result.ended, 'the daemon closed the silent connection');
  assert.ok(waited >= READ_TIMEOUT_S - 0.2 && waited < READ_TIMEOUT_S + 3, `closed after ${waited} s`);
  // A client that handshakes and then sends nothing gets the request deadline too.
  const port = Number(new URL(daemon.url).port);
  const startTls = Date.now();
  const closedAfter = await new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: serverCa, servername: 'localhost' });
    socket.on('error', reject);
    socket.on('close', () => resolve((Date.now() - startTls) / 1000));
    socket.resume();
  });
  assert.ok(closedAfter < READ_TIMEOUT_S + 3, `TLS idle closed after ${closedAfter} s`);
});

test('the request guards hold over TLS: a trickled head meets its deadline, an oversized body 413', async () => {
  // Slowloris: one header line every 250 ms, never the blank line.
  const lines = ['GET /health HTTP/1.1\r\nHost: x\r\n', ...Array.from({ length: 40 }, (_, k) => `X-Slow-${k}: 1\r\n`)];
  const slow = await tlsExchange(lines, 250);
  assert.ok(slow.seconds >= READ_TIMEOUT_S - 0.2 && slow.seconds < READ_TIMEOUT_S + 3, `closed after ${slow.seconds} s`);
  assert.equal(slow.data, '');
  // Content-Length over --max-body-bytes: refused from the head alone.
  const big = await tlsExchange([
    `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${MAX_BODY * 2}\r\n\r\n`,
  ]);
  assert.match(big.data, /^HTTP\/1\.1 413 /);
  // Keep-alive and pipelining through TLS: two requests in one write, answered in order.
  const two = await tlsExchange(['GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
  const statuses = [...two.data.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1]);
  assert.deepEqual(statuses, ['200', '200']);
  assert.match(two.data, /"version"/);
});

test('streams closed by the client over TLS are aborted and free their KV blocks', async () => {
  const COUNT = 16;
  const client = daemon.client();
  const req = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true, temperature: 0.8, seed: 1, stream: true };
  const before = (await daemon.metrics()).sum('tqserve_request_success_total', { finish_reason: 'abort' });
  const viaController = async () => {
    const controller = new AbortController();
    const stream = await client.completions.create(req, { signal: controller.signal });
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.finish_reason) return 'finished';
        controller.abort();
      }
    } catch (e) {
      if (!(e.name ?? '').includes('Abort') && !(e.constructor?.name ?? '').includes('Abort')) throw e;
    }
    return 'aborted';
  };
  const viaSocket = () =>
    new Promise((resolve, reject) => {
      const body = JSON.stringify(req);
      const r = https.request(`${daemon.url}/v1/completions`, {
        method: 'POST', ca: serverCa, agent: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      }, (res) => {
        if (res.statusCode !== 200) reject(new Error(`HTTP ${res.statusCode}`));
        res.on('error', () => {});
        res.once('data', () => {
          r.destroy();
          resolve('aborted');
        });
      });
      r.on('error', (e) => (r.destroyed ? resolve('aborted') : reject(e)));
      r.end(body);
    });
  const outcomes = await Promise.all(Array.from({ length: COUNT }, (_, i) => (i % 2 ? viaSocket() : viaController())));
  assert.deepEqual(outcomes, Array(COUNT).fill('aborted'));
  const lastAbort = Date.now();
  let m;
  for (;;) {
    m = await daemon.metrics();
    if (m.get('tqserve_num_requests_running') === 0 && m.get('tqserve_kv_cache_blocks_used') === 0 && m.get('tqserve_num_requests_waiting') === 0) break;
    assert.ok(Date.now() - lastAbort < 2000, `2 s after the last disconnect: running ${m.get('tqserve_num_requests_running')}, blocks ${m.get('tqserve_kv_cache_blocks_used')}`);
    await sleep(20);
  }
  const aborted = m.sum('tqserve_request_success_total', { finish_reason: 'abort' }) - before;
  assert.ok(aborted >= COUNT * 0.9, `aborted ${aborted} of ${COUNT}`);
  // A whole (non-streamed) response under way: nothing is written until it
  // is done, so only the connection's watch through TLS sees the client leave.
  const mark = daemon.stderr.length;
  const attempts = await Promise.all(Array.from({ length: 4 }, async () => {
    const controller = new AbortController();
    // Later under the sanitizers: TSan's TLS handshake alone can take 40 ms,
    // and a request aborted before it was sent leaves nothing to log.
    setTimeout(() => controller.abort(), SANITIZED() ? 300 : 40);
    const { stream: _s, ...whole } = req;
    return client.completions.create(whole, { signal: controller.signal }).then(() => 'finished', () => 'aborted');
  }));
  assert.ok(attempts.includes('aborted'), 'every request finished before its abort');
  const deadline = Date.now() + 3000;
  // 499: the request's client left before its response (streams too).
  const seen = () => {
    const log = daemon.stderr.slice(mark);
    return /"POST \/v1\/completions": client closed the connection; aborted/.test(log) && /"POST \/v1\/completions" 499/.test(log);
  };
  while (!seen()) {
    assert.ok(Date.now() < deadline, `no abort logged:\n${daemon.stderr.slice(-2000)}`);
    await sleep(20);
  }
});

test('gRPC over TLS: grpc-js with createSsl(ca) gets health and a greedy Generate', async () => {
  grpcClients = connect(grpcAddress(daemon.stderr), grpc.credentials.createSsl(serverCa));
  assert.match(daemon.stderr, /gRPC listening on \S+:\d+ \(TLS\)/);
  assert.equal(await healthStatus(grpcClients.health, ''), 'SERVING');
  const got = await generate(grpcClients.generation, { text: 'Once upon a time', sampling: { temperature: 0, max_tokens: 12 } });
  assert.equal(got.status, Status.OK, got.details);
  assert.equal(got.text, referenceCompletion(12));
  // A plaintext gRPC channel to the TLS port fails (no crash, daemon serves on).
  const plain = connect(grpcAddress(daemon.stderr));
  await assert.rejects(healthStatus(plain.health, ''), (e) => e.code === Status.UNAVAILABLE);
  plain.close();
  assert.equal(await healthStatus(grpcClients.health, ''), 'SERVING');
});

test('--ssl-ca-certs: HTTP and gRPC need a client certificate the CA signed', async () => {
  const client = { ca: serverCa, cert: fs.readFileSync(file('client.crt')), key: fs.readFileSync(file('client.key')) };
  const mtls = await startDaemon({
    tls: client,
    args: [...serverFlags, '--ssl-ca-certs', file('ca.crt'), '--grpc-port', String(await freePort())],
  });
  try {
    const got = await mtls.client().completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 6, temperature: 0 });
    assert.equal(got.choices[0].text.length > 0, true);
    // Without a client certificate the handshake is refused.
    await assert.rejects(httpsFetch({ ca: serverCa })(`${mtls.url}/health`));
    const withCert = connect(grpcAddress(mtls.stderr), grpc.credentials.createSsl(serverCa, client.key, client.cert));
    const without = connect(grpcAddress(mtls.stderr), grpc.credentials.createSsl(serverCa));
    try {
      assert.equal(await healthStatus(withCert.health, ''), 'SERVING');
      await assert.rejects(healthStatus(without.health, ''), (e) => e.code === Status.UNAVAILABLE);
    } finally {
      withCert.close();
      without.close();
    }
    const res = await mtls.fetch('/health');
    assert.equal(res.status, 200);
  } finally {
    const status = await mtls.stop();
    assert.deepEqual(status, { code: 0, signal: null }, `daemon exit:\n${mtls.stderr}`);
  }
});

test('start-up errors: a missing key file, one flag alone, a key of another certificate', () => {
  const serve = (...args) =>
    spawnSync(BIN(), ['serve', '--model', MODEL(), '--port', '0', '--host', '127.0.0.1', '--grpc-port', '0', ...args], {
      encoding: 'utf8',
      timeout: 30_000,
    });
  const missing = serve('--ssl-certfile', file('server.crt'), '--ssl-keyfile', file('no-such.key'));
  assert.notEqual(missing.status, 0);
  assert.match(missing.stderr, /--ssl-keyfile \S*no-such\.key: cannot read the file/);
  assert.doesNotMatch(missing.stderr, /listening/);

  const alone = serve('--ssl-certfile', file('server.crt'));
  assert.equal(alone.status, 2);
  assert.match(alone.stderr, /--ssl-certfile.*--ssl-keyfile/);

  const mismatched = serve('--ssl-certfile', file('server.crt'), '--ssl-keyfile', file('client.key'));
  assert.notEqual(mismatched.status, 0);
  assert.match(mismatched.stderr, /does not match the certificate/);

  const notPem = serve('--ssl-certfile', file('client.csr'), '--ssl-keyfile', file('server.key'));
  assert.notEqual(notPem.status, 0);
  assert.match(notPem.stderr, /--ssl-certfile \S*client\.csr: no PEM certificate/);
});

// SIGTERM drain over TLS (http_drain.test.mjs does it over plain HTTP): the
// HTTPS streams in flight at the signal all finish (every token, [DONE]), and
// the daemon exits 0 within --shutdown-timeout + 2 s. A random 12.6M model, so
// that the streams are still running when the signal comes.
test('SIGTERM over TLS: the HTTPS streams in flight finish and the daemon exits 0 in time', async () => {
  // Under the sanitizers (TSan: 5-15x slower) fewer, shorter streams, so that
  // the drain stays within the same bound.
  const STREAMS = SANITIZED() ? 4 : 12;
  const TOKENS = SANITIZED() ? 24 : 96;
  const SHUTDOWN_TIMEOUT_S = 15;
  const modelDir = randomModel12M();
  const name = path.basename(modelDir);
  const drained = await startDaemon({
    tls: { ca: serverCa },
    model: modelDir,
    args: [...serverFlags, '--kv-cache-dtype', 'fp32', '--max-model-len', '256', '--shutdown-timeout', String(SHUTDOWN_TIMEOUT_S),
      '--disable-log-requests'],
  });
  try {
    assert.match(drained.url, /^https:/);
    const streams = Array.from({ length: STREAMS }, (_, i) =>
      openSse(`${drained.baseURL}/completions`, {
        model: name, prompt: `Story number ${i}:`, max_tokens: TOKENS, ignore_eos: true, temperature: 0, stream: true,
        stream_options: { include_usage: true },
      }, drained.fetchImpl));
    await Promise.all(streams.map((s) => s.firstData));
    drained.proc.kill('SIGTERM');
    const signalledAt = Date.now();
    const results = await Promise.all(streams.map((s) => s.result));
    const status = await drained.exited;
    const exitMs = Date.now() - signalledAt;
    const running = results.filter((r) => r.endedAt > signalledAt).length;
    console.log(`# ${running} of ${STREAMS} HTTPS streams still running at SIGTERM; exit after ${exitMs} ms`);
    assert.ok(running > 0, 'every stream had ended before the signal: nothing was drained');
    for (const [i, r] of results.entries()) {
      assert.equal(r.status, 200);
      assert.ok(r.done, `stream ${i} did not end with [DONE]:\n${r.raw.slice(-300)}`);
      const finishes = r.json.flatMap((ch) => (ch.choices ?? []).map((c) => c.finish_reason)).filter(Boolean);
      assert.deepEqual(finishes, ['length'], `stream ${i}`);
      assert.equal(r.json.at(-1).usage?.completion_tokens, TOKENS, `stream ${i}: ${JSON.stringify(r.json.at(-1))}`);
    }
    assert.deepEqual(status, { code: 0, signal: null }, drained.stderr.slice(-2000));
    assert.ok(exitMs < (SHUTDOWN_TIMEOUT_S + 2) * 1000, `exit took ${exitMs} ms`);
  } finally {
    await drained.stop({ signal: 'SIGKILL' });
  }
});
