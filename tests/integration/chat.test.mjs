// POST /v1/chat/completions through the real `openai` npm client. The bundled
// model has no chat template, so the daemon uses its documented plain fallback
// (docs/chat.md: the contents joined by a blank line, BOS first); these tests
// check the OpenAI shapes, streaming, logprobs and content forms, and that the
// fallback prompt is what the documentation says (token counts from the
// Python sentencepiece library, the greedy text from the reference output).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { collectStream, referenceCompletion, sentencepiece, serveForTests } from './harness.mjs';

const MODEL = 'stories260K';
const USER = { role: 'user', content: 'Tell me a story about a cat.' };

const srv = serveForTests();

const chat = (extra = {}) => srv.client.chat.completions.create({ model: MODEL, messages: [USER], max_tokens: 24, temperature: 0, ...extra });

test('chat completion: OpenAI shape, assistant message, usage', async () => {
  const r = await chat();
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /\S/);
  assert.equal(r.model, MODEL);
  assert.ok(Number.isInteger(r.created));
  assert.equal(r.choices.length, 1);
  const [c] = r.choices;
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 24);
  assert.ok(r.usage.prompt_tokens > 8);
});

test('content as an array of text parts equals the parts joined with a newline', async () => {
  const parts = await chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me' }, { type: 'text', text: 'a story.' }] }] });
  const joined = await chat({ messages: [{ role: 'user', content: 'Tell me\na story.' }] });
  assert.equal(parts.choices[0].message.content, joined.choices[0].message.content);
  assert.equal(parts.usage.prompt_tokens, joined.usage.prompt_tokens);
});

test('system, user and assistant turns are accepted; more context means more prompt tokens', async () => {
  const one = await chat();
  const multi = await chat({
    messages: [
      { role: 'system', content: 'You tell short stories.' },
      { role: 'user', content: 'Hello' },
      { role: 'assistant', content: 'Hi! What story?' },
      USER,
    ],
  });
  assert.equal(multi.choices[0].message.role, 'assistant');
  assert.ok(multi.usage.prompt_tokens > one.usage.prompt_tokens + 8);
});

test('streaming: role first, deltas concatenate to the non-streamed content, include_usage', async () => {
  const whole = await chat({ max_tokens: 40 });
  const s = await srv.client.chat.completions.create({
    model: MODEL, messages: [USER], max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const { chunks, texts, finish } = await collectStream(s);
  assert.equal(texts[0], whole.choices[0].message.content);
  assert.equal(finish[0], whole.choices[0].finish_reason);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  for (const ch of chunks) {
    assert.equal(ch.object, 'chat.completion.chunk');
    assert.equal(ch.id, chunks[0].id);
  }
  const withUsage = chunks.filter((ch) => ch.usage);
  assert.equal(withUsage.length, 1);
  assert.equal(withUsage[0], chunks.at(-1));
  assert.deepEqual(withUsage[0].choices, []);
  // The same prompt again: its full 16-token blocks come from the prefix cache.
  const { prompt_tokens_details: cached, ...counts } = withUsage[0].usage;
  const { prompt_tokens_details: _, ...wholeCounts } = whole.usage;  // eslint-disable-line no-unused-vars
  assert.deepEqual(counts, wholeCounts);
  assert.equal(cached.cached_tokens, Math.floor((whole.usage.prompt_tokens - 1) / 16) * 16);
});

test('logprobs + top_logprobs=3: shapes, sorted, greedy chosen token = top[0], bytes, sum <= 1', async () => {
  const r = await chat({ max_tokens: 12, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  assert.equal(content.map((t) => t.token).join(''), r.choices[0].message.content);
  for (const [i, t] of content.entries()) {
    assert.ok(t.logprob <= 0);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')], `position ${i}: bytes`);
    assert.ok(t.top_logprobs.length >= 1 && t.top_logprobs.length <= 3);
    const values = t.top_logprobs.map((x) => x.logprob);
    assert.deepEqual(values, [...values].sort((a, b) => b - a), `position ${i}: top not sorted`);
    assert.ok(values.reduce((a, v) => a + Math.exp(v), 0) <= 1 + 1e-5);
    assert.equal(t.top_logprobs[0].token, t.token, `position ${i}: greedy token is not the argmax`);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
  }
  // Streamed logprobs agree.
  const s = await srv.client.chat.completions.create({
    model: MODEL, messages: [USER], max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3, stream: true,
  });
  const { chunks } = await collectStream(s);
  const streamed = chunks.flatMap((ch) => ch.choices.flatMap((c) => c.logprobs?.content ?? []));
  assert.deepEqual(streamed.map((t) => [t.token, t.logprob]), content.map((t) => [t.token, t.logprob]));
  // logprobs without top_logprobs: chosen token only.
  const plain = await chat({ max_tokens: 4, logprobs: true });
  for (const t of plain.choices[0].logprobs.content) assert.deepEqual(t.top_logprobs, []);
});

test('n=2, max_completion_tokens and stop in chat', async () => {
  const two = await chat({ n: 2 });
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  assert.equal(two.choices[0].message.content, two.choices[1].message.content);
  const short = await srv.client.chat.completions.create({ model: MODEL, messages: [USER], max_completion_tokens: 5, temperature: 0 });
  assert.equal(short.usage.completion_tokens, 5);
  assert.equal(short.choices[0].finish_reason, 'length');
  const whole = (await chat({ max_tokens: 40, ignore_eos: true })).choices[0].message.content;
  const stop = whole.slice(12, 16);
  const cut = whole.indexOf(stop);
  const stopped = await chat({ max_tokens: 40, ignore_eos: true, stop });
  assert.equal(stopped.choices[0].message.content, whole.slice(0, cut));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
});

test('the plain fallback: contents joined by a blank line after BOS; a lone user turn equals the completion', async () => {
  const turns = ['You tell short stories.', 'Hello', 'Hi! What story?', USER.content];
  const roles = ['system', 'user', 'assistant', 'user'];
  const r = await chat({ messages: turns.map((content, i) => ({ role: roles[i], content })) });
  const [ids] = sentencepiece({ encode: [turns.join('\n\n')] }).encode;
  assert.equal(r.usage.prompt_tokens, 1 + ids.length);
  // {"role": "user", "content": "Once upon a time"} is the completions prompt, so greedy
  // decoding follows the published reference (tq3 KV follows fp32 for ~30 tokens here).
  const story = await chat({ messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 20 });
  assert.equal(story.usage.prompt_tokens, 5);
  assert.equal(story.choices[0].message.content, referenceCompletion(20));
});
