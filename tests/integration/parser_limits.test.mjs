// Issue 41, defects 1, 2 and 5, through the real `openai` client and
// @grpc/grpc-js: JSON text nested 100,000 deep inside a string field (was a
// SIGSEGV of the daemon) is a 400 / INVALID_ARGUMENT naming the field and
// the bound; nested bounded repetitions in a regex (were unbounded memory on
// the engine thread and a wedged server) are answered promptly, and so is a
// normal completion sent while they run; what is over the compile budget is
// a 400 naming the budget; (a*)* and (a*)*b (were refused as left-recursive)
// are accepted, and their output matches them.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import OpenAI from 'openai';

import { connect, freePort, generate, grpcAddress, Status } from './grpc_client.mjs';
import { SANITIZED, serveForTests } from './harness.mjs';

const MODEL = 'stories260K';
const srv = serveForTests({ args: ['--grpc-port', String(await freePort())] });
let grpcClients;
const clients = () => (grpcClients ??= connect(grpcAddress(srv.daemon.stderr)));
after(() => grpcClients?.close());
// Seconds a request may take here: a step of the bundled model is ~1 ms.
const PROMPT_S = SANITIZED() ? 30 : 10;

const DEEP = '{"a":'.repeat(100000) + '1' + '}'.repeat(100000);

/** Runs `call` and expects the openai client's BadRequestError naming `param` with `message`. */
async function expect400(what, call, param, message) {
  await assert.rejects(call, (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `${what}: ${err}`);
    assert.equal(err.status, 400, what);
    if (param !== undefined) assert.equal(err.param, param, `${what}: ${JSON.stringify(err.error)}`);
    assert.match(err.error.message, message, what);
    return true;
  }, what);
}

/** Resolves to [result, seconds] of `promise`. */
async function timed(promise) {
  const t0 = performance.now();
  const result = await promise;
  return [result, (performance.now() - t0) / 1000];
}

const completion = (extra) => srv.client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4, ...extra });
const chat = (extra) => srv.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, ...extra });

test('JSON text nested 100,000 deep in a string field is a 400 naming the field and the bound; the daemon lives on', async () => {
  const deep = /is nested more than 64 levels deep/;
  await expect400('guided_json', () => completion({ guided_json: DEEP }), 'guided_json', deep);
  await expect400('completions structured_outputs.json', () => completion({ structured_outputs: { json: DEEP } }), 'structured_outputs.json', deep);
  await expect400('chat structured_outputs.json', () => chat({ structured_outputs: { json: DEEP } }), 'structured_outputs.json', deep);
  await expect400('response_format schema as text',
    () => chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: DEEP } } }), 'response_format.json_schema.schema', deep);
  const messages = [
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: DEEP } }] },
    { role: 'tool', tool_call_id: 'c1', content: 'ok' },
  ];
  await expect400('assistant tool_calls arguments', () => chat({ messages }), 'messages[1].tool_calls[0].function.arguments', deep);
  assert.equal(srv.daemon.exitStatus, undefined, srv.daemon.stderr.slice(-2000));
  const ok = await completion({});
  assert.equal(ok.choices.length, 1);
});

test('gRPC structured_output.json_schema nested 100,000 deep is INVALID_ARGUMENT naming the field', async () => {
  const r = await generate(clients().generation, { text: 'x', sampling: { max_tokens: 4, structured_output: { json_schema: DEEP } } });
  assert.equal(r.status, Status.INVALID_ARGUMENT, r.details);
  assert.equal(r.details, 'sampling.structured_output.json_schema is nested more than 64 levels deep');
  assert.equal(srv.daemon.exitStatus, undefined);
});

test('nested bounded repetitions are answered promptly, and a normal completion sent meanwhile too', async () => {
  const bomb = '((a{0,10}){0,10}){0,10}';
  const runs = [
    timed(completion({ guided_regex: bomb, max_tokens: 24, seed: 1, temperature: 1 })),
    timed(completion({ structured_outputs: { regex: '((((a{0,10}){0,10}){0,10}){0,10}){0,10}' }, max_tokens: 24, seed: 2, temperature: 1 })),
    timed(chat({ response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', pattern: bomb } } }, max_tokens: 24, seed: 3 })),
  ];
  await new Promise((resolve) => setTimeout(resolve, 500));
  const [normal, normalS] = await timed(completion({ max_tokens: 8 }));
  assert.ok(normalS < PROMPT_S, `a normal completion took ${normalS.toFixed(1)} s`);
  assert.equal(normal.choices[0].finish_reason === 'length' || normal.choices[0].finish_reason === 'stop', true);
  const [[a, aS], [b, bS], [c, cS]] = await Promise.all(runs);
  for (const [what, s] of [['regex', aS], ['structured_outputs.regex', bS], ['schema pattern', cS]]) {
    assert.ok(s < PROMPT_S, `${what} took ${s.toFixed(1)} s`);
  }
  // The language is a* (up to 1000 or 10^5 a's): each output is one, or a prefix at max_tokens.
  assert.match(a.choices[0].text, /^a*$/);
  assert.match(b.choices[0].text, /^a*$/);
  assert.match(c.choices[0].message.content, /^"a*"?$/);
});

test('over the compile budget is a 400 naming the budget; the next completion is answered promptly', async () => {
  await expect400('copies', () => completion({ guided_regex: `((${'a'.repeat(300)}){4096}){4096}` }), 'guided_regex',
    /over the compile budget: more than 1048576 grammar elements \(kMaxGrammarElements\)/);
  // "(|)" matches "" in two ways: 15 of them and an "a" reach the "a" in 2^15.
  await expect400('ambiguity', () => completion({ guided_regex: '(|)'.repeat(15) + 'a' }), 'guided_regex',
    /over the compile budget: rule .* reaches its first byte in more than 16384 ways \(kMaxExpansionPaths/);
  await expect400('grammar text', () => completion({ guided_grammar: 'root ::= x0\n' + Array.from({ length: 20 }, (_, i) => `x${i} ::= x${i + 1} x${i + 1}\n`).join('') + 'x20 ::= "" | "" | "a"\n' }),
    'guided_grammar', /over the compile budget: rule .* matches the empty string in more than 16384 ways/);
  const [ok, s] = await timed(completion({ max_tokens: 8 }));
  assert.ok(s < PROMPT_S, `took ${s.toFixed(1)} s`);
  assert.equal(ok.choices.length, 1);
});

test('(a*)* and (a*)*b are valid regexes of the subset: accepted, and the output matches them', async () => {
  for (let seed = 0; seed < 4; seed++) {
    const r = await completion({ guided_regex: '(a*)*b', max_tokens: 40, seed, temperature: 1 });
    const choice = r.choices[0];
    // JavaScript's RegExp as the independent check (the same language as Python's re here).
    if (choice.finish_reason === 'stop') assert.match(choice.text, /^(?:(a*)*b)$/, `seed ${seed}`);
    else assert.match(choice.text, /^a*$/, `seed ${seed}`);
    const star = await completion({ structured_outputs: { regex: '(a*)*' }, max_tokens: 8, seed, temperature: 1 });
    assert.match(star.choices[0].text, /^(?:(a*)*)$/, `seed ${seed}`);
  }
});
