// Anthropic's official TypeScript SDK against `saltus serve` in front of
// `saltus sim` engines (scripts/anthropic-sdk-test.sh starts them and sets
// SALTUS_URL, SALTUS_KEY): what a client written for Anthropic's API, or
// for vLLM's /v1/messages, sees through saltus.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.SALTUS_URL;
const key = process.env.SALTUS_KEY;
assert.ok(base && key, 'SALTUS_URL and SALTUS_KEY must be set (scripts/anthropic-sdk-test.sh)');

const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 20_000 });
const model = 'llama3';

// A long system prompt shared by a conversation's requests: many blocks.
const system = (tag) =>
  `[${tag}] You are the harbour master's assistant at a busy North Sea port. ` +
  'Answer with tide tables, berth numbers, pilot schedules and vessel names where relevant. '.repeat(12);

// route is X-Saltus-Route's matched and total blocks, and its reason.
function route(response) {
  const r = response.headers.get('x-saltus-route');
  assert.ok(r, 'no X-Saltus-Route header');
  const [blocks, reason] = r.split(' ');
  const [matched, total] = blocks.split('/').map(Number);
  return { matched, total, reason, backend: response.headers.get('x-saltus-backend') };
}

test('messages.create', async () => {
  const { data: msg, response } = await client.messages
    .create({ model, max_tokens: 6, system: system('create'), messages: [{ role: 'user', content: 'Which berth is free at dawn?' }] })
    .withResponse();
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, model);
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.equal(msg.content.length, 1);
  assert.equal(msg.content[0].type, 'text');
  assert.equal(msg.content[0].text.split(' ').length, 6);
  assert.equal(msg.usage.output_tokens, 6);
  assert.ok(msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 100, JSON.stringify(msg.usage));
  assert.ok(route(response).total >= 8);
});

test('streaming: text assembled, final usage', async () => {
  const stream = client.messages.stream({
    model,
    max_tokens: 5,
    system: [{ type: 'text', text: system('stream') }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'When is high water?' }] }],
  });
  let text = '';
  stream.on('text', (t) => {
    text += t;
  });
  const final = await stream.finalMessage();
  assert.equal(final.content[0].type, 'text');
  assert.equal(final.content[0].text, text);
  assert.equal(text.split(' ').length, 5);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 5);
  assert.ok(final.usage.input_tokens > 100, JSON.stringify(final.usage));

  // stream: true, the raw events.
  const events = [];
  for await (const ev of await client.messages.create({
    model,
    max_tokens: 3,
    stream: true,
    system: system('stream'),
    messages: [{ role: 'user', content: 'And low water?' }],
  })) {
    events.push(ev.type);
  }
  assert.deepEqual(events, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta',
    'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
});

test('tool use, then a tool_result turn', async () => {
  const tools = [{
    name: 'get_tide',
    description: 'High and low water at a port',
    input_schema: { type: 'object', properties: { port: { type: 'string' } }, required: ['port'] },
  }];
  const messages = [{ role: 'user', content: 'Tides at Rotterdam?' }];
  const first = await client.messages.create({ model, max_tokens: 4, tools, tool_choice: { type: 'any' }, messages });
  assert.equal(first.stop_reason, 'tool_use');
  const use = first.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(first.content));
  assert.equal(use.name, 'get_tide');
  assert.equal(typeof use.input.port, 'string');
  assert.ok(use.id);

  messages.push({ role: 'assistant', content: first.content });
  messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'High water 06:12, low water 12:40.' }] });
  const { data: second, response } = await client.messages.create({ model, max_tokens: 4, tools, messages }).withResponse();
  assert.equal(second.stop_reason, 'max_tokens');
  assert.equal(second.content[0].type, 'text');
  // The conversation so far was routed to the engine that holds it.
  const r = route(response);
  assert.ok(r.total >= 1, JSON.stringify(r));

  // Streamed with a tool call: the SDK assembles its input.
  const streamed = await client.messages.stream({ model, max_tokens: 2, tools, tool_choice: { type: 'tool', name: 'get_tide' }, messages: messages.slice(0, 1) }).finalMessage();
  assert.equal(streamed.content[0].type, 'tool_use');
  assert.equal(typeof streamed.content[0].input.port, 'string');
});

test('a shared system prompt stays on one engine; its hit ratio is the chat route\'s', async () => {
  const turns = ['Is pilot boarding at 04:00?', 'Which tug is free?', 'Where does the Nordlys berth?', 'Any draught limits today?'];
  // Messages: one conversation's system prompt, several questions.
  let mMatched = 0, mTotal = 0, mCached = 0, mPrompt = 0;
  const backends = new Set();
  for (const q of turns) {
    const { data: msg, response } = await client.messages
      .create({ model, max_tokens: 2, system: system('A'), messages: [{ role: 'user', content: q }] })
      .withResponse();
    const r = route(response);
    mMatched += r.matched;
    mTotal += r.total;
    backends.add(r.backend);
    mCached += msg.usage.cache_read_input_tokens ?? 0;
    mPrompt += msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0);
  }
  assert.equal(backends.size, 1, `routed to ${[...backends]}`);
  // The same conversation as chat completions (its own system prompt,
  // of the same length, so that nothing is shared with the above).
  let cMatched = 0, cTotal = 0, cCached = 0, cPrompt = 0;
  for (const q of turns) {
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ model, max_tokens: 2, messages: [{ role: 'system', content: system('B') }, { role: 'user', content: q }] }),
    });
    assert.equal(res.status, 200);
    const body = await res.json();
    const r = route(res);
    cMatched += r.matched;
    cTotal += r.total;
    cCached += body.usage.prompt_tokens_details?.cached_tokens ?? 0;
    cPrompt += body.usage.prompt_tokens;
  }
  const ratio = (a, b) => (b ? a / b : 0);
  console.log(`route hit ratio: messages ${mMatched}/${mTotal} = ${ratio(mMatched, mTotal).toFixed(3)}, chat ${cMatched}/${cTotal} = ${ratio(cMatched, cTotal).toFixed(3)}`);
  console.log(`engine cached ratio: messages ${mCached}/${mPrompt} = ${ratio(mCached, mPrompt).toFixed(3)}, chat ${cCached}/${cPrompt} = ${ratio(cCached, cPrompt).toFixed(3)}`);
  assert.equal(mTotal, cTotal, 'the same conversation has as many blocks either way');
  assert.ok(ratio(mMatched, mTotal) >= ratio(cMatched, cTotal));
  assert.ok(ratio(mCached, mPrompt) >= ratio(cCached, cPrompt));
  assert.ok(ratio(mMatched, mTotal) > 0.5);
});

test('errors parsed by the SDK', async () => {
  await assert.rejects(
    client.messages.create({ model, max_tokens: 0, messages: [{ role: 'user', content: 'x' }] }),
    (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
      assert.equal(e.status, 400);
      assert.equal(e.type, 'invalid_request_error');
      assert.match(e.apiMessage, /^max_tokens: must be positive/);
      return true;
    },
  );
  const stranger = new Anthropic({ baseURL: base, apiKey: 'sk-not-a-key-of-this-gateway', maxRetries: 0 });
  await assert.rejects(
    stranger.messages.create({ model, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    (e) => {
      assert.ok(e instanceof Anthropic.AuthenticationError, `${e}`);
      assert.equal(e.type, 'authentication_error');
      assert.match(e.apiMessage, /^Incorrect API key provided/);
      return true;
    },
  );
  await assert.rejects(
    client.messages.create({ model: 'no-such-model', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    (e) => {
      assert.ok(e instanceof Anthropic.NotFoundError, `${e}`);
      assert.equal(e.type, 'not_found_error');
      assert.match(e.apiMessage, /no-such-model/);
      return true;
    },
  );
});
