// GET /v1/models, POST /tokenize and /detokenize, GET /health and /version,
// and --served-model-name. Token ids are checked against the Python
// sentencepiece library.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';

import { sentencepiece, serveForTests } from './harness.mjs';

const NAME = 'my-stories';
const TEXTS = ['Once upon a time', 'Hello, world! (yes?)', ' leading space', 'line one\nline two', 'naïve café 中文 😀', '0123456789 42'];
let sp;

const srv = serveForTests({ args: ['--served-model-name', NAME, '--max-model-len', '384'] });

before(async () => {
  sp = sentencepiece({ encode: TEXTS });
  sp.roundTrip = sentencepiece({ decode: sp.encode }).decode;
});

test('/v1/models lists the served model name', async () => {
  const models = [];
  for await (const m of srv.client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, NAME);
  assert.equal(models[0].object, 'model');
  assert.equal(typeof models[0].owned_by, 'string');
  assert.ok(Number.isInteger(models[0].created));
  const raw = await (await srv.daemon.fetch('/v1/models')).json();
  assert.equal(raw.object, 'list');
  // The served name is the one requests must use.
  const r = await srv.client.completions.create({ model: NAME, prompt: 'Once', max_tokens: 2 });
  assert.equal(r.model, NAME);
});

test('/tokenize gives the sentencepiece ids (BOS first unless add_special_tokens is false)', async () => {
  for (const [i, text] of TEXTS.entries()) {
    const withBos = await (await srv.daemon.post('/tokenize', { model: NAME, prompt: text })).json();
    assert.deepEqual(withBos.tokens, [sp.bos_id, ...sp.encode[i]], `tokenize ${JSON.stringify(text)}`);
    assert.equal(withBos.count, sp.encode[i].length + 1);
    assert.equal(withBos.max_model_len, 384);
    const plain = await (await srv.daemon.post('/tokenize', { prompt: text, add_special_tokens: false })).json();
    assert.deepEqual(plain.tokens, sp.encode[i], `tokenize without BOS ${JSON.stringify(text)}`);
  }
});

test('/detokenize inverts /tokenize as sentencepiece decodes', async () => {
  for (const [i, ids] of sp.encode.entries()) {
    const res = await srv.daemon.post('/detokenize', { model: NAME, tokens: ids });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.prompt, sp.roundTrip[i]);
  }
  const bad = await srv.daemon.post('/detokenize', { tokens: [1, 99999] });
  assert.equal(bad.status, 400);
});

test('/health is 200 with the model loaded; /version names the version', async () => {
  assert.equal((await srv.daemon.fetch('/health')).status, 200);
  const v = await srv.daemon.fetch('/version');
  assert.equal(v.status, 200);
  assert.match((await v.json()).version, /^\d+\.\d+\.\d+/);
});
