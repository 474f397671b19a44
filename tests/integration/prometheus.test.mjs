// The monitoring stack against a real daemon: starts tqserve and Debian's
// Prometheus server on loopback (scraping it every second, with the recording
// and alert rules of deploy/prometheus/rules evaluated every second), sends
// completions, then runs every PromQL expression of the Grafana dashboard
// (deploy/grafana/tqserve.json, template variables substituted) and of the
// recording rules through Prometheus' HTTP API (/api/v1/query): each must
// parse and return data. The alert expressions must parse.
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { freePort } from './grpc_client.mjs';
import { PYTHON, SOURCE_DIR, WORK_DIR, sleep, startDaemon } from './harness.mjs';

const served = { daemon: undefined, client: undefined };
let prom;
let promUrl;
let promLog = '';

/** Parses YAML files with Debian's python3-yaml (no YAML parser among the npm packages). */
function readYaml(file) {
  const script = 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))';
  return JSON.parse(execFileSync(PYTHON(), ['-c', script, file], { encoding: 'utf8' }));
}

const rulesDir = () => path.join(SOURCE_DIR(), 'deploy/prometheus/rules');
const ruleFiles = () => fs.readdirSync(rulesDir()).filter((f) => f.endsWith('.yml')).map((f) => path.join(rulesDir(), f));

async function query(expr) {
  const res = await fetch(`${promUrl}/api/v1/query?${new URLSearchParams({ query: expr })}`);
  const body = await res.json();
  return { status: res.status, body };
}

before(async () => {
  served.daemon = await startDaemon();
  served.client = served.daemon.client();
  const work = path.join(WORK_DIR(), 'prometheus');
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(path.join(work, 'data'), { recursive: true });
  // The same job name as deploy/prometheus/prometheus.yml (the alerts select
  // job="tqserve"), a loopback target and 1 s intervals.
  const config = [
    'global:',
    '  scrape_interval: 1s',
    '  evaluation_interval: 1s',
    'rule_files:',
    ...ruleFiles().map((f) => `  - ${JSON.stringify(f)}`),
    'scrape_configs:',
    '  - job_name: tqserve',
    '    static_configs:',
    `      - targets: ["127.0.0.1:${served.daemon.port}"]`,
    '',
  ].join('\n');
  fs.writeFileSync(path.join(work, 'prometheus.yml'), config);
  const port = await freePort();
  promUrl = `http://127.0.0.1:${port}`;
  prom = spawn('prometheus', [
    `--config.file=${path.join(work, 'prometheus.yml')}`,
    `--storage.tsdb.path=${path.join(work, 'data')}`,
    `--web.listen-address=127.0.0.1:${port}`,
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  prom.on('error', (e) => { promLog += `spawn prometheus: ${e.message} (scripts/install_deps.sh installs it)\n`; });
  prom.stdout.on('data', (s) => (promLog += s));
  prom.stderr.on('data', (s) => (promLog += s));
  // Take Prometheus down with this process if CTest kills it.
  spawn('/bin/sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; kill -9 ${prom.pid} 2>/dev/null`], {
    stdio: 'ignore', detached: true,
  }).unref();
  for (let i = 0; ; i++) {
    try {
      const res = await fetch(`${promUrl}/-/ready`);
      await res.arrayBuffer();
      if (res.status === 200) break;
    } catch {
      // not listening yet
    }
    if (prom.exitCode !== null || i > 600) throw new Error(`prometheus did not become ready:\n${promLog}`);
    await sleep(100);
  }
});

after(async () => {
  if (prom && prom.exitCode === null) {
    const exited = new Promise((r) => prom.on('exit', r));
    prom.kill('SIGTERM');
    const timer = setTimeout(() => prom.kill('SIGKILL'), 20_000);
    await exited;
    clearTimeout(timer);
  }
  if (served.daemon) {
    const status = await served.daemon.stop();
    assert.deepEqual(status, { code: 0, signal: null }, `daemon exit:\n${served.daemon.stderr}`);
  }
});

test('every dashboard and recording-rule expression returns data from a real Prometheus', async () => {
  const { daemon, client } = served;
  // Traffic: greedy and sampled, streamed and not, so every histogram and
  // counter the dashboard shows has observations.
  for (let i = 0; i < 6; i++) {
    await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 16, temperature: i % 2 });
  }
  const stream = await client.completions.create({ model: 'stories260K', prompt: 'The dog', max_tokens: 16, stream: true });
  for await (const _ of stream); // eslint-disable-line no-unused-vars

  const instance = `127.0.0.1:${daemon.port}`;
  const dashboard = JSON.parse(fs.readFileSync(path.join(SOURCE_DIR(), 'deploy/grafana/tqserve.json'), 'utf8'));
  const vars = { instance: instance.replaceAll('.', '\\\\.'), rank: '.*', __rate_interval: '1m' };
  const substitute = (e) =>
    e.replace(/\$\{?(\w+)\}?/g, (m, name) => {
      assert.ok(name in vars, `unknown template variable ${m} in ${e}`);
      return vars[name];
    });
  const walk = (panels) => panels.flatMap((p) => [p, ...walk(p.panels ?? [])]);
  const exprs = [];
  for (const p of walk(dashboard.panels)) {
    for (const t of p.targets ?? []) exprs.push({ from: `panel "${p.title}" ${t.refId}`, expr: substitute(t.expr) });
  }
  // Query variables: label_values(SELECTOR, LABEL) is Grafana's; the selector is PromQL.
  for (const v of dashboard.templating.list.filter((v) => v.type === 'query')) {
    const m = /^label_values\((.+),\s*(\w+)\)$/.exec(v.query);
    assert.ok(m, `variable ${v.name}: ${v.query}`);
    exprs.push({ from: `variable ${v.name}`, expr: substitute(m[1]), label: m[2] });
  }
  const alerts = [];
  for (const file of ruleFiles()) {
    for (const group of readYaml(file).groups) {
      for (const rule of group.rules) {
        if (rule.record) exprs.push({ from: `${path.basename(file)} ${rule.record}`, expr: rule.expr });
        else alerts.push({ from: `${path.basename(file)} ${rule.alert}`, expr: rule.expr });
      }
    }
  }
  assert.ok(exprs.length >= 30, `only ${exprs.length} expressions found`);

  // Wait until the scrapes after the traffic are in and the recording rules
  // have run on them (a deadline, not a timing assertion).
  const deadline = Date.now() + 90_000;
  let empty;
  for (;;) {
    empty = [];
    for (const e of exprs) {
      const { status, body } = await query(e.expr);
      assert.equal(status, 200, `${e.from}: ${e.expr}: HTTP ${status} ${JSON.stringify(body)}`);
      assert.equal(body.status, 'success', `${e.from}: ${e.expr}: ${JSON.stringify(body)}`);
      const result = body.data.result;
      // The rank variable's label only exists with tensor parallelism.
      const ok = result.length > 0 && (e.label !== 'instance' || result.some((r) => r.metric.instance === instance));
      if (!ok) empty.push(`${e.from}: ${e.expr}`);
    }
    const tokens = (await query(`tqserve_generation_tokens_total{instance="${instance}"}`)).body.data.result;
    const scraped = tokens.length === 1 && Number(tokens[0].value[1]) >= 7 * 16 - 16;
    if ((empty.length === 0 && scraped) || Date.now() > deadline) break;
    await sleep(1000);
  }
  assert.deepEqual(empty, [], `expressions without data:\n${empty.join('\n')}\nprometheus log:\n${promLog}`);

  // Values, not just presence: Prometheus saw the daemon's own counters.
  const generated = (await daemon.metrics()).sum('tqserve_generation_tokens_total');
  const promGenerated = Number((await query(`tqserve_generation_tokens_total{instance="${instance}"}`)).body.data.result[0].value[1]);
  assert.equal(promGenerated, generated);
  const up = (await query(`up{job="tqserve"}`)).body.data.result;
  assert.deepEqual(up.map((r) => [r.metric.instance, r.value[1]]), [[instance, '1']]);

  for (const a of alerts) {
    const { status, body } = await query(a.expr);
    assert.equal(status, 200, `${a.from}: ${a.expr}: ${JSON.stringify(body)}`);
    assert.equal(body.status, 'success', `${a.from}`);
  }
  // Nothing is wrong with an idle, healthy daemon: no alert fires.
  const firing = (await query('ALERTS{alertstate="firing"}')).body.data.result;
  assert.deepEqual(firing.map((r) => r.metric.alertname), []);
});
