// API keys and browser-facing safety (issue 20 items 1 and 4) on a real
// daemon: the real `openai` client with the right key, a wrong key and none;
// raw fetch for the open routes and the 401 shape; @grpc/grpc-js with and
// without `authorization` metadata; keys from --api-key (twice),
// TQSERVE_API_KEY and --api-key-file; 401s counted; JSON-only POSTs, the
// --allowed-origins CORS policy, --allowed-hosts, and no model path or
// library versions in /v1/models, /metrics and GetServerInfo.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, test } from 'node:test';

import grpcJs from '@grpc/grpc-js';

import { connect, freePort, generate, grpcAddress, healthStatus, Status, unary } from './grpc_client.mjs';
import { errorOf, serveForTests, WORK_DIR } from './harness.mjs';

const KEY = 'sk-test-4f1c2a';
const SECOND = 'sk-second-key';
const FILE_KEY = 'sk-from-secret-file';
const ENV_KEY = 'sk-from-env';
const keyFile = path.join(WORK_DIR(), 'api-key');
fs.writeFileSync(keyFile, `${FILE_KEY}\n`);
process.env.TQSERVE_API_KEY = ENV_KEY; // the daemon inherits it
const served = serveForTests({
  args: [
    '--grpc-port', String(await freePort()), '--api-key', KEY, '--api-key', SECOND, '--api-key-file', keyFile,
    '--allowed-origins', 'https://app.example', '--allowed-hosts', '127.0.0.1',
  ],
});
let grpcClients;
const grpc = () => (grpcClients ??= connect(grpcAddress(served.daemon.stderr)));
after(() => grpcClients?.close());

const withKey = (key) => served.daemon.client({ apiKey: key });
const ask = (client) => client.completions.create({ model: 'stories260K', prompt: 'Once', max_tokens: 2 });

test('every accepted key works with the openai client', async () => {
  for (const key of [KEY, SECOND, FILE_KEY, ENV_KEY]) {
    const res = await ask(withKey(key));
    assert.equal(res.choices.length, 1, key);
  }
  const chat = await withKey(KEY).chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  assert.equal(chat.choices.length, 1);
  const models = await withKey(KEY).models.list();
  assert.equal(models.data[0].id, 'stories260K');
});

test('a wrong or missing key is 401 invalid_api_key, counted', async () => {
  const before = (await served.daemon.metrics()).sum('tqserve_requests_refused_total', { reason: 'unauthorized' });
  for (const key of ['wrong', `${KEY}x`, KEY.slice(0, -1)]) {
    const e = await errorOf(ask(withKey(key)));
    assert.equal(e.status, 401, key);
    assert.equal(e.code, 'invalid_api_key');
    assert.equal(e.type, 'invalid_request_error');
  }
  const e = await errorOf(withKey(KEY).models.list({ headers: { Authorization: null } }));
  assert.equal(e.status, 401);
  // No Authorization at all (raw fetch), and the other protected routes.
  for (const [route, body] of [['/v1/completions', { prompt: 'x' }], ['/tokenize', { prompt: 'x' }], ['/detokenize', { tokens: [1] }]]) {
    const res = await served.daemon.post(route, body);
    assert.equal(res.status, 401, route);
    assert.equal(res.headers.get('www-authenticate'), 'Bearer');
    const json = await res.json();
    assert.equal(json.error.code, 'invalid_api_key');
    assert.match(json.error.message, /Authorization header using Bearer/);
  }
  const models = await served.daemon.fetch('/v1/models', { headers: { Authorization: `Basic ${KEY}` } });
  assert.equal(models.status, 401);
  await models.arrayBuffer();
  const m = await served.daemon.metrics();
  assert.equal(m.sum('tqserve_requests_refused_total', { reason: 'unauthorized' }) - before, 8);
  assert.ok(m.sum('tqserve_api_requests_total', { protocol: 'http', code: '401' }) >= 8);
});

test('/health, /livez, /metrics and /version stay open', async () => {
  for (const route of ['/health', '/livez', '/metrics', '/version']) {
    const res = await served.daemon.fetch(route);
    assert.equal(res.status, 200, route);
    await res.arrayBuffer();
  }
});

test('gRPC calls need the key in authorization metadata; health stays open', async () => {
  const { generation, health } = grpc();
  assert.equal(await healthStatus(health, ''), 'SERVING');
  const metadata = (key) => {
    const md = new grpcJs.Metadata();
    if (key !== undefined) md.set('authorization', `Bearer ${key}`);
    return md;
  };
  const call = (method, request, md) =>
    new Promise((resolve, reject) => generation[method](request, md, { deadline: Date.now() + 30_000 }, (err, r) => (err ? reject(err) : resolve(r))));
  const ok = await call('Tokenize', { text: 'Once upon a time' }, metadata(KEY));
  assert.equal(ok.count, 5);
  for (const md of [metadata(undefined), metadata('wrong')]) {
    const e = await errorOf(call('Tokenize', { text: 'x' }, md));
    assert.equal(e.code, Status.UNAUTHENTICATED);
    const info = await errorOf(call('GetServerInfo', {}, md));
    assert.equal(info.code, Status.UNAUTHENTICATED);
  }
  const e = await errorOf(unary(generation, 'ListModels', {}));
  assert.equal(e.code, Status.UNAUTHENTICATED);
  const g = await generate(generation, { text: 'Once', sampling: { max_tokens: 2 } });
  assert.equal(g.status, Status.UNAUTHENTICATED);
  const m = await served.daemon.metrics();
  assert.ok(m.sum('tqserve_requests_refused_total', { protocol: 'grpc', reason: 'unauthorized' }) >= 6);
});

test('generation POSTs take only application/json (415 otherwise)', async () => {
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data']) {
    const res = await served.daemon.post('/v1/completions', '{"prompt": "Once", "max_tokens": 1}', {
      'content-type': type, authorization: `Bearer ${KEY}`,
    });
    assert.equal(res.status, 415, type);
    assert.equal((await res.json()).error.code, 'unsupported_media_type');
  }
  const ok = await served.daemon.post('/v1/completions', { prompt: 'Once', max_tokens: 1 }, {
    'content-type': 'application/json; charset=utf-8', authorization: `Bearer ${KEY}`,
  });
  assert.equal(ok.status, 200);
  await ok.arrayBuffer();
});

test('CORS follows --allowed-origins: preflight, allowed origin, refused origin', async () => {
  const pre = await served.daemon.fetch('/v1/chat/completions', {
    method: 'OPTIONS',
    headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
  });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), 'https://app.example');
  assert.match(pre.headers.get('access-control-allow-headers'), /Authorization/);
  const res = await served.daemon.post('/v1/completions', { prompt: 'Once', max_tokens: 1 }, {
    origin: 'https://app.example', authorization: `Bearer ${KEY}`,
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('access-control-allow-origin'), 'https://app.example');
  await res.arrayBuffer();
  const evil = await served.daemon.post('/v1/completions', { prompt: 'Once' }, { origin: 'https://evil.example', authorization: `Bearer ${KEY}` });
  assert.equal(evil.status, 403);
  assert.equal(evil.headers.get('access-control-allow-origin'), null);
  await evil.arrayBuffer();
});

/** Sends `head` (a request head, CRLFs included) and resolves to the response's status code. */
function rawStatus(port, head) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    socket.setEncoding('latin1');
    socket.on('data', (d) => (data += d));
    socket.on('end', () => resolve(Number(/^HTTP\/1\.[01] (\d+)/.exec(data)?.[1])));
    socket.on('error', reject);
    socket.write(head);
  });
}

function rawGet(port, route, host) {
  return rawStatus(port, `GET ${route} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
}

test('--allowed-hosts refuses other Host headers (DNS rebinding)', async () => {
  assert.equal(await rawGet(served.daemon.port, '/version', `127.0.0.1:${served.daemon.port}`), 200);
  assert.equal(await rawGet(served.daemon.port, '/version', 'rebind.evil.example'), 403);
  assert.equal(await rawGet(served.daemon.port, '/metrics', 'rebind.evil.example:8000'), 403);
});

// RFC 9112 section 3.2: "A server MUST respond with a 400 (Bad Request) status
// code to any HTTP/1.1 request message that lacks a Host header field and to
// any request message that contains more than one Host header field line".
// The allowed Host first must not carry an evil second one past --allowed-hosts.
test('two Host headers, or none in HTTP/1.1, get 400 (RFC 9112 section 3.2)', async () => {
  const port = served.daemon.port;
  const allowed = `127.0.0.1:${port}`;
  for (const [first, second] of [[allowed, 'evil.example'], ['evil.example', allowed], [allowed, allowed]]) {
    const head = `GET /version HTTP/1.1\r\nHost: ${first}\r\nHost: ${second}\r\nConnection: close\r\n\r\n`;
    assert.equal(await rawStatus(port, head), 400, `Host: ${first} + Host: ${second}`);
  }
  assert.equal(await rawStatus(port, 'GET /version HTTP/1.1\r\nConnection: close\r\n\r\n'), 400, 'no Host');
  assert.equal(await rawStatus(port, 'GET /version HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n'), 400, 'Host: a b');
  // HTTP/1.0 needs no Host; with --allowed-hosts set, no Host is no allowed host.
  assert.equal(await rawStatus(port, 'GET /version HTTP/1.0\r\n\r\n'), 403, 'HTTP/1.0 without Host');
  assert.equal(await rawStatus(port, `GET /version HTTP/1.0\r\nHost: ${allowed}\r\n\r\n`), 200, 'HTTP/1.0 with Host');
  const refused = (await served.daemon.metrics()).get('tqserve_requests_refused_total', { protocol: 'http', reason: 'host_header' });
  assert.equal(refused, 5);
});

// RFC 9112 section 3.2.2: a server MUST accept the absolute form, and an
// origin server "MUST ignore the received Host header field (if any) and
// instead use the host information of the request-target": the target's
// authority is what --allowed-hosts checks then.
test('absolute-form targets are served; their authority is checked by --allowed-hosts (RFC 9112 section 3.2.2)', async () => {
  const port = served.daemon.port;
  const absolute = (authority, route, host) =>
    rawStatus(port, `GET http://${authority}${route} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  assert.equal(await absolute(`127.0.0.1:${port}`, '/version', `127.0.0.1:${port}`), 200);
  assert.equal(await absolute(`127.0.0.1:${port}`, '/health', 'evil.example'), 200, 'the authority replaces Host');
  assert.equal(await absolute('evil.example', '/version', `127.0.0.1:${port}`), 403, 'the authority is checked');
  assert.equal(await absolute(`127.0.0.1:${port}`, '/nope', `127.0.0.1:${port}`), 404);
  assert.equal(await absolute('', '/version', `127.0.0.1:${port}`), 400, 'no authority');
  // The API key rules see the absolute form's path.
  assert.equal(await absolute(`127.0.0.1:${port}`, '/v1/models', `127.0.0.1:${port}`), 401);
  const models = await rawStatus(port, `GET HTTP://127.0.0.1:${port}/v1/models?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`);
  assert.equal(models, 200);
});

test('no model directory path in /v1/models and /metrics, no library versions over gRPC', async () => {
  const models = await withKey(KEY).models.list();
  assert.equal(models.data[0].root, 'stories260K');
  const metrics = await served.daemon.metrics();
  assert.ok(!metrics.text.includes('/models/stories260K'), 'the model path is in /metrics');
  assert.equal(metrics.get('tqserve_info', {}) !== undefined, true);
  const md = new grpcJs.Metadata();
  md.set('authorization', `Bearer ${KEY}`);
  const info = await new Promise((resolve, reject) =>
    grpc().generation.GetServerInfo({}, md, { deadline: Date.now() + 30_000 }, (err, r) => (err ? reject(err) : resolve(r))));
  assert.equal(info.model, 'stories260K');
  assert.equal(info.versions.grpc, '');
  assert.equal(info.versions.protobuf, '');
  assert.equal(info.versions.api, 'tqserve.v1');
  assert.ok(!info.model_dir.includes('/'), info.model_dir);
});
