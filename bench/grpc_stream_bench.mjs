// gRPC Generate under many concurrent streams (issue 19 item 6): for each
// concurrency, serves the model with a tqserve binary, opens N Generate
// streams at once (@grpc/grpc-js, one channel), and prints how many finished
// OK or were refused (RESOURCE_EXHAUSTED), stream latency and time to first
// message p50/p99, and the daemon's peak thread count (/proc/PID/status,
// sampled every 20 ms during the run).
//
// Usage: node bench/grpc_stream_bench.mjs TQSERVE_BIN [CONCURRENCY,...]
// Environment [defaults]: MODEL_DIR [models/stories260K]  MAX_TOKENS [64]
//   SERVE_ARGS [--max-num-seqs 256]
import { spawn } from 'node:child_process';
import fs from 'node:fs';

import { connect, freePort, grpcAddress, healthStatus, Status } from '../tests/integration/grpc_client.mjs';

const [bin, list = '256,1024'] = process.argv.slice(2);
if (!bin) throw new Error('usage: node bench/grpc_stream_bench.mjs TQSERVE_BIN [CONCURRENCY,...]');
const model = process.env.MODEL_DIR ?? 'models/stories260K';
const maxTokens = Number(process.env.MAX_TOKENS ?? 64);
const serveArgs = (process.env.SERVE_ARGS ?? '--max-num-seqs 256').split(/\s+/).filter(Boolean);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};
const threadsOf = (pid) => Number(/^Threads:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);

async function runOne(n) {
  const grpcPort = await freePort();
  const proc = spawn(bin, ['serve', '--model', model, '--host', '127.0.0.1', '--port', '0', '--grpc-port', String(grpcPort),
    '--disable-log-requests', ...serveArgs], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  try {
    for (let i = 0; !/gRPC listening/.test(stderr); i++) {
      if (i > 600) throw new Error(`no gRPC listening line:\n${stderr}`);
      await sleep(100);
    }
    const clients = connect(grpcAddress(stderr));
    for (let i = 0; ; i++) {
      try {
        if ((await healthStatus(clients.health)) === 'SERVING') break;
      } catch {}
      if (i > 600) throw new Error('never SERVING');
      await sleep(100);
    }
    const idleThreads = threadsOf(proc.pid);
    let peak = idleThreads;
    const sampler = setInterval(() => (peak = Math.max(peak, threadsOf(proc.pid))), 20);
    const request = { text: 'Once upon a time', sampling: { temperature: 0, max_tokens: maxTokens, ignore_eos: true } };
    const t0 = performance.now();
    const results = await Promise.all(Array.from({ length: n }, () => new Promise((resolve) => {
      const start = performance.now();
      let first;
      const call = clients.generation.Generate(request, { deadline: Date.now() + 600_000 });
      call.on('data', () => (first ??= performance.now() - start));
      call.on('error', () => {});
      call.on('status', (s) => resolve({ code: s.code, ms: performance.now() - start, first }));
    })));
    const wall = (performance.now() - t0) / 1000;
    clearInterval(sampler);
    clients.close();
    const ok = results.filter((r) => r.code === Status.OK);
    const refused = results.filter((r) => r.code === Status.RESOURCE_EXHAUSTED).length;
    const other = n - ok.length - refused;
    const f = (x) => x.toFixed(0);
    console.log(`| ${n} | ${ok.length} | ${refused}${other ? ` (+${other} other)` : ''} | ${f(pct(ok.map((r) => r.ms), 50))} | ` +
      `${f(pct(ok.map((r) => r.ms), 99))} | ${f(pct(ok.map((r) => r.first), 50))} | ${f(pct(ok.map((r) => r.first), 99))} | ` +
      `${idleThreads} | ${peak} | ${wall.toFixed(1)} |`);
  } finally {
    proc.kill('SIGKILL');
  }
}

console.log(`${bin}: ${model}, ${maxTokens} tokens per stream, ${serveArgs.join(' ')}`);
console.log('| streams | OK | RESOURCE_EXHAUSTED | latency p50 ms | p99 ms | first message p50 ms | p99 ms | threads idle | threads peak | wall s |');
console.log('|---|---|---|---|---|---|---|---|---|---|');
for (const n of list.split(',').map(Number)) await runOne(n);
