// Errors in OpenAI's format: the `openai` client must raise BadRequestError
// (400) / NotFoundError (404) with the body's message/type/param/code, and no
// bad input may crash or wedge the daemon.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import OpenAI from 'openai';

import { serveForTests } from './harness.mjs';

const MODEL = 'stories260K';
const MAX_LEN = 128;

const srv = serveForTests({ args: ['--max-model-len', String(MAX_LEN)] });

/** Asserts that the error body is OpenAI's: {"error": {message, type, param, code}}. */
function assertErrorBody(body, status, what) {
  assert.ok(body && typeof body.error === 'object', `${what}: no "error" object in ${JSON.stringify(body)}`);
  const e = body.error;
  assert.deepEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type'], `${what}: ${JSON.stringify(e)}`);
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(e.type, status >= 500 ? 'server_error' : 'invalid_request_error', what);
  assert.ok(e.param === null || typeof e.param === 'string');
}

/** Runs `call` through the openai client and expects a BadRequestError. */
async function expect400(what, call, param) {
  await assert.rejects(call, (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `${what}: ${err}`);
    assert.equal(err.status, 400);
    assertErrorBody({ error: err.error }, 400, what);
    if (param) {
      // The field at fault is named, in param or at least in the message.
      assert.ok(err.param === param || err.error.message.includes(param), `${what}: ${param} not named in ${JSON.stringify(err.error)}`);
    }
    return true;
  }, what);
}

const completion = (extra) => srv.client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4, ...extra });
const chat = (extra) => srv.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, ...extra });

test('invalid JSON (plain HTTP) is a 400 in OpenAI format', async () => {
  for (const [route, body] of [['/v1/completions', '{"model": '], ['/v1/chat/completions', 'not json'], ['/v1/completions', '[1, 2]'], ['/tokenize', '{']]) {
    const res = await srv.daemon.post(route, body);
    assert.equal(res.status, 400, `${route} ${body}`);
    assert.match(res.headers.get('content-type'), /application\/json/);
    assertErrorBody(await res.json(), 400, `${route} ${body}`);
  }
});

test('a body that is not UTF-8 is a 400 that says so and where (RFC 8259: JSON text is UTF-8)', async () => {
  for (const route of ['/v1/completions', '/v1/chat/completions']) {
    const body = Buffer.concat([Buffer.from('{"model": "stories260K", "prompt": "ab'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]);
    const res = await srv.daemon.fetch(route, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    assert.equal(res.status, 400, route);
    const err = await res.json();
    assertErrorBody(err, 400, route);
    // 0xc3 opens a 2-byte sequence that '(' (0x28), the byte named, cannot continue.
    assert.equal(err.error.message, `the request body is not valid UTF-8 (at byte ${body.indexOf(0xc3) + 1})`, route);
  }
  const res = await srv.daemon.post('/v1/completions', '{"model": 1,}');
  assert.equal((await res.json()).error.message, `the request body is not valid JSON (at byte ${'{"model": 1,'.length})`);
  // Beyond double's range (docs/api.md: a 400, not an engine failure), in a known field or not.
  for (const body of ['{"prompt": "a", "temperature": 1e999}', '{"prompt": [1, -1e400]}', '{"prompt": "a", "foo": 1e999}']) {
    const big = await srv.daemon.post('/v1/completions', body);
    assert.equal(big.status, 400, body);
    const err = await big.json();
    assertErrorBody(err, 400, body);
    assert.match(err.error.message, /not valid JSON \(a number beyond the range of a double\)/, body);
  }
});

test('out-of-range values are 400s naming the field', async () => {
  await expect400('top_p 2', () => completion({ top_p: 2 }), 'top_p');
  await expect400('n 0', () => completion({ n: 0 }), 'n');
  await expect400('max_tokens -1', () => completion({ max_tokens: -1 }), 'max_tokens');
  await expect400('temperature -1', () => completion({ temperature: -1 }), 'temperature');
  await expect400('chat top_logprobs 21', () => chat({ logprobs: true, top_logprobs: 21 }), 'top_logprobs');
  await expect400('token id out of range', () => completion({ prompt: [1, 100000] }), 'prompt');
  // An empty string is a valid prompt (BOS alone, as in vLLM and OpenAI); no tokens at all is not.
  await expect400('empty token list', () => completion({ prompt: [] }), 'prompt');
  await expect400('empty messages', () => chat({ messages: [] }), 'messages');
  await expect400('unknown role', () => chat({ messages: [{ role: 'wizard', content: 'x' }] }), 'role');
});

test('a streaming request with a bad parameter gets a plain 400, not a stream', async () => {
  await expect400('stream + top_p 2', () => completion({ stream: true, top_p: 2 }), 'top_p');
  const res = await srv.daemon.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], stream: true, n: 0 });
  assert.equal(res.status, 400);
  assertErrorBody(await res.json(), 400, 'chat stream n 0');
});

// OpenAI's API answers an unknown model with 404 model_not_found (the openai
// client's NotFoundError), as vLLM does.
test('an unknown model is a 404 model_not_found', async () => {
  for (const [what, call] of [
    ['unknown model', () => completion({ model: 'gpt-4o' })],
    ['unknown model (chat)', () => chat({ model: 'nope' })],
  ]) {
    await assert.rejects(call, (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `${what}: ${err}`);
      assert.equal(err.status, 404);
      assertErrorBody({ error: err.error }, 404, what);
      assert.equal(err.error.code, 'model_not_found', what);
      assert.equal(err.error.param, 'model', what);
      return true;
    }, what);
  }
});

test('a prompt longer than max-model-len, or prompt + max_tokens too long, is a 400', async () => {
  const long = Array.from({ length: MAX_LEN + 10 }, (_, i) => 300 + (i % 100));
  await expect400('prompt > max-model-len (ids)', () => completion({ prompt: long, max_tokens: 1 }), 'prompt');
  await expect400('prompt > max-model-len (text)', () => completion({ prompt: 'Once upon a time '.repeat(60), max_tokens: 1 }));
  const fits = long.slice(0, MAX_LEN - 20);
  await expect400('prompt + max_tokens > max-model-len', () => completion({ prompt: fits, max_tokens: 40 }));
  // The same prompt with room for its max_tokens is fine.
  const ok = await completion({ prompt: fits, max_tokens: 20, ignore_eos: true });
  assert.equal(ok.usage.prompt_tokens + ok.usage.completion_tokens, MAX_LEN);
});

test('wrong types are 400s', async () => {
  await expect400('temperature "hot"', () => completion({ temperature: 'hot' }), 'temperature');
  await expect400('prompt 42', () => completion({ prompt: 42 }), 'prompt');
  await expect400('messages "hi"', () => chat({ messages: 'hi' }), 'messages');
  await expect400('stop 5', () => completion({ stop: 5 }), 'stop');
  await expect400('max_tokens 1.5', () => completion({ max_tokens: 1.5 }), 'max_tokens');
  await expect400('stream "yes"', () => completion({ stream: 'yes' }), 'stream');
  await expect400('content 7', () => chat({ messages: [{ role: 'user', content: 7 }] }), 'content');
  await expect400('logprobs "many"', () => completion({ logprobs: 'many' }), 'logprobs');
});

test('unknown fields are accepted and ignored', async () => {
  const r = await completion({ temperature: 0, some_future_field: { a: 1 }, user: 'tester' });
  assert.equal(r.choices.length, 1);
});

test('unknown routes are 404 with an error body', async () => {
  await assert.rejects(srv.client.get('/no/such/route'), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal(err.status, 404);
    return true;
  });
  const res = await srv.daemon.fetch('/v1/nothing');
  assert.equal(res.status, 404);
  assertErrorBody(await res.json(), 404, 'GET /v1/nothing');
});

test('after all of that the daemon still serves', async () => {
  assert.equal((await srv.daemon.fetch('/health')).status, 200);
  const r = await completion({ temperature: 0 });
  assert.equal(r.usage.completion_tokens, 4);
});
