// Soak (issue 20 item 8): TQ_SOAK_SECONDS (default 60; `make soak`: 600) of
// mixed traffic from WORKERS concurrent clients, more than --max-num-seqs,
// through a KV pool of FITS sequences that forces preemption: streaming and
// non-streaming completions and chats (n up to 3), client aborts at random
// points (AbortController), bad requests (4xx expected), gRPC streams,
// cancels and deadlines. At the end: every request was answered or cleanly
// refused (counted by category; nothing else), no request is running, no KV
// block is used, some preemption happened, and the daemon's RSS (VmRSS of
// /proc/PID/status) grew by < 5% from the end of the first third of the run
// to the end (not under the sanitizers: ASan's quarantine keeps freed memory).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, test } from 'node:test';

import { SANITIZED, sleep, startDaemon } from './harness.mjs';
import { Status, connect, freePort, grpcAddress } from './grpc_client.mjs';
import { workload } from './workload.mjs';

const SECONDS = Number(process.env.TQ_SOAK_SECONDS ?? 60);
const MODEL = 'stories260K';
const MAX_LEN = 256;
const FITS = 4;  // sequences of MAX_LEN tokens the pool holds
const MAX_NUM_SEQS = 8;
const WORKERS = 24;  // > MAX_NUM_SEQS; with n up to 3, also past admission (503s)
const RSS_GROWTH = 0.05;
const daemons = [];

after(async () => {
  for (const d of daemons) await d.stop({ signal: 'SIGKILL' });
});

/** A small seeded PRNG (mulberry32): the run's choices are reproducible per seed. */
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)), pick: (xs) => xs[Math.floor(next() * xs.length)] };
}

/** VmRSS of a process in bytes (/proc/PID/status, "VmRSS: N kB"). */
function rssBytes(pid) {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}

const PROMPTS = workload(64).map((r) => r.prompt);
const FINISHES = new Set(['length', 'stop']);

// Bad requests and the status OpenAI's API (and vLLM) answers them with.
const BAD = [
  ['/v1/completions', '{"model": ', 400],
  ['/v1/chat/completions', 'not json', 400],
  ['/v1/completions', { model: MODEL, prompt: 'x', max_tokens: -1 }, 400],
  ['/v1/completions', { model: MODEL, prompt: 'x', temperature: -1 }, 400],
  ['/v1/completions', { model: MODEL, prompt: 'x', n: 0 }, 400],
  ['/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 10 * MAX_LEN }, 400],
  ['/v1/chat/completions', { model: MODEL, messages: [] }, 400],
  ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }, 400],
  ['/v1/completions', { model: 'no-such-model', prompt: 'x' }, 404],
];

/** Counts of outcomes; `unexpected` holds descriptions of anything else. */
class Tally {
  constructor() {
    this.counts = {};
    this.unexpected = [];
    this.inFlight = new Map();  // worker id -> { what, since, progress }
  }
  begin(worker, what) {
    const entry = { what, since: Date.now(), progress: 0 };
    this.inFlight.set(worker, entry);
    return entry;
  }
  add(category) {
    this.counts[category] = (this.counts[category] ?? 0) + 1;
  }
  bad(what) {
    this.add('unexpected');
    if (this.unexpected.length < 20) this.unexpected.push(what);
  }
}

/** Checks a finished OpenAI response body (completion or chat) with n choices. */
function checkWhole(res, n, maxTokens, chat) {
  assert.equal(res.choices.length, n);
  for (const c of res.choices) {
    assert.ok(FINISHES.has(c.finish_reason), `finish_reason ${c.finish_reason}`);
    assert.equal(typeof (chat ? c.message.content : c.text), 'string');
  }
  assert.ok(res.usage.completion_tokens >= n && res.usage.completion_tokens <= n * maxTokens, JSON.stringify(res.usage));
}

async function httpRequest(daemon, client, r, tally, id) {
  const chat = r.next() < 0.5;
  const stream = r.next() < 0.6;
  const n = r.pick([1, 1, 2, 3]);
  const maxTokens = r.int(4, 200);
  const prompt = r.pick(PROMPTS);
  const body = { model: MODEL, max_tokens: maxTokens, n, ignore_eos: r.next() < 0.5, temperature: r.pick([0, 0.8, 1]), seed: r.int(0, 1000) };
  if (chat) body.messages = [{ role: 'user', content: prompt }];
  else body.prompt = prompt;
  // Some are aborted: a fifth of the streams after some chunks, and about a
  // sixth of all requests after some milliseconds.
  const abortAfterChunks = stream && r.next() < 0.2 ? r.int(1, 20) : -1;
  const abortAfterMs = r.next() < 0.15 ? r.int(1, 300) : -1;
  const controller = new AbortController();
  const timer = abortAfterMs >= 0 ? setTimeout(() => controller.abort(), abortAfterMs) : undefined;
  const kind = `${chat ? 'chat' : 'completion'}${stream ? '_stream' : ''}`;
  const api = chat ? client.chat.completions : client.completions;
  const track = tally.begin(id, `${kind} ${JSON.stringify(body)} abort@${abortAfterChunks} chunks/${abortAfterMs} ms`);
  try {
    if (!stream) {
      const res = await api.create(body, { signal: controller.signal });
      checkWhole(res, n, maxTokens, chat);
      tally.add(`${kind}_ok`);
      return;
    }
    const s = await api.create({ ...body, stream: true, stream_options: { include_usage: true } }, { signal: controller.signal });
    let chunks = 0;
    const finishes = new Map();
    let usage;
    for await (const chunk of s) {
      chunks++;
      track.progress = chunks;
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) if (c.finish_reason) finishes.set(c.index, c.finish_reason);
      if (chunks === abortAfterChunks) {
        // Abort and leave the loop (the openai client's documented way):
        // awaiting another read after an abort that races the body's end
        // can leave undici's reader pending forever on the client side.
        controller.abort();
        break;
      }
    }
    if (controller.signal.aborted) {
      tally.add(`${kind}_aborted`);  // the abort came as the stream ended
      return;
    }
    assert.equal(finishes.size, n, `${n} choices, ${finishes.size} finished`);
    for (const f of finishes.values()) assert.ok(FINISHES.has(f), `finish_reason ${f}`);
    assert.ok(usage && usage.completion_tokens >= n && usage.completion_tokens <= n * maxTokens, JSON.stringify(usage));
    tally.add(`${kind}_ok`);
  } catch (e) {
    if (controller.signal.aborted) tally.add(`${kind}_aborted`);
    else if (e?.status === 503) tally.add('refused_503');  // admission control: cleanly refused
    else tally.bad(`${kind} ${JSON.stringify(body)}: ${e?.stack ?? e}`);
  } finally {
    clearTimeout(timer);
  }
}

async function badRequest(daemon, r, tally, id) {
  const [route, body, want] = r.pick(BAD);
  tally.begin(id, `bad ${route} ${JSON.stringify(body)}`);
  try {
    const res = await daemon.fetch(route, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const json = await res.json();
    if (res.status === want && typeof json.error?.message === 'string') tally.add(`bad_${want}`);
    else tally.bad(`${route} ${JSON.stringify(body)}: HTTP ${res.status} ${JSON.stringify(json)}`);
  } catch (e) {
    tally.bad(`${route} ${JSON.stringify(body)}: ${e}`);
  }
}

/** One gRPC Generate: to the end, cancelled after some messages, or with a short deadline. */
function grpcRequest(generation, r, tally, id) {
  const mode = r.pick(['whole', 'cancel', 'deadline']);
  const maxTokens = r.int(4, 200);
  const request = { text: r.pick(PROMPTS), sampling: { max_tokens: maxTokens, ignore_eos: r.next() < 0.5, temperature: 0 } };
  const deadlineMs = mode === 'deadline' ? r.int(5, 200) : 60_000;
  const cancelAfter = r.int(1, 10);
  const track = tally.begin(id, `grpc ${mode} ${JSON.stringify(request)} deadline ${deadlineMs} ms cancel@${cancelAfter}`);
  return new Promise((resolve) => {
    const call = generation.Generate(request, { deadline: Date.now() + deadlineMs });
    let messages = 0;
    let tokens = 0;
    let finish;
    call.on('data', (m) => {
      messages++;
      track.progress = messages;
      tokens += m.token_ids.length;
      if (m.finish_reason && m.finish_reason !== 'FINISH_REASON_UNSPECIFIED') finish = m.finish_reason;
      if (mode === 'cancel' && messages === cancelAfter) call.cancel();
    });
    call.on('error', () => {});  // the status event carries the code
    call.on('status', (s) => {
      if (s.code === Status.OK && ['FINISH_REASON_LENGTH', 'FINISH_REASON_STOP'].includes(finish) && tokens >= 1 && tokens <= maxTokens) {
        tally.add('grpc_ok');
      } else if (s.code === Status.CANCELLED && mode === 'cancel') {
        tally.add('grpc_cancelled');
      } else if (s.code === Status.DEADLINE_EXCEEDED && mode === 'deadline') {
        tally.add('grpc_deadline');
      } else if (s.code === Status.UNAVAILABLE || s.code === Status.RESOURCE_EXHAUSTED) {
        tally.add('refused_grpc');
      } else {
        tally.bad(`gRPC ${mode} ${JSON.stringify(request)}: code ${s.code} ${s.details}, finish ${finish}, ${tokens} tokens`);
      }
      resolve();
    });
  });
}

/** Polls /metrics until `ok(metrics)` or `ms` pass; returns the last metrics. */
async function settle(daemon, ok, ms = 10_000) {
  const until = Date.now() + ms;
  for (;;) {
    const m = await daemon.metrics();
    if (ok(m) || Date.now() > until) return m;
    await sleep(100);
  }
}

test(`soak: ${SECONDS} s of mixed traffic from ${WORKERS} clients, preemption, aborts, bad requests`, { timeout: (SECONDS + 180) * 1000 }, async () => {
  // The pool's geometry from a default daemon, then one of FITS sequences.
  const probe = await startDaemon({ args: ['--max-model-len', String(MAX_LEN)] });
  daemons.push(probe);
  const m0 = await probe.metrics();
  const blockSize = m0.get('tqserve_kv_cache_capacity_tokens') / m0.get('tqserve_kv_cache_num_blocks');
  const bytesPerBlock = m0.sum('tqserve_memory_kv_cache_bytes') / m0.get('tqserve_kv_cache_num_blocks');
  assert.equal((await probe.stop()).code, 0);
  const budget = (FITS * MAX_LEN / blockSize) * bytesPerBlock;

  const grpcPort = await freePort();
  const daemon = await startDaemon({
    args: ['--max-model-len', String(MAX_LEN), '--kv-cache-memory', String(budget), '--max-num-seqs', String(MAX_NUM_SEQS),
      '--grpc-port', String(grpcPort)],
  });
  daemons.push(daemon);
  assert.equal((await daemon.metrics()).get('tqserve_kv_cache_capacity_tokens'), FITS * MAX_LEN);
  const grpcClients = connect(grpcAddress(daemon.stderr));
  const client = daemon.client({ timeout: 60_000 });
  const tally = new Tally();
  const pid = daemon.proc.pid;

  const start = Date.now();
  const end = start + SECONDS * 1000;
  const third = start + (SECONDS * 1000) / 3;
  let rssAtThird;
  let rssMax = 0;
  const rssTimer = setInterval(() => {
    if (daemon.exitStatus) return;
    const rss = rssBytes(pid);
    rssMax = Math.max(rssMax, rss);
    if (rssAtThird === undefined && Date.now() >= third) rssAtThird = rss;
  }, 250);
  const every = Math.max(10, SECONDS / 10) * 1000;
  const progressTimer = setInterval(() => {
    console.log(`# ${((Date.now() - start) / 1000).toFixed(0)} s: ${JSON.stringify(tally.counts)}`);
  }, every);

  const worker = async (id) => {
    const r = rng(1000 + id);
    while (Date.now() < end && !daemon.exitStatus) {
      const what = r.next();
      if (what < 0.7) await httpRequest(daemon, client, r, tally, id);
      else if (what < 0.8) await badRequest(daemon, r, tally, id);
      else await grpcRequest(grpcClients.generation, r, tally, id);
    }
    tally.inFlight.delete(id);
  };
  // Every request is bounded (60 s client timeouts and deadlines): the
  // workers end within a minute and a half of the end, or something hangs.
  let stuck;
  try {
    const workers = Promise.all(Array.from({ length: WORKERS }, (_, i) => worker(i)));
    let graceTimer;
    const grace = new Promise((resolve) => (graceTimer = setTimeout(() => resolve('stuck'), end + 90_000 - Date.now())));
    const first = await Promise.race([workers, grace]);
    clearTimeout(graceTimer);  // or it keeps the test process alive
    if (first === 'stuck') {
      const now = Date.now();
      stuck = [...tally.inFlight.values()].map((e) => `${((now - e.since) / 1000).toFixed(1)} s, progress ${e.progress}: ${e.what}`);
      const m = await daemon.metrics();
      stuck.push(`running ${m.get('tqserve_num_requests_running')}, waiting ${m.get('tqserve_num_requests_waiting')}, blocks used ${m.get('tqserve_kv_cache_blocks_used')}`);
    }
  } finally {
    clearInterval(rssTimer);
    clearInterval(progressTimer);
    grpcClients.close();
  }
  assert.equal(daemon.exitStatus, undefined, `the daemon died during the soak:\n${daemon.stderr.slice(-4000)}`);
  assert.equal(stuck, undefined, `requests still in flight 90 s after the end:\n${stuck?.join('\n')}\n${daemon.stderr.slice(-3000)}`);

  // Aborted requests are freed in the engine's next steps.
  const m = await settle(daemon, (x) => x.get('tqserve_num_requests_running') === 0 && x.get('tqserve_kv_cache_blocks_used') === 0
    && x.get('tqserve_num_requests_waiting') === 0);
  const rssEnd = rssBytes(pid);
  const total = Object.values(tally.counts).reduce((a, b) => a + b, 0);
  const growth = rssAtThird ? (rssEnd - rssAtThird) / rssAtThird : NaN;
  const preemptions = m.get('tqserve_num_preemptions_total');
  const mib = (b) => (b / 2 ** 20).toFixed(1);
  console.log(`# ${total} requests in ${((Date.now() - start) / 1000).toFixed(1)} s: ${JSON.stringify(Object.fromEntries(Object.entries(tally.counts).sort()))}`);
  console.log(`# preemptions ${preemptions}; RSS at 1/3 ${mib(rssAtThird)} MiB, end ${mib(rssEnd)} MiB, max ${mib(rssMax)} MiB, growth ${(100 * growth).toFixed(2)}%`);

  assert.deepEqual(tally.unexpected, [], `${tally.unexpected.length} unexpected outcomes`);
  for (const category of ['completion_ok', 'completion_stream_ok', 'chat_ok', 'chat_stream_ok', 'bad_400', 'grpc_ok', 'grpc_cancelled']) {
    assert.ok(tally.counts[category] > 0, `no ${category} outcome: ${JSON.stringify(tally.counts)}`);
  }
  assert.ok((tally.counts.completion_stream_aborted ?? 0) + (tally.counts.chat_stream_aborted ?? 0) > 0, 'no stream was aborted');
  assert.equal(m.get('tqserve_num_requests_running'), 0);
  assert.equal(m.get('tqserve_num_requests_waiting'), 0);
  assert.equal(m.get('tqserve_kv_cache_blocks_used'), 0);
  assert.ok(preemptions > 0, 'no preemption happened');
  if (!SANITIZED()) {
    assert.ok(growth < RSS_GROWTH, `RSS grew ${(100 * growth).toFixed(2)}% from ${mib(rssAtThird)} to ${mib(rssEnd)} MiB`);
  }
  assert.deepEqual(await daemon.stop(), { code: 0, signal: null }, daemon.stderr.slice(-2000));
});
