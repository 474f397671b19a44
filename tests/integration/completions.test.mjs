// POST /v1/completions through the real `openai` npm client: prompt forms,
// streaming, n, logprobs, stop strings, include_usage, seeds, echo, lengths.
// Expected texts come from the published greedy output of the bundled model
// (decoded by the Python sentencepiece library) or from the daemon's own
// non-streamed answer where the property is "streamed == non-streamed".
import assert from 'node:assert/strict';
import { before, test } from 'node:test';

import { collectStream, referenceCompletion, referenceIds, sentencepiece, sseRequest, serveForTests } from './harness.mjs';

const MODEL = 'stories260K';  // the served name defaults to the model directory's name
const PROMPT = 'Once upon a time';
let sp;  // Python sentencepiece results for PROMPT and a second prompt

const srv = serveForTests();

before(async () => {
  sp = sentencepiece({ encode: [PROMPT, 'The little dog'] });
});

const greedy = (extra = {}) => srv.client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 0, ...extra });

test('string prompt: OpenAI shape, greedy text equals the reference, usage counts', async () => {
  const t0 = Math.floor(Date.now() / 1000);
  const r = await greedy();
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /\S/);
  assert.equal(r.model, MODEL);
  assert.ok(Number.isInteger(r.created) && r.created >= t0 - 1 && r.created <= Date.now() / 1000 + 1, `created ${r.created}`);
  assert.equal(r.choices.length, 1);
  const [c] = r.choices;
  assert.equal(c.index, 0);
  assert.equal(c.finish_reason, 'length');
  // The first 16 reference tokens (tq3 KV follows fp32 for ~30 tokens on this model).
  assert.equal(c.text, referenceCompletion(16));
  // BOS + the sentencepiece ids of the prompt (tokenizer_config: add_bos_token).
  // No full 16-token block in a 5-token prompt: nothing can come from the prefix cache.
  assert.deepEqual(r.usage, {
    prompt_tokens: 1 + sp.encode[0].length, completion_tokens: 16, total_tokens: 17 + sp.encode[0].length,
    prompt_tokens_details: { cached_tokens: 0 },
  });
});

test('list of prompts: one choice per prompt, each equal to the prompt sent alone', async () => {
  const alone = [];
  for (const p of [PROMPT, 'The little dog']) alone.push((await greedy({ prompt: p })).choices[0].text);
  const r = await greedy({ prompt: [PROMPT, 'The little dog'] });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.deepEqual(r.choices.map((c) => c.text), alone);
  assert.equal(r.usage.prompt_tokens, 2 + sp.encode[0].length + sp.encode[1].length);
  assert.equal(r.usage.completion_tokens, 32);
});

test('token-id prompts (one list, and a list of lists) are used as given', async () => {
  const text = (await greedy()).choices[0].text;
  const ids = [sp.bos_id, ...sp.encode[0]];
  const r = await greedy({ prompt: ids });
  assert.equal(r.choices[0].text, text);
  assert.equal(r.usage.prompt_tokens, ids.length);
  const both = await greedy({ prompt: [ids, [sp.bos_id, ...sp.encode[1]]] });
  assert.equal(both.choices.length, 2);
  assert.equal(both.choices[0].text, text);
  assert.equal(both.choices[1].text, (await greedy({ prompt: 'The little dog' })).choices[0].text);
});

test('streaming: deltas concatenate to the non-streamed text; chunk shape; [DONE] on the wire', async () => {
  const whole = (await greedy({ max_tokens: 48 })).choices[0];
  const { chunks, texts, finish } = await collectStream(await greedy({ max_tokens: 48, stream: true }));
  assert.equal(texts[0], whole.text);
  assert.equal(finish[0], whole.finish_reason);
  // (The daemon may merge tokens that are ready together into one chunk: the
  // bundled model can finish 48 tokens before the first chunk is written.)
  assert.ok(chunks.length >= 1);
  for (const ch of chunks) {
    assert.equal(ch.object, 'text_completion');
    assert.equal(ch.id, chunks[0].id);
    assert.equal(ch.model, MODEL);
  }
  // finish_reason only on the last choice chunk.
  assert.equal(chunks.filter((ch) => ch.choices.some((c) => c.finish_reason)).length, 1);

  const wire = await sseRequest(`${srv.daemon.baseURL}/completions`, { model: MODEL, prompt: PROMPT, max_tokens: 8, temperature: 0, stream: true });
  assert.equal(wire.status, 200);
  assert.match(wire.headers.get('content-type'), /^text\/event-stream/);
  assert.ok(wire.done, `stream did not end with data: [DONE]:\n${wire.raw}`);
  assert.equal(wire.events.filter((e) => e === '[DONE]').length, 1);
});

test('n=2: two choices; greedy choices are equal, sampled ones are valid and counted', async () => {
  const g = await greedy({ n: 2 });
  assert.deepEqual(g.choices.map((c) => c.index), [0, 1]);
  assert.equal(g.choices[0].text, g.choices[1].text);
  assert.equal(g.usage.completion_tokens, 32);
  const s = await srv.client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 1, n: 2, seed: 7 });
  assert.equal(s.choices.length, 2);
  for (const c of s.choices) assert.ok(['stop', 'length'].includes(c.finish_reason));
  const streamed = await collectStream(await srv.client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0, n: 2, stream: true }));
  assert.equal(streamed.texts.length, 2);
  assert.equal(streamed.texts[0], streamed.texts[1]);
  assert.deepEqual(streamed.finish, ['length', 'length']);
});

test('logprobs=3: shapes, sorted top, chosen = argmax for greedy, probabilities sum <= 1', async () => {
  const r = await greedy({ max_tokens: 12, logprobs: 3 });
  const [c] = r.choices;
  const lp = c.logprobs;
  assert.equal(lp.tokens.length, 12);
  assert.equal(lp.token_logprobs.length, 12);
  assert.equal(lp.top_logprobs.length, 12);
  assert.equal(lp.text_offset.length, 12);
  assert.equal(lp.tokens.join(''), c.text);
  for (let i = 0; i < 12; i++) {
    const top = Object.entries(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3, `position ${i}: ${top.length} top entries`);
    const values = top.map(([, v]) => v);
    const best = Math.max(...values);
    assert.ok(values.every((v) => v <= 0), `position ${i}: positive logprob ${values}`);
    assert.ok(values.reduce((a, v) => a + Math.exp(v), 0) <= 1 + 1e-5, `position ${i}: probabilities sum above 1`);
    // Greedy: the chosen token is the most likely one, and it is in the top list with the same value.
    assert.ok(lp.token_logprobs[i] >= best - 1e-6, `position ${i}: chosen ${lp.token_logprobs[i]} < best ${best}`);
    assert.ok(Math.abs(lp.top_logprobs[i][lp.tokens[i]] - lp.token_logprobs[i]) < 1e-6, `position ${i}: chosen token not in top`);
    if (i > 0) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length);
  }
  // Streamed logprobs agree with the non-streamed ones.
  const { chunks } = await collectStream(await greedy({ max_tokens: 12, logprobs: 3, stream: true }));
  const streamed = chunks.flatMap((ch) => ch.choices.flatMap((x) => x.logprobs?.token_logprobs ?? []));
  assert.deepEqual(streamed, lp.token_logprobs);
});

test('stop strings: text ends just before the earliest stop, finish_reason "stop", streamed too', async () => {
  const whole = (await greedy({ max_tokens: 40 })).choices[0].text;
  // A stop string that spans tokens, one that is a single word, and a list.
  for (const stop of [whole.slice(10, 17), 'Lily', ['park', 'Lily'], ['zzz-never', whole.slice(20, 23)]]) {
    const stops = [stop].flat();
    const cut = Math.min(...stops.map((s) => whole.indexOf(s)).filter((i) => i >= 0));
    assert.ok(Number.isFinite(cut), `none of ${stops} occurs in ${JSON.stringify(whole)}`);
    const r = await greedy({ max_tokens: 40, stop });
    assert.equal(r.choices[0].text, whole.slice(0, cut), `stop ${JSON.stringify(stop)}`);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await collectStream(await greedy({ max_tokens: 40, stop, stream: true }));
    assert.equal(s.texts[0], whole.slice(0, cut), `streamed, stop ${JSON.stringify(stop)}`);
    assert.equal(s.finish[0], 'stop');
  }
  // A stop string that never occurs changes nothing.
  const r = await greedy({ max_tokens: 40, stop: ['qqq'] });
  assert.equal(r.choices[0].text, whole);
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('stop_token_ids end the sequence with finish_reason "stop" at the first such token', async () => {
  // The id of "." from sentencepiece: "Lily." encodes as "Lily" plus one more id.
  const [lily, lilyDot] = sentencepiece({ encode: ['Lily', 'Lily.'] }).encode;
  assert.deepEqual(lilyDot.slice(0, -1), lily);
  const dot = lilyDot.at(-1);
  // The first "." of the reference continuation ("..., named Lily.").
  const generated = referenceIds().slice(4);
  const firstDot = generated.indexOf(dot);
  assert.ok(firstDot >= 0 && firstDot < 30);
  const r = await greedy({ max_tokens: 40, stop_token_ids: [dot] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.usage.completion_tokens, firstDot + 1);
  assert.ok(referenceCompletion(firstDot + 1).startsWith(r.choices[0].text));
  assert.ok(r.choices[0].text.startsWith(referenceCompletion(firstDot)));
});

test('include_usage: exactly one final chunk with usage and empty choices', async () => {
  const whole = await greedy({ max_tokens: 20 });
  const { chunks, texts } = await collectStream(await greedy({ max_tokens: 20, stream: true, stream_options: { include_usage: true } }));
  const withUsage = chunks.filter((ch) => ch.usage);
  assert.equal(withUsage.length, 1);
  assert.equal(chunks.at(-1), withUsage[0]);
  assert.deepEqual(withUsage[0].choices, []);
  assert.deepEqual(withUsage[0].usage, whole.usage);
  assert.equal(texts[0], whole.choices[0].text);
  // Without include_usage no chunk carries usage.
  const plain = await collectStream(await greedy({ max_tokens: 20, stream: true }));
  assert.equal(plain.chunks.filter((ch) => ch.usage).length, 0);
});

test('seed: same seed and temperature 1 give the same text; different seeds differ', async () => {
  const sample = async (seed) =>
    (await srv.client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 32, temperature: 1, seed })).choices[0].text;
  const a = await sample(1234);
  assert.equal(await sample(1234), a);
  const texts = [];
  for (const seed of [1, 2, 3, 4, 5]) texts.push(await sample(seed));
  assert.ok(new Set(texts).size >= 4, `5 seeds gave only ${new Set(texts).size} distinct texts`);
});

test('echo: the text starts with the prompt; with logprobs the first prompt token has null', async () => {
  const plain = (await greedy({ max_tokens: 8 })).choices[0].text;
  const r = await greedy({ max_tokens: 8, echo: true });
  assert.equal(r.choices[0].text, PROMPT + plain);
  const withLp = await greedy({ max_tokens: 8, echo: true, logprobs: 1 });
  const lp = withLp.choices[0].logprobs;
  assert.equal(withLp.choices[0].text, PROMPT + plain);
  assert.equal(lp.token_logprobs[0], null);
  assert.ok(lp.token_logprobs.length >= sp.encode[0].length + 8);
  assert.ok(lp.token_logprobs.slice(1).every((v) => v <= 0));
});

test('max_tokens: finish_reason "length" after exactly max_tokens tokens', async () => {
  for (const n of [1, 5]) {
    const r = await greedy({ max_tokens: n });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, n);
    assert.equal(r.choices[0].text, referenceCompletion(n));
  }
  // ignore_eos (vLLM) is accepted.
  const r = await srv.client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 7, temperature: 0, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 7);
});

test('prefix caching: a repeated prompt reports its cached 16-token blocks; n = 4 computes the prompt once', async () => {
  // BOS + 39 ids: 2 full blocks of 16 before the last token.
  const ids = [sp.bos_id, ...Array.from({ length: 39 }, (_, i) => 300 + i)];
  const first = await greedy({ prompt: ids, max_tokens: 4 });
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
  const again = await greedy({ prompt: ids, max_tokens: 4 });
  assert.equal(again.usage.prompt_tokens_details.cached_tokens, 32);
  assert.equal(again.choices[0].text, first.choices[0].text);
  // n = 4: choice 0 computes the prompt, choices 1..3 attach its 2 blocks.
  const hits = async () => (await srv.daemon.metrics()).sum('tqserve_prefix_cache_hits_total');
  const before = await hits();
  const other = [sp.bos_id, ...Array.from({ length: 39 }, (_, i) => 400 + i)];
  const n4 = await srv.client.completions.create({ model: MODEL, prompt: other, max_tokens: 4, n: 4, temperature: 1, seed: 7 });
  assert.equal(n4.choices.length, 4);
  assert.equal(n4.usage.prompt_tokens_details.cached_tokens, 0);  // the prompt itself was computed once
  assert.equal((await hits()) - before, 3 * 32);
});
