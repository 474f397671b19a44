// The gRPC API of `tqserve serve --grpc-port`, driven by clients the project
// did not write: @grpc/grpc-js + @grpc/proto-loader loading
// proto/tqserve/v1/generation.proto, and grpc-health-check's
// grpc.health.v1 definition. Compared with the HTTP API of the same daemon
// (the same engine), the published llama2.c greedy ids and the Python
// sentencepiece library.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, test } from 'node:test';

import { connect, freePort, generate, grpcAddress, healthStatus, rawCall, serviceMethods, Status, unary } from './grpc_client.mjs';
import { referenceIds, sentencepiece, serveForTests, sleep } from './harness.mjs';

// fp32 KV: the published reference is exact fp32 greedy decoding.
const served = serveForTests({ args: ['--grpc-port', String(await freePort()), '--kv-cache-dtype', 'fp32'] });
let grpcClients;
const clients = () => (grpcClients ??= connect(grpcAddress(served.daemon.stderr)));
after(() => grpcClients?.close());

const greedy = (text, max_tokens, extra = {}) => ({ text, sampling: { temperature: 0, max_tokens, ...extra } });

test('health is SERVING after start-up, for the server and the service', async () => {
  const { health } = clients();
  assert.equal(await healthStatus(health, ''), 'SERVING');
  assert.equal(await healthStatus(health, 'tqserve.v1.GenerationService'), 'SERVING');
  await assert.rejects(healthStatus(health, 'no.such.Service'), (e) => e.code === Status.NOT_FOUND);
});

test('greedy Generate of "Once upon a time" matches the reference ids and the HTTP completion token for token', async () => {
  const N = 100;
  const got = await generate(clients().generation, greedy('Once upon a time', N, { logprobs: 0 }));
  assert.equal(got.status, Status.OK, got.details);
  assert.deepEqual(got.token_ids, referenceIds().slice(4, 4 + N));
  // (How many messages carry them depends on timing: the engine can produce
  // all 100 tokens before the handler reads, and deltas then merge.)
  assert.equal(got.last.finish_reason, 'FINISH_REASON_LENGTH');
  assert.deepEqual(got.last.usage, { prompt_tokens: 5, completion_tokens: N, total_tokens: 5 + N, cached_tokens: 0 });

  const http = await served.client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: N, temperature: 0, logprobs: 0,
  });
  const choice = http.choices[0];
  assert.equal(got.text, choice.text);
  assert.equal(http.usage.completion_tokens, got.token_ids.length);
  const positions = got.messages.flatMap((m) => m.logprobs);
  assert.equal(positions.length, N);
  assert.equal(choice.logprobs.tokens.length, N);
  for (let i = 0; i < N; i++) {
    // The same token: its text and its logprob (the HTTP API's float as JSON).
    assert.equal(Buffer.from(positions[i].chosen.token).toString('utf8'), choice.logprobs.tokens[i], `token ${i}`);
    assert.ok(Math.abs(positions[i].chosen.logprob - choice.logprobs.token_logprobs[i]) < 1e-6, `logprob ${i}`);
  }
});

test('streamed deltas concatenate to the non-streamed HTTP text, also with a stop string', async () => {
  for (const stop of [[], ['Lily']]) {
    const got = await generate(clients().generation, greedy('The little dog', 80, { stop }));
    assert.equal(got.status, Status.OK, got.details);
    const http = await served.client.completions.create({
      model: 'stories260K', prompt: 'The little dog', max_tokens: 80, temperature: 0, stop,
    });
    assert.equal(got.text, http.choices[0].text, `stop ${JSON.stringify(stop)}`);
    assert.equal(got.last.usage.completion_tokens, http.usage.completion_tokens);
    if (stop.length && got.last.finish_reason === 'FINISH_REASON_STOP') assert.equal(got.last.stop_string, 'Lily');
  }
});

test('Tokenize agrees with /tokenize and with sentencepiece; Detokenize with /detokenize', async () => {
  const texts = ['Once upon a time', 'naïve café 中文 😀', ' leading space', 'line one\nline two\n', ''];
  const sp = sentencepiece({ encode: texts });
  for (const [i, text] of texts.entries()) {
    const ids = (await unary(clients().generation, 'Tokenize', { text })).token_ids;
    const res = await served.daemon.post('/tokenize', { model: 'stories260K', prompt: text });
    assert.equal(res.status, 200);
    assert.deepEqual(ids, (await res.json()).tokens, text);
    assert.deepEqual(ids, [1, ...sp.encode[i]], text);
    const noBos = await unary(clients().generation, 'Tokenize', { text, add_special_tokens: false });
    assert.deepEqual(noBos.token_ids, sp.encode[i], text);

    const back = await unary(clients().generation, 'Detokenize', { token_ids: ids });
    const httpBack = await served.daemon.post('/detokenize', { model: 'stories260K', tokens: ids });
    assert.equal(back.text, (await httpBack.json()).prompt, text);
  }
});

test('64 concurrent streams give what the same requests give one at a time', async () => {
  const prompts = ['Once upon a time', 'The dog', 'Lily saw a bird', 'Tom was sad', 'One day', 'The big tree', 'A girl named Sue', 'They played'];
  const requests = Array.from({ length: 64 }, (_, i) => ({
    text: prompts[i % 8],
    sampling: i % 2 === 0
      ? { temperature: 0, max_tokens: 8 + ((i * 7) % 57) }
      : { temperature: 0.8, top_k: 40, seed: 1000 + i, max_tokens: 8 + ((i * 7) % 57) },
  }));
  const alone = [];
  for (const r of requests) alone.push(await generate(clients().generation, r));
  const together = await Promise.all(requests.map((r) => generate(clients().generation, r)));
  for (let i = 0; i < requests.length; i++) {
    assert.equal(alone[i].status, Status.OK, alone[i].details);
    assert.equal(together[i].status, Status.OK, together[i].details);
    assert.deepEqual(together[i].token_ids, alone[i].token_ids, `request ${i}`);
    assert.equal(together[i].text, alone[i].text, `request ${i}`);
  }
});

test('invalid requests get INVALID_ARGUMENT or NOT_FOUND naming the field, and the daemon stays up', async () => {
  const cases = [
    ['empty input', {}, Status.INVALID_ARGUMENT, /^input /],
    ['empty text', { text: '' }, Status.INVALID_ARGUMENT, /^text /],
    ['max_tokens -1', greedy('Hi', -1), Status.INVALID_ARGUMENT, /^sampling\.max_tokens /],
    ['top_p 2.0', { text: 'Hi', sampling: { top_p: 2.0 } }, Status.INVALID_ARGUMENT, /^sampling\.top_p /],
    ['unknown model', { model: 'gpt-4', text: 'Hi' }, Status.NOT_FOUND, /^model: /],
  ];
  for (const [name, request, code, message] of cases) {
    const got = await generate(clients().generation, request);
    assert.equal(got.status, code, `${name}: ${got.details}`);
    assert.match(got.details, message, name);
    assert.equal(got.messages.length, 0, name);
  }
  const m = await served.daemon.metrics();
  assert.equal(m.get('tqserve_api_requests_total', { protocol: 'grpc', route: 'Generate', code: 'NOT_FOUND' }), 1);
  assert.ok(m.get('tqserve_api_requests_total', { protocol: 'grpc', route: 'Generate', code: 'INVALID_ARGUMENT' }) >= 4);
  assert.equal(await healthStatus(clients().health), 'SERVING');
  const ok = await generate(clients().generation, greedy('Once upon a time', 4));
  assert.equal(ok.status, Status.OK);
});

test('100 client cancels and 100 50 ms deadlines leave no running request and no used KV block', async () => {
  const long = greedy('Once upon a time', 500, { ignore_eos: true });
  const cancelled = await Promise.all(Array.from({ length: 100 }, () => new Promise((resolve) => {
    const call = clients().generation.Generate(long);
    call.once('data', () => call.cancel());
    call.on('error', () => {});
    call.on('status', (s) => resolve(s.code));
  })));
  assert.deepEqual(new Set(cancelled), new Set([Status.CANCELLED]));
  const expired = await Promise.all(Array.from({ length: 100 }, () => generate(clients().generation, long, { deadlineMs: 50 })));
  assert.deepEqual(new Set(expired.map((r) => r.status)), new Set([Status.DEADLINE_EXCEEDED]));

  // The server sees each cancelled call end as CANCELLED (the client cancels
  // after the first message, so the handler ran), and a deadline as
  // DEADLINE_EXCEEDED or CANCELLED — or not at all when the 50 ms ran out
  // before the call reached a handler (slow builds: sanitizers). A handler
  // counts its call when it returns, which may come a little after the
  // engine freed the request, so wait for the counts too.
  const ended = (m, code) => m.sum('tqserve_api_requests_total', { protocol: 'grpc', route: 'Generate', code });
  const deadline = Date.now() + 5000;
  let m;
  for (;;) {
    m = await served.daemon.metrics();
    const idle = m.get('tqserve_num_requests_running') === 0 && m.get('tqserve_num_requests_waiting') === 0 &&
      m.get('tqserve_kv_cache_blocks_used') === 0;
    if ((idle && ended(m, 'CANCELLED') >= 100) || Date.now() > deadline) break;
    await sleep(20);
  }
  assert.equal(m.get('tqserve_num_requests_running'), 0);
  assert.equal(m.get('tqserve_num_requests_waiting'), 0);
  assert.equal(m.get('tqserve_kv_cache_blocks_used'), 0);
  assert.ok(ended(m, 'CANCELLED') >= 100);
  assert.ok(ended(m, 'CANCELLED') + ended(m, 'DEADLINE_EXCEEDED') <= 200);
});

test('GetServerInfo and ListModels describe the daemon', async () => {
  const info = await unary(clients().generation, 'GetServerInfo', {});
  assert.equal(info.model, 'stories260K');
  assert.equal(info.kv_cache.dtype, 'fp32');
  assert.equal(info.max_model_len, 512);
  assert.equal(info.versions.api, 'tqserve.v1');
  const version = await (await served.daemon.fetch('/version')).json();
  assert.equal(info.versions.tqserve, version.version);
  const models = await unary(clients().generation, 'ListModels', {});
  const http = await served.client.models.list();
  assert.deepEqual(models.models.map((m) => m.id), http.data.map((m) => m.id));
});

test('usage.cached_tokens: the same long prompt again finds its full 16-token blocks in the prefix cache', async () => {
  const text = 'Lily and Ben went to the park. They saw a big red ball under a tree. Lily wanted to play with it, but Ben said';
  const first = await generate(clients().generation, greedy(text, 4));
  assert.equal(first.status, Status.OK, first.details);
  const again = await generate(clients().generation, greedy(text, 4));
  const p = again.last.usage.prompt_tokens;
  assert.ok(p > 32, `prompt of ${p} tokens`);
  assert.equal(again.last.usage.cached_tokens, Math.floor((p - 1) / 16) * 16);
  assert.deepEqual(again.token_ids, first.token_ids);
});

test('sampling.structured_output constrains Generate as the HTTP guided_* fields do; an unsupported keyword is INVALID_ARGUMENT naming it', async () => {
  const sampled = (text, structured_output, seed, max_tokens) => ({
    text, sampling: { temperature: 1, seed, max_tokens, structured_output },
  });
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer' }, ok: { type: 'boolean' } },
    required: ['name', 'age', 'ok'],
    additionalProperties: false,
  };
  for (let seed = 0; seed < 4; seed++) {
    const re = await generate(clients().generation, sampled('Phone:', { regex: '[0-9]{3}-[0-9]{4}' }, seed, 20));
    assert.equal(re.status, Status.OK, re.details);
    assert.match(re.text, /^[0-9]{3}-[0-9]{4}$/, `seed ${seed}`);
    assert.equal(re.last.finish_reason, 'FINISH_REASON_STOP');
    // The same seed through the HTTP API (vLLM's guided_regex): the same text.
    const http = await served.client.completions.create({
      model: 'stories260K', prompt: 'Phone:', max_tokens: 20, temperature: 1, seed, guided_regex: '[0-9]{3}-[0-9]{4}',
    });
    assert.equal(re.text, http.choices[0].text, `seed ${seed}`);

    const choice = await generate(clients().generation, sampled('Yes or no?', { choice: { choices: ['yes', 'no', 'maybe'] } }, seed, 8));
    assert.equal(choice.status, Status.OK, choice.details);
    assert.ok(['yes', 'no', 'maybe'].includes(choice.text), choice.text);

    const js = await generate(clients().generation, sampled('Lily', { json_schema: JSON.stringify(schema) }, seed, 300));
    assert.equal(js.status, Status.OK, js.details);
    assert.equal(js.last.finish_reason, 'FINISH_REASON_STOP', js.text);
    const doc = JSON.parse(js.text);
    assert.deepEqual(Object.keys(doc).sort(), ['age', 'name', 'ok']);
    assert.equal(typeof doc.name, 'string');
    assert.ok([...doc.name].length <= 8, doc.name);
    assert.ok(Number.isInteger(doc.age), js.text);
    assert.equal(typeof doc.ok, 'boolean');
  }
  const bad = await generate(clients().generation, sampled('x', { json_schema: '{"type": "integer", "minimum": 3}' }, 1, 4));
  assert.equal(bad.status, Status.INVALID_ARGUMENT, bad.details);
  assert.match(bad.details, /^sampling\.structured_output\.json_schema .*'minimum'/);
  assert.equal(bad.messages.length, 0);
});

test('malformed protobuf requests get INVALID_ARGUMENT naming the fault, counted in tqserve_api_requests_total', async () => {
  // Each body breaks the protobuf encoding rules
  // (https://protobuf.dev/programming-guides/encoding/) as its comment says;
  // tests/unit/test_grpc_wire.cc checks the server's decoder against
  // libprotobuf's parser. (protobufjs is no oracle here: it decodes several
  // of these without complaint.)
  const bytes = (...b) => Buffer.from(b);
  const cases = [
    // field 2 (text), length 5 but 2 bytes follow
    ['Generate', bytes(0x12, 0x05, 0x48, 0x69), /^malformed GenerateRequest: text \(field 2\): length 5 runs past the end/],
    // field 6 (priority), a varint cut off after its continuation bit
    ['Generate', bytes(0x30, 0x80), /^malformed GenerateRequest: priority \(field 6\): truncated or over-long varint at byte 0$/],
    // field 5 (sampling) holding field 9 (max_tokens) with a truncated varint
    ['Generate', bytes(0x2a, 0x02, 0x48, 0xff), /^malformed GenerateRequest: sampling\.max_tokens \(field 9\): truncated or over-long varint at byte 2$/],
    // field 1 with wire type 7 (there is none)
    ['Tokenize', bytes(0x0f, 0x00), /^malformed TokenizeRequest: model \(field 1\): invalid wire type 7 at byte 0$/],
    // field 1 (model), a string of invalid UTF-8
    ['Detokenize', bytes(0x0a, 0x02, 0xc3, 0x28), /^malformed DetokenizeRequest: model \(field 1\): string is not valid UTF-8 at byte 0$/],
    // an unknown field's varint cut off
    ['ListModels', bytes(0x08), /^malformed ListModelsRequest: field 1: truncated or over-long varint at byte 0$/],
    // field number 0
    ['GetServerInfo', bytes(0x00), /^malformed GetServerInfoRequest: field number 0 is invalid at byte 0$/],
  ];
  const counted = (m, route) => m.sum('tqserve_api_requests_total', { protocol: 'grpc', route, code: 'INVALID_ARGUMENT' });
  const before = await served.daemon.metrics();
  const { generation } = clients();
  for (const [method, body, message] of cases) {
    const got = await rawCall(generation, method, body);
    assert.equal(got.code, Status.INVALID_ARGUMENT, `${method} ${body.toString('hex')}: ${got.details}`);
    assert.match(got.details, message);
    if (got.messages) assert.equal(got.messages.length, 0);
  }
  const after = await served.daemon.metrics();
  for (const method of new Set(cases.map(([m]) => m))) {
    const n = cases.filter(([m]) => m === method).length;
    assert.equal(counted(after, method) - counted(before, method), n, method);
  }
  // The same raw path with valid bytes (protobufjs-encoded) is served as a
  // generated client's call is.
  const request = greedy('Once upon a time', 12);
  const ok = await rawCall(generation, 'Generate', serviceMethods.Generate.requestSerialize(request));
  assert.equal(ok.code, Status.OK, ok.details);
  const decoded = ok.messages.map((m) => serviceMethods.Generate.responseDeserialize(m));
  const viaClient = await generate(generation, request);
  assert.deepEqual(decoded.flatMap((m) => m.token_ids), viaClient.token_ids);
  assert.equal(decoded.map((m) => m.text).join(''), viaClient.text);
  assert.equal(await healthStatus(clients().health), 'SERVING');
});

test('300 open Generate streams hold no thread each: the daemon gains fewer than 32 threads', async () => {
  const N = 300;
  const threads = () => Number(/^Threads:\s+(\d+)/m.exec(readFileSync(`/proc/${served.daemon.proc.pid}/status`, 'utf8'))[1]);
  const long = greedy('Once upon a time', 400, { ignore_eos: true });
  // (The idle count depends on the machine's cores: engine and gRPC pools.)
  const idle = threads();
  const calls = Array.from({ length: N }, () => clients().generation.Generate(long));
  const ended = calls.map((call) => new Promise((resolve) => {
    call.on('data', () => {});
    call.on('error', () => {});
    call.on('status', (s) => resolve(s.code));
  }));
  // Every stream reached the engine (running or waiting for a slot).
  const deadline = Date.now() + 20_000;
  for (;;) {
    const m = await served.daemon.metrics();
    if (m.get('tqserve_num_requests_running') + m.get('tqserve_num_requests_waiting') === N) break;
    assert.ok(Date.now() < deadline, `running ${m.get('tqserve_num_requests_running')}, waiting ${m.get('tqserve_num_requests_waiting')}`);
    await sleep(20);
  }
  const open = threads();
  for (const call of calls) call.cancel();
  assert.deepEqual(new Set(await Promise.all(ended)), new Set([Status.CANCELLED]));
  assert.ok(open - idle < 32, `${open} threads with ${N} streams open, ${idle} before`);
  let m;
  for (const until = Date.now() + 5000; Date.now() < until; await sleep(20)) {
    m = await served.daemon.metrics();
    if (m.get('tqserve_num_requests_running') === 0 && m.get('tqserve_kv_cache_blocks_used') === 0) break;
  }
  assert.equal(m.get('tqserve_num_requests_running'), 0);
  assert.equal(m.get('tqserve_num_requests_waiting'), 0);
  assert.equal(m.get('tqserve_kv_cache_blocks_used'), 0);
});
