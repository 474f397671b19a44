// Test harness for the integration tests: starts `tqserve serve` as a child
// process, waits until it is ready, and stops it again, also when a test fails
// or the test process dies (a watchdog shell kills the daemon then).
//
// Environment (set by tests/integration/CMakeLists.txt):
//   TQSERVE_BIN    the tqserve binary
//   TQSERVE_MODEL  the bundled model directory (models/stories260K)
//   TQ_PYTHON3     Debian's python3 with sentencepiece (independent references)
//   TQ_SOURCE_DIR  the repository root
//   TQ_WORK_DIR    a scratch directory in the build tree
//   TQSERVE_FAULT_BIN  tqserve_fault_inject: tqserve plus a test-only engine
//                  fault (TQSERVE_FAULT_INJECT; fault.test.mjs)
//   TQSERVE_TENSOR_PARALLEL_SIZE  optional: every daemon runs with
//                  --tensor-parallel-size N (the *_tp2 tests; docs/parallelism.md)
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before } from 'node:test';

import OpenAI from 'openai';

import { httpsFetch } from './https_fetch.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

/** Reads a required environment variable; throws naming it when unset. */
export function env(name, fallback) {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === '') {
    throw new Error(`${name} is not set (run the integration tests through CTest)`);
  }
  return v;
}

export const BIN = () => env('TQSERVE_BIN');
export const FAULT_BIN = () => env('TQSERVE_FAULT_BIN');
export const MODEL = () => env('TQSERVE_MODEL');
export const PYTHON = () => env('TQ_PYTHON3', '/usr/bin/python3');
export const SOURCE_DIR = () => env('TQ_SOURCE_DIR', path.resolve(here, '../..'));
/**
 * True when the daemon under test is a sanitizer build: AddressSanitizer +
 * UBSan (`make test-asan`; its allocator keeps freed memory in a quarantine)
 * or ThreadSanitizer (`make test-tsan`, 5-15x slower), so load sizes and RSS
 * bounds are set for Release.
 */
export const SANITIZED = () => process.env.TQ_SANITIZE === '1';
export const WORK_DIR = () => {
  const dir = env('TQ_WORK_DIR', path.join(process.cwd(), 'integration-work'));
  fs.mkdirSync(dir, { recursive: true });
  return dir;
};

const live = new Set();
// Daemons whose stderr holds a ThreadSanitizer report (`make test-tsan`): the
// test file fails even where the test accepts the daemon's exit (the fault
// test's expected non-zero exit) or the report came after its last check.
const raced = [];
const TSAN_REPORT_RE = /WARNING: ThreadSanitizer: [^\n]*/;
process.on('exit', () => {
  for (const d of live) d.proc.kill('SIGKILL');
  for (const d of raced) {
    const at = d.stderr.search(TSAN_REPORT_RE);
    console.error(`ThreadSanitizer report from tqserve ${d.args.join(' ')}:\n${d.stderr.slice(at, at + 12_000)}`);
    process.exitCode = 1;
  }
});

const LISTEN_RE = /tqserve: listening on (https?:\/\/[^\s]+?):(\d+)\s/;

/**
 * A running daemon. `url` is http://HOST:PORT (https:// with --ssl-certfile),
 * `baseURL` the OpenAI base (url + '/v1'); `stderr` accumulates the daemon's
 * log; `exited` resolves to { code, signal } when the process ends. `tls`
 * ({ ca, cert?, key? }, PEM): the CA its HTTPS certificate is checked
 * against, and the client certificate to present (--ssl-ca-certs).
 */
export class Daemon {
  constructor(proc, args, tls) {
    this.proc = proc;
    this.args = args;
    this.fetchImpl = tls ? httpsFetch(tls) : fetch;
    this.stderr = '';
    this.stdout = '';
    this.url = undefined;
    this.port = undefined;
    this.exitStatus = undefined;
    this.exited = new Promise((resolve) => {
      proc.on('exit', (code, signal) => {
        live.delete(this);
        this.exitStatus = { code, signal };
        resolve(this.exitStatus);
      });
    });
    // 'close': after the last of stderr was read.
    proc.on('close', () => {
      if (TSAN_REPORT_RE.test(this.stderr)) raced.push(this);
    });
  }

  get baseURL() {
    return `${this.url}/v1`;
  }

  /** An `openai` client for this daemon (no retries: every error is seen). */
  client(options = {}) {
    return new OpenAI({ baseURL: this.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000, fetch: this.fetchImpl, ...options });
  }

  /** fetch() relative to the daemon's root URL. */
  fetch(route, init) {
    return this.fetchImpl(`${this.url}${route}`, init);
  }

  /** POST a JSON body (an object, or a raw string sent as is). */
  post(route, body, headers = {}) {
    return this.fetch(route, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  }

  /** The Prometheus text of GET /metrics, parsed (see parseMetrics). */
  async metrics() {
    const res = await this.fetch('/metrics');
    if (res.status !== 200) throw new Error(`GET /metrics: HTTP ${res.status}`);
    return parseMetrics(await res.text());
  }

  /** Sends `signal` and waits for the exit (SIGKILL after `timeoutMs`). */
  async stop({ signal = 'SIGTERM', timeoutMs = 30_000 } = {}) {
    if (this.exitStatus) return this.exitStatus;
    this.proc.kill(signal);
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), timeoutMs);
    const status = await this.exited;
    clearTimeout(timer);
    return status;
  }
}

/**
 * Starts `tqserve serve --model MODEL --port 0 ...args` and resolves once it
 * printed its listening line and GET /health answered 200 (over HTTPS with
 * `tls`, see Daemon, when args hold --ssl-certfile). Rejects with the
 * daemon's stderr when it exits first or is not ready within `readyTimeoutMs`.
 * `bin` (default BIN()) and `env` (added to this process's environment)
 * choose another binary and environment (the fault test's).
 */
export async function startDaemon({ args = [], model = MODEL(), port = 0, readyTimeoutMs = 120_000, tls, bin = BIN(), env: extraEnv = {} } = {}) {
  // Loopback only, unless a test asks for another address.
  const host = args.includes('--host') ? [] : ['--host', '127.0.0.1'];
  // No gRPC server unless a test asks for one: daemons running in parallel
  // would all want the default port 50051.
  const grpc = args.includes('--grpc-port') ? [] : ['--grpc-port', '0'];
  const tpSize = process.env.TQSERVE_TENSOR_PARALLEL_SIZE;
  const tp = tpSize && !args.includes('--tensor-parallel-size') ? ['--tensor-parallel-size', tpSize] : [];
  const argv = ['serve', '--model', model, '--port', String(port), ...host, ...grpc, ...tp, ...args];
  const proc = spawn(bin, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...extraEnv } });
  const daemon = new Daemon(proc, argv, tls);
  live.add(daemon);
  // If this node process is killed (CTest timeout), take the daemon with it.
  spawn('/bin/sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${proc.pid} 2>/dev/null; do sleep 1; done; kill -9 ${proc.pid} 2>/dev/null`], {
    stdio: 'ignore',
    detached: true,
  }).unref();
  proc.stdout.setEncoding('utf8');
  proc.stderr.setEncoding('utf8');
  proc.stdout.on('data', (s) => (daemon.stdout += s));

  const exitedEarly = () =>
    new Error(`tqserve ${argv.join(' ')} exited (code ${daemon.exitStatus.code}, signal ${daemon.exitStatus.signal}) before it was ready:\n${daemon.stderr}`);
  const listening = new Promise((resolve, reject) => {
    proc.stderr.on('data', (s) => {
      daemon.stderr += s;
      const m = LISTEN_RE.exec(daemon.stderr);
      if (m && daemon.url === undefined) {
        daemon.url = `${m[1]}:${m[2]}`;
        daemon.port = Number(m[2]);
        resolve();
      }
    });
    daemon.exited.then(() => reject(exitedEarly()));
  });
  const deadline = Date.now() + readyTimeoutMs;
  const notReady = (what) => new Error(`tqserve: ${what} within ${readyTimeoutMs} ms:\n${daemon.stderr}`);
  try {
    let timer;
    await Promise.race([
      listening,
      new Promise((_, reject) => (timer = setTimeout(() => reject(notReady('no listening line')), readyTimeoutMs))),
    ]).finally(() => clearTimeout(timer));
    for (;;) {
      try {
        const res = await daemon.fetch('/health');
        await res.arrayBuffer();
        if (res.status === 200) break;
      } catch {
        // not accepting connections yet
      }
      if (daemon.exitStatus) throw exitedEarly();
      if (Date.now() > deadline) throw notReady('GET /health never answered 200');
      await sleep(50);
    }
  } catch (e) {
    proc.kill('SIGKILL');
    throw e;
  }
  return daemon;
}

/**
 * Registers node:test hooks that start a daemon before the file's tests and,
 * after them, stop it with SIGTERM and assert a clean exit (code 0). Returns
 * { daemon, client } (filled in by the before hook).
 */
export function serveForTests(options = {}) {
  const served = { daemon: undefined, client: undefined };
  before(async () => {
    served.daemon = await startDaemon(options);
    served.client = served.daemon.client();
  });
  after(async () => {
    if (!served.daemon) return;
    const status = await served.daemon.stop();
    assert.deepEqual(status, { code: 0, signal: null }, `daemon exit:\n${served.daemon.stderr}`);
  });
  return served;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Parses the Prometheus text exposition format into
 * { samples: [{ name, labels, value }], get(name, labels?) , sum(name, labels?) }.
 * get() returns the value of the one sample matching `labels` (a subset) or
 * throws; sum() adds all matching samples (0 when none).
 */
export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) throw new Error(`unparsable metrics line: ${line}`);
    const labels = {};
    if (m[3]) {
      for (const lm of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]] = lm[2];
    }
    samples.push({ name: m[1], labels, value: Number(m[4]) });
  }
  const match = (name, want = {}) =>
    samples.filter((s) => s.name === name && Object.entries(want).every(([k, v]) => s.labels[k] === v));
  return {
    text,
    samples,
    get(name, labels) {
      const found = match(name, labels);
      if (found.length !== 1) throw new Error(`metric ${name}${JSON.stringify(labels ?? {})}: ${found.length} samples, expected 1`);
      return found[0].value;
    },
    sum(name, labels) {
      return match(name, labels).reduce((a, s) => a + s.value, 0);
    },
  };
}

/**
 * Token ids and texts from the Python sentencepiece library (an independent
 * tokenizer): { encode: [[ids]...], decode: [text...] } for the given strings
 * and id lists, with the model's tokenizer.model.
 */
export function sentencepiece({ encode = [], decode = [], model = MODEL() }) {
  const out = execFileSync(PYTHON(), [path.join(here, 'sp_fixture.py'), path.join(model, 'tokenizer.model')], {
    input: JSON.stringify({ encode, decode }),
    encoding: 'utf8',
  });
  return JSON.parse(out);
}

/** Collects an openai stream: { text per choice index, chunks, usage chunks }. */
export async function collectStream(stream, pick = (c) => c.text ?? c.delta?.content ?? '') {
  const chunks = [];
  const texts = [];
  const finish = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? '') + (pick(c) ?? '');
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { chunks, texts, finish };
}

/**
 * POSTs `body` and reads the response as Server-Sent Events without the
 * openai client, to see the wire format itself: { status, headers, events:
 * [data string...] (the `data:` payloads in order, "[DONE]" included),
 * eventTypes: [event name or undefined...], json: [parsed payloads except
 * [DONE]], done: whether the last event was [DONE] }.
 */
export async function sseRequest(url, body, init = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...init,
  });
  const raw = await res.text();
  const { events, eventTypes } = parseSse(raw);
  return {
    status: res.status,
    headers: res.headers,
    raw,
    events,
    eventTypes,
    json: events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e)),
    done: events.at(-1) === '[DONE]',
  };
}

/** The reference ids of the bundled model's greedy "Once upon a time" (tests/data). */
export function referenceIds() {
  const text = fs.readFileSync(path.join(SOURCE_DIR(), 'tests/data/reference_greedy_ids_once_upon_a_time.txt'), 'utf8');
  const m = /^# ids (\[.*\])$/m.exec(text);
  if (!m) throw new Error('reference_greedy_ids_once_upon_a_time.txt: no "# ids [...]" line');
  return JSON.parse(m[1]);
}

/**
 * The reference completion of "Once upon a time" after `n` tokens, decoded
 * by the Python sentencepiece library: the text of prompt + n reference
 * tokens minus the prompt's text.
 */
export function referenceCompletion(n) {
  const ids = referenceIds();
  const prompt = 'Once upon a time';
  const [full] = sentencepiece({ decode: [ids.slice(0, 4 + n)] }).decode;
  if (!full.startsWith(prompt)) throw new Error(`reference text does not start with the prompt: ${full}`);
  return full.slice(prompt.length);
}

/**
 * Samples one gauge from /metrics every `intervalMs` until stop(), which
 * resolves to the sampled values (sum over label sets).
 */
export function sampleMetric(daemon, name, intervalMs = 25) {
  const values = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        values.push((await daemon.metrics()).sum(name));
      } catch {
        // a scrape racing the end of the test
      }
      await sleep(intervalMs);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return values;
    },
  };
}

/** Splits an SSE body into its `data:` payloads (see sseRequest). */
function parseSse(raw) {
  const events = [];
  const eventTypes = [];
  for (const block of raw.split(/\r?\n\r?\n/)) {
    if (block.trim() === '') continue;
    let data;
    let type;
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('data:')) data = (data === undefined ? '' : data + '\n') + line.slice(5).replace(/^ /, '');
      else if (line.startsWith('event:')) type = line.slice(6).trim();
    }
    if (data !== undefined) {
      events.push(data);
      eventTypes.push(type);
    }
  }
  return { events, eventTypes };
}

/**
 * Like sseRequest, but returns at once: { firstData: a promise resolved when
 * the first body bytes arrive, result: a promise of sseRequest's object plus
 * `endedAt` (Date.now() when the body ended) }. `fetchImpl`: the fetch to
 * use (a Daemon's `fetchImpl` for HTTPS).
 */
export function openSse(url, body, fetchImpl = fetch) {
  let signalFirst;
  const firstData = new Promise((r) => (signalFirst = r));
  const result = (async () => {
    const res = await fetchImpl(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const decoder = new TextDecoder();
    let raw = '';
    for await (const part of res.body) {
      raw += decoder.decode(part, { stream: true });
      signalFirst();
    }
    signalFirst();
    const endedAt = Date.now();
    const { events, eventTypes } = parseSse(raw);
    return {
      status: res.status, raw, events, eventTypes, endedAt,
      json: events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e)),
      done: events.at(-1) === '[DONE]',
    };
  })();
  result.catch(() => signalFirst());
  return { firstData, result };
}

/** The error a promise rejects with; fails the test when it resolves. */
export async function errorOf(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  return assert.fail('the request succeeded');
}

/**
 * The 12.6M-parameter random-weight model of the drain tests (the bundled
 * tokenizer; decode steps take milliseconds, so streams stay in flight), made
 * once in WORK_DIR()/random_12m; returns its directory.
 */
export function randomModel12M() {
  const modelDir = path.join(WORK_DIR(), 'random_12m');
  if (!fs.existsSync(path.join(modelDir, 'config.json'))) {
    execFileSync(BIN(), ['make-random-model', '--out', modelDir, '--hidden-size', '512', '--intermediate-size', '1376',
      '--num-layers', '4', '--num-heads', '8', '--vocab-size', '512', '--dtype', 'fp32',
      '--tokenizer', path.join(MODEL(), 'tokenizer.model')]);
  }
  return modelDir;
}
