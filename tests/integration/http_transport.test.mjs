// The event-driven HTTP front end (issue 19) with raw sockets and node's
// http client, loopback only:
// - pipelining: three requests written at once get three responses in order;
//   `Expect: 100-continue` and a gzip body are read;
// - slowloris: connections trickling their headers are closed by the request
//   deadline (--http-read-timeout), while /health and a completion answer;
// - a reader that stops reading is cut by --http-write-timeout, its request
//   aborted and its KV blocks freed;
// - overload: more concurrent streams than --max-num-seqs + --max-pending-requests:
//   every one completes or gets 503 + Retry-After in OpenAI's error shape,
//   none hangs, /health answers throughout, and nothing is left running.
// Latencies are printed (the bounds: /health p99 < 50 ms under load,
// < 100 ms under slowloris), asserted only generously: timing is bench/'s job.
// TQ_HTTP_FULL=1 runs the full counts (2,000 streams with
// --max-num-seqs 256, 1,000 trickling connections); CI runs scaled ones.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import zlib from 'node:zlib';
import { after, before, test } from 'node:test';

import { PYTHON, sleep, startDaemon } from './harness.mjs';

const FULL = process.env.TQ_HTTP_FULL === '1';
const STREAMS = FULL ? 2000 : 200;
const MAX_NUM_SEQS = FULL ? 256 : 16;
const MAX_PENDING = FULL ? 1024 : 48;
const TRICKLERS = FULL ? 1000 : 200;
const READ_TIMEOUT_S = 3;
const WRITE_TIMEOUT_S = 2;
const MODEL = 'stories260K';

let daemon;
before(async () => {
  daemon = await startDaemon({
    args: ['--max-num-seqs', String(MAX_NUM_SEQS), '--max-pending-requests', String(MAX_PENDING),
      '--http-read-timeout', String(READ_TIMEOUT_S), '--http-write-timeout', String(WRITE_TIMEOUT_S),
      '--disable-log-requests'],
  });
});
after(async () => {
  await daemon?.stop();
});

/** Connects a raw socket; resolves once connected. */
function connect() {
  return new Promise((resolve, reject) => {
    const s = net.connect(daemon.port, '127.0.0.1', () => resolve(s));
    s.once('error', reject);
  });
}

/**
 * Reads `count` HTTP/1.1 responses (Content-Length or chunked bodies) from
 * `socket`, in order, as { status, headers, body }.
 */
function readResponses(socket, count) {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const out = [];
    const parse = () => {
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString('latin1').split('\r\n');
        const status = Number(head[0].split(' ')[1]);
        const headers = {};
        for (const line of head.slice(1)) {
          const i = line.indexOf(':');
          headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
        }
        let rest = buf.subarray(end + 4);
        let body;
        if (status === 100) {
          buf = rest;
          continue;
        }
        if (headers['transfer-encoding'] === 'chunked') {
          const parts = [];
          for (;;) {
            const crlf = rest.indexOf('\r\n');
            if (crlf < 0) return;
            const size = parseInt(rest.subarray(0, crlf).toString(), 16);
            if (rest.length < crlf + 2 + size + 2) return;
            parts.push(rest.subarray(crlf + 2, crlf + 2 + size));
            rest = rest.subarray(crlf + 2 + size + 2);
            if (size === 0) break;
          }
          body = Buffer.concat(parts).toString();
        } else {
          const len = Number(headers['content-length'] ?? 0);
          if (rest.length < len) return;
          body = rest.subarray(0, len).toString();
          rest = rest.subarray(len);
        }
        buf = rest;
        out.push({ status, headers, body });
        if (out.length === count) {
          resolve(out);
          return;
        }
      }
    };
    socket.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      parse();
    });
    socket.once('close', () => reject(new Error(`closed after ${out.length} of ${count} responses`)));
    socket.once('error', reject);
  });
}

function post(path, body, extra = '') {
  return `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
}

/** GET `path` on a fresh connection; resolves to { status, ms }. */
async function timedGet(path) {
  const start = performance.now();
  const res = await fetch(`${daemon.url}${path}`);
  await res.arrayBuffer();
  return { status: res.status, ms: performance.now() - start };
}

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

test('three pipelined requests get three responses in order', async () => {
  const s = await connect();
  const replies = readResponses(s, 3);
  s.write('GET /version HTTP/1.1\r\nHost: x\r\n\r\n' +
    post('/tokenize', JSON.stringify({ model: MODEL, prompt: 'Once upon a time' })) +
    'GET /nope HTTP/1.1\r\nHost: x\r\n\r\n');
  const [a, b, c] = await replies;
  s.destroy();
  assert.equal(a.status, 200);
  assert.equal(typeof JSON.parse(a.body).version, 'string');
  assert.equal(b.status, 200);
  assert.ok(JSON.parse(b.body).tokens.length > 1);
  assert.equal(c.status, 404);
  assert.equal(JSON.parse(c.body).error.code, 'not_found');
});

test('gzip and Expect: 100-continue request bodies are read', async () => {
  const body = JSON.stringify({ model: MODEL, prompt: 'Once upon a time' });
  const s = await connect();
  const replies = readResponses(s, 2);
  s.write(post('/tokenize', body));
  const gz = zlib.gzipSync(body);
  s.write(`POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: ${gz.length}\r\n\r\n`);
  s.write(gz);
  const [plain, gzipped] = (await Promise.race([replies, sleep(10_000).then(() => null)])) ?? [];
  s.destroy();
  assert.ok(plain && gzipped, 'no replies');
  assert.equal(plain.status, 200, plain.body);
  assert.equal(gzipped.status, 200, gzipped.body);
  assert.deepEqual(JSON.parse(gzipped.body).tokens, JSON.parse(plain.body).tokens);

  // Expect: 100-continue: the interim response comes before the body is sent.
  const e = await connect();
  let seen = '';
  const interim = new Promise((resolve) => e.on('data', (d) => {
    seen += d.toString();
    if (seen.startsWith('HTTP/1.1 100')) resolve();
  }));
  e.write(`POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: ${body.length}\r\n\r\n`);
  await interim;
  e.write(body);
  for (let i = 0; i < 200 && !/\r\n\r\n[\s\S]*"tokens"/.test(seen.slice(seen.indexOf('\r\n\r\n') + 4)); ++i) await sleep(10);
  e.destroy();
  assert.match(seen, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
});

test(`slowloris: ${TRICKLERS} trickling connections are closed by the deadline; /health and a completion still answer`, async () => {
  const sockets = await Promise.all(Array.from({ length: TRICKLERS }, () => connect()));
  const opened = Date.now();
  const closedAt = new Array(sockets.length).fill(0);
  sockets.forEach((s, i) => {
    s.on('error', () => {});
    s.on('close', () => (closedAt[i] = Date.now()));
  });
  const line = 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ';
  let pos = 0;
  const trickle = setInterval(() => {
    for (const s of sockets) if (!s.destroyed) s.write(pos < line.length ? line[pos] : 'a');
    ++pos;
  }, 200);
  await sleep(500);
  const health = [];
  for (let i = 0; i < 20; ++i) health.push(await timedGet('/health'));
  const start = performance.now();
  const res = await fetch(`${daemon.baseURL}/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }),
  });
  const completion = await res.json();
  const completionMs = performance.now() - start;
  for (let i = 0; i < 100 && closedAt.some((t) => t === 0); ++i) await sleep(100);
  clearInterval(trickle);
  for (const s of sockets) s.destroy();
  const ms = health.map((h) => h.ms);
  console.log(`# slowloris ${TRICKLERS}: /health p50 ${percentile(ms, 50).toFixed(1)} ms, max ${Math.max(...ms).toFixed(1)} ms; ` +
    `completion (8 tokens) ${completionMs.toFixed(1)} ms; tricklers closed after ${((Math.max(...closedAt) - opened) / 1000).toFixed(2)} s ` +
    `(deadline ${READ_TIMEOUT_S} s)`);
  assert.ok(health.every((h) => h.status === 200));
  assert.equal(res.status, 200);
  assert.equal(completion.usage.completion_tokens, 8);
  assert.equal(closedAt.filter((t) => t === 0).length, 0, 'some trickling connections were never closed');
  // Closed by the server's deadline, not before it (generous bound above it).
  assert.ok(Math.min(...closedAt) - opened >= (READ_TIMEOUT_S - 1) * 1000);
  assert.ok(Math.max(...closedAt) - opened < (READ_TIMEOUT_S + 8) * 1000);
});

/**
 * One streamed completion over its own connection (node's http client with
 * no agent: `Connection: close`, never a reused keep-alive socket, so no
 * request races the server closing an idle one): { status, retryAfter, done,
 * finish, error }.
 */
function stream(i) {
  const body = JSON.stringify({ model: MODEL, prompt: `Story ${i}:`, max_tokens: FULL ? 64 : 32, ignore_eos: true, temperature: 0, stream: true });
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: daemon.port, path: '/v1/completions', method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        if (res.statusCode !== 200) {
          resolve({ status: res.statusCode, retryAfter: res.headers['retry-after'], error: JSON.parse(text).error });
          return;
        }
        const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
        const chunks = events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e));
        resolve({ status: 200, done: events.at(-1) === '[DONE]', finish: chunks.map((c) => c.choices?.[0]?.finish_reason).filter(Boolean) });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * GET /health every 20 ms from a separate process (python3's http.client, a
 * new connection each time), so that the latencies are the server's, not
 * this process's event loop busy with thousands of streams. stop() ends it
 * and resolves to { ms: [...], statuses: [...] }.
 */
function startProber() {
  const script = `
import http.client, json, signal, sys, time
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
ms, statuses = [], []
while not stop:
    t = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", ${daemon.port}, timeout=60)
    c.request("GET", "/health")
    r = c.getresponse()
    r.read()
    c.close()
    ms.append((time.perf_counter() - t) * 1000)
    statuses.append(r.status)
    time.sleep(0.02)
print(json.dumps({"ms": ms, "statuses": statuses}))
`;
  const child = spawn(PYTHON(), ['-c', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return {
    async stop() {
      child.kill('SIGTERM');
      await exited;
      return JSON.parse(out);
    },
  };
}

test(`${STREAMS} concurrent streams with --max-num-seqs ${MAX_NUM_SEQS}: each completes or gets 503 + Retry-After`, async () => {
  const prober = startProber();
  await sleep(200);  // the prober is running before the load starts
  const start = Date.now();
  const results = await Promise.all(Array.from({ length: STREAMS }, (_, i) => stream(i)));
  const seconds = (Date.now() - start) / 1000;
  const { ms, statuses } = await prober.stop();
  const ok = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status === 503);
  console.log(`# ${STREAMS} streams in ${seconds.toFixed(1)} s: ${ok.length} completed, ${refused.length} refused (503); ` +
    `/health p50 ${percentile(ms, 50).toFixed(1)} ms, p99 ${percentile(ms, 99).toFixed(1)} ms over ${ms.length} probes`);
  assert.equal(ok.length + refused.length, STREAMS, JSON.stringify(results.filter((r) => r.status !== 200 && r.status !== 503).slice(0, 3)));
  for (const r of ok) {
    assert.ok(r.done, 'a stream did not end with [DONE]');
    assert.deepEqual(r.finish, ['length']);
  }
  for (const r of refused) {
    assert.equal(r.retryAfter, '1');
    assert.equal(r.error.code, 'overloaded');
    assert.equal(r.error.type, 'server_error');
  }
  // At most max-num-seqs + max-pending were admitted at once, so with this
  // many at once some were refused, and at least that many completed.
  assert.ok(refused.length > 0, 'nothing was refused');
  assert.ok(ok.length >= MAX_NUM_SEQS + MAX_PENDING);
  assert.ok(ms.length > 10 && statuses.every((st) => st === 200), `/health statuses ${JSON.stringify(statuses.slice(0, 20))}`);
  // The bound, asserted at the full counts (make test-http-full);
  // the scaled CI run shares its cores with other tests' builds.
  if (FULL) assert.ok(percentile(ms, 99) < 50, `/health p99 ${percentile(ms, 99).toFixed(1)} ms`);
  const m = await daemon.metrics();
  assert.equal(m.sum('tqserve_num_requests_running'), 0);
  assert.equal(m.sum('tqserve_kv_cache_blocks_used'), 0);
  assert.equal(m.get('tqserve_requests_refused_total', { protocol: 'http', reason: 'overloaded' }), refused.length);
});

test('a client that stops reading is cut by the write timeout and its request aborted', async () => {
  // Python sets a 4 KiB receive buffer (node cannot), sends a long stream
  // with top-20 logprobs (about 1 KB an event) and never reads it; it exits
  // when the server closes the connection.
  const body = JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true,
    stream: true, logprobs: 20, n: 4 });
  const script = `
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", ${daemon.port}))
body = sys.argv[1].encode()
s.sendall(b"POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
time.sleep(60)
`;
  const child = spawn(PYTHON(), ['-c', script, body], { stdio: 'ignore' });
  const start = Date.now();
  try {
    let log = '';
    for (let i = 0; i < 600 && !/write stalled for 2 s; aborted/.test(log); ++i) {
      await sleep(100);
      log = daemon.stderr;
    }
    assert.match(log, /write stalled for 2 s; aborted/, 'the stalled reader was never cut');
    console.log(`# stalled reader cut ${((Date.now() - start) / 1000).toFixed(1)} s after it sent its request ` +
      `(write timeout ${WRITE_TIMEOUT_S} s)`);
    let m;
    for (let i = 0; i < 100; ++i) {
      m = await daemon.metrics();
      if (m.sum('tqserve_num_requests_running') === 0 && m.sum('tqserve_kv_cache_blocks_used') === 0) break;
      await sleep(50);
    }
    assert.equal(m.sum('tqserve_num_requests_running'), 0);
    assert.equal(m.sum('tqserve_kv_cache_blocks_used'), 0);
  } finally {
    child.kill('SIGKILL');
  }
});
