// Official Node SDKs against a live llmgate gateway. The Go test
// TestNodeSDKs_AgainstLiveGateway (test/conformance/node_test.go) starts the
// gateway in front of the simulator ("sim") and scripted OpenAI ("oa-*") and
// Anthropic ("an-*") upstreams, then runs `node --test` here with:
//   LLMGATE_BASE_URL    http://127.0.0.1:PORT (no /v1)
//   LLMGATE_API_KEY     a virtual key allowed every model
//   LLMGATE_NARROW_KEY  a virtual key allowed only "sim"
// The scripted scenarios and their fixed answers are described in
// test/conformance/fakes_test.go; the constants below must match it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const base = process.env.LLMGATE_BASE_URL;
const key = process.env.LLMGATE_API_KEY;
const narrowKey = process.env.LLMGATE_NARROW_KEY;
if (!base || !key || !narrowKey) {
  throw new Error('set LLMGATE_BASE_URL, LLMGATE_API_KEY and LLMGATE_NARROW_KEY (go test ./test/conformance does)');
}

const TEXT = 'Hello from the scripted upstream.';
const TOOL_RESULT = '{"city":"Paris","temperature":"18C","sky":"clear"}';
const TOOL_ANSWER = 'It is 18C and clear in Paris.';
const TOOL_RESULT_2 = '{"city":"Tokyo","temperature":"22C","sky":"rain"}';
const TOOLS2_ANSWER = 'Paris: 18C and clear; Tokyo: 22C and rain.';
// The tool scenarios: one call, and two parallel calls.
const toolScenarios = {
  tool: { cities: ['Paris'], answer: TOOL_ANSWER },
  tools2: { cities: ['Paris', 'Tokyo'], answer: TOOLS2_ANSWER },
};
const weatherResult = { Paris: TOOL_RESULT, Tokyo: TOOL_RESULT_2 };
const THINKING = 'The user greets me; I should greet back.';
const PROMPT_TOKENS = 21;
const COMPLETION_TOKENS = 7;

const backends = [
  { prefix: 'sim', scripted: false },
  { prefix: 'oa', scripted: true },
  { prefix: 'an', scripted: true },
];
const scripted = backends.filter((b) => b.scripted);
const model = (b, scenario) => (b.scripted ? `${b.prefix}-${scenario}` : 'sim');
const modes = [false, true];
const modeName = (stream) => (stream ? 'streaming' : 'non-streaming');

const anthropic = (apiKey = key) => new Anthropic({ baseURL: base, apiKey, maxRetries: 0, timeout: 30_000 });
const openai = (apiKey = key) => new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });

// ---------------- Anthropic SDK ----------------

const weatherTool = {
  name: 'get_weather',
  description: 'Current weather for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

function messagesParams(m, prompt) {
  return { model: m, max_tokens: 64, system: 'You are a terse assistant.', messages: [{ role: 'user', content: prompt }] };
}

// anthropicTurn returns the final message; streaming goes through the SDK's
// MessageStream (the accumulator Claude Code relies on) and checks the
// event grammar.
async function anthropicTurn(client, params, stream) {
  if (!stream) {
    const msg = await client.messages.create(params);
    assert.equal(typeof msg.usage?.input_tokens, 'number', 'usage.input_tokens');
    assert.equal(typeof msg.usage?.output_tokens, 'number', 'usage.output_tokens');
    assert.ok(msg.stop_reason, 'stop_reason');
    return msg;
  }
  const s = client.messages.stream(params);
  const types = [];
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === 'message_start') {
      assert.equal(typeof ev.message.usage?.input_tokens, 'number', 'message_start.message.usage.input_tokens');
      assert.equal(typeof ev.message.usage?.output_tokens, 'number', 'message_start.message.usage.output_tokens');
    }
    if (ev.type === 'message_delta') {
      assert.ok(ev.delta.stop_reason, 'message_delta.delta.stop_reason');
      assert.equal(typeof ev.usage?.output_tokens, 'number', 'message_delta.usage.output_tokens');
    }
  }
  assert.equal(types.filter((t) => t === 'message_start').length, 1, `exactly one message_start in ${types}`);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.ok(types.includes('content_block_delta'), 'the answer was streamed');
  return s.finalMessage();
}

const textOf = (msg) => msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

for (const b of backends) {
  for (const stream of modes) {
    test(`anthropic sdk: text from ${b.prefix}, ${modeName(stream)}`, async () => {
      const msg = await anthropicTurn(anthropic(), messagesParams(model(b, 'text'), 'Say hello'), stream);
      assert.equal(msg.role, 'assistant');
      if (!b.scripted) {
        assert.ok(textOf(msg).length > 0);
        assert.ok(msg.usage.output_tokens > 0 && msg.usage.output_tokens <= 64);
        assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason));
        return;
      }
      assert.equal(textOf(msg), TEXT);
      assert.equal(msg.stop_reason, 'end_turn');
      assert.equal(msg.usage.input_tokens, PROMPT_TOKENS);
      assert.equal(msg.usage.output_tokens, COMPLETION_TOKENS);
    });
  }
}

for (const b of scripted) {
  for (const stream of modes) {
    for (const [scenario, want] of Object.entries(toolScenarios)) {
      test(`anthropic sdk: ${scenario} round trip on ${b.prefix}, ${modeName(stream)}`, async () => {
        const client = anthropic();
        const params = { ...messagesParams(model(b, scenario), 'What is the weather in Paris and Tokyo?'), tools: [weatherTool] };
        const first = await anthropicTurn(client, params, stream);
        assert.equal(first.stop_reason, 'tool_use');
        const uses = first.content.filter((c) => c.type === 'tool_use');
        assert.deepEqual(uses.map((u) => u.input.city), want.cities, 'tool inputs parsed by the SDK');
        for (const u of uses) assert.equal(u.name, 'get_weather');
        params.messages = [
          ...params.messages,
          { role: 'assistant', content: first.content },
          { role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: weatherResult[u.input.city] })) },
        ];
        const second = await anthropicTurn(client, params, stream);
        assert.equal(textOf(second), want.answer);
        assert.equal(second.stop_reason, 'end_turn');
      });
    }

    test(`anthropic sdk: thinking blocks from ${b.prefix}, ${modeName(stream)}`, async () => {
      const msg = await anthropicTurn(anthropic(), messagesParams(model(b, 'reason'), 'Hello'), stream);
      assert.deepEqual(msg.content.map((c) => c.type), ['thinking', 'text']);
      assert.equal(msg.content[0].thinking, THINKING);
      assert.equal(msg.content[1].text, TEXT);
    });
  }

  for (const scenario of ['cut', 'errmid']) {
    test(`anthropic sdk: ${scenario} mid-stream on ${b.prefix} rejects with APIError`, async () => {
      const s = anthropic().messages.stream(messagesParams(model(b, scenario), 'Hello'));
      await assert.rejects(s.finalMessage(), (err) => {
        assert.ok(err instanceof Anthropic.APIError, `${err} is an APIError`);
        const want = b.prefix === 'an' && scenario === 'errmid' ? 'overloaded_error' : 'api_error';
        assert.equal(err.error?.error?.type, want);
        return true;
      });
    });
  }
}

const anthropicErrors = [
  { name: 'bad key', client: () => anthropic('sk-lg-not-a-real-key'), m: 'oa-text', status: 401, cls: Anthropic.AuthenticationError, type: 'authentication_error' },
  { name: 'unknown model', client: () => anthropic(), m: 'no-such-model', status: 404, cls: Anthropic.NotFoundError, type: 'not_found_error' },
  { name: 'model not allowed', client: () => anthropic(narrowKey), m: 'an-text', status: 403, cls: Anthropic.PermissionDeniedError, type: 'permission_error' },
  { name: 'chat backend rate limited', client: () => anthropic(), m: 'oa-ratelimit', status: 429, cls: Anthropic.RateLimitError, type: 'rate_limit_error' },
  { name: 'anthropic backend rate limited', client: () => anthropic(), m: 'an-ratelimit', status: 429, cls: Anthropic.RateLimitError, type: 'rate_limit_error' },
];
for (const c of anthropicErrors) {
  for (const stream of modes) {
    test(`anthropic sdk: ${c.name} is ${c.cls.name} (${c.status}), ${modeName(stream)}`, async () => {
      const client = c.client();
      const p = stream
        ? client.messages.stream(messagesParams(c.m, 'Hello')).finalMessage()
        : client.messages.create(messagesParams(c.m, 'Hello'));
      await assert.rejects(p, (err) => {
        assert.ok(err instanceof c.cls, `${err} is ${c.cls.name}`);
        assert.equal(err.status, c.status);
        assert.equal(err.error?.type, 'error');
        assert.equal(err.error?.error?.type, c.type);
        assert.ok(err.error?.error?.message);
        return true;
      });
    });
  }
}

test('anthropic sdk: count_tokens', async () => {
  for (const b of scripted) {
    const res = await anthropic().messages.countTokens({ model: model(b, 'text'), messages: [{ role: 'user', content: 'How many tokens?' }] });
    assert.ok(res.input_tokens > 0, `${b.prefix}: input_tokens ${res.input_tokens}`);
  }
});

// ---------------- OpenAI SDK: chat completions ----------------

const chatTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

function chatParams(m, prompt) {
  return { model: m, max_tokens: 64, messages: [{ role: 'system', content: 'You are a terse assistant.' }, { role: 'user', content: prompt }] };
}

// chatTurn returns [completion, reasoning]; streaming goes through the
// SDK's ChatCompletionStream accumulator with usage requested.
async function chatTurn(client, params, stream) {
  if (!stream) {
    const c = await client.chat.completions.create(params);
    assert.ok(c.id && c.created && c.model && c.usage, `completion fields in ${JSON.stringify(c)}`);
    return [c, c.choices[0].message.reasoning_content ?? ''];
  }
  const s = client.chat.completions.stream({ ...params, stream_options: { include_usage: true } });
  let reasoning = '';
  let usageChunks = 0;
  for await (const chunk of s) {
    assert.ok(chunk.id && chunk.model && chunk.object === 'chat.completion.chunk', `chunk fields in ${JSON.stringify(chunk)}`);
    if (chunk.usage) usageChunks++;
    reasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
  }
  assert.equal(usageChunks, 1, 'exactly one usage chunk');
  const c = await s.finalChatCompletion();
  return [c, reasoning];
}

for (const b of backends) {
  for (const stream of modes) {
    test(`openai sdk chat: text from ${b.prefix}, ${modeName(stream)}`, async () => {
      const [c] = await chatTurn(openai(), chatParams(model(b, 'text'), 'Say hello'), stream);
      const ch = c.choices[0];
      if (!b.scripted) {
        assert.ok(ch.message.content.length > 0);
        assert.ok(c.usage.completion_tokens > 0 && c.usage.completion_tokens <= 64);
        return;
      }
      assert.equal(ch.message.content, TEXT);
      assert.equal(ch.finish_reason, 'stop');
      assert.deepEqual([c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens],
        [PROMPT_TOKENS, COMPLETION_TOKENS, PROMPT_TOKENS + COMPLETION_TOKENS]);
    });
  }
}

for (const b of scripted) {
  for (const stream of modes) {
    for (const [scenario, want] of Object.entries(toolScenarios)) {
      test(`openai sdk chat: ${scenario} round trip on ${b.prefix}, ${modeName(stream)}`, async () => {
        const client = openai();
        const params = { ...chatParams(model(b, scenario), 'What is the weather in Paris and Tokyo?'), tools: [chatTool] };
        const [first] = await chatTurn(client, params, stream);
        const ch = first.choices[0];
        assert.equal(ch.finish_reason, 'tool_calls');
        const calls = ch.message.tool_calls ?? [];
        assert.deepEqual(calls.map((c) => JSON.parse(c.function.arguments).city), want.cities);
        for (const c of calls) assert.equal(c.function.name, 'get_weather');
        params.messages = [
          ...params.messages,
          ch.message,
          ...calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: weatherResult[JSON.parse(c.function.arguments).city] })),
        ];
        const [second] = await chatTurn(client, params, stream);
        assert.equal(second.choices[0].message.content, want.answer);
        assert.equal(second.choices[0].finish_reason, 'stop');
      });
    }

    test(`openai sdk chat: reasoning_content from ${b.prefix}, ${modeName(stream)}`, async () => {
      const [c, reasoning] = await chatTurn(openai(), chatParams(model(b, 'reason'), 'Hello'), stream);
      assert.equal(reasoning, THINKING);
      assert.equal(c.choices[0].message.content, TEXT);
    });
  }

  for (const scenario of ['cut', 'errmid']) {
    test(`openai sdk chat: ${scenario} mid-stream on ${b.prefix} rejects with APIError`, async () => {
      const s = openai().chat.completions.stream(chatParams(model(b, scenario), 'Hello'));
      await assert.rejects(s.finalChatCompletion(), (err) => {
        assert.ok(err instanceof OpenAI.APIError, `${err} is an APIError`);
        assert.ok(err.message.length > 0);
        return true;
      });
    });
  }
}

// ---------------- OpenAI SDK: Responses ----------------

const responsesTool = {
  type: 'function',
  name: 'get_weather',
  description: 'Current weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
};

function responsesParams(m, prompt) {
  return { model: m, instructions: 'You are a terse assistant.', input: [{ role: 'user', content: prompt }], store: false, max_output_tokens: 64 };
}

function checkResponse(r) {
  assert.ok(r.id && r.created_at && r.model && r.status && Array.isArray(r.output), `response fields in ${JSON.stringify(r)}`);
  for (const f of ['input_tokens', 'output_tokens', 'total_tokens']) {
    assert.equal(typeof r.usage?.[f], 'number', `usage.${f}`);
  }
}

// responsesTurn returns the final response; streaming goes through the
// SDK's ResponseStream, which rebuilds the response from the events.
async function responsesTurn(client, params, stream) {
  if (!stream) {
    const r = await client.responses.create(params);
    checkResponse(r);
    return r;
  }
  const s = client.responses.stream(params);
  const types = [];
  let text = '';
  const args = {}; // function_call_arguments deltas by item id
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.function_call_arguments.delta') args[ev.item_id] = (args[ev.item_id] ?? '') + ev.delta;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  const r = await s.finalResponse();
  checkResponse(r);
  assert.equal(r.output_text, text, 'streamed deltas add up to output_text');
  for (const it of r.output.filter((o) => o.type === 'function_call')) {
    assert.equal(args[it.id], it.arguments, `streamed arguments of ${it.id} add up to the completed ones`);
  }
  return r;
}

for (const b of backends) {
  for (const stream of modes) {
    test(`openai sdk responses: text from ${b.prefix}, ${modeName(stream)}`, async () => {
      const r = await responsesTurn(openai(), responsesParams(model(b, 'text'), 'Say hello'), stream);
      if (!b.scripted) {
        assert.ok(r.output_text.length > 0);
        assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= 64);
        return;
      }
      assert.equal(r.output_text, TEXT);
      assert.equal(r.status, 'completed');
      assert.deepEqual([r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens],
        [PROMPT_TOKENS, COMPLETION_TOKENS, PROMPT_TOKENS + COMPLETION_TOKENS]);
    });
  }
}

for (const b of scripted) {
  for (const stream of modes) {
    for (const [scenario, want] of Object.entries(toolScenarios)) {
      test(`openai sdk responses: ${scenario} function call round trip on ${b.prefix}, ${modeName(stream)}`, async () => {
        const client = openai();
        const params = { ...responsesParams(model(b, scenario), 'What is the weather in Paris and Tokyo?'), tools: [responsesTool] };
        const first = await responsesTurn(client, params, stream);
        const calls = first.output.filter((o) => o.type === 'function_call');
        assert.deepEqual(calls.map((c) => JSON.parse(c.arguments).city), want.cities);
        // As Codex resends them: the calls, then their outputs.
        params.input = [
          ...params.input,
          ...calls.map((c) => ({ type: 'function_call', call_id: c.call_id, name: c.name, arguments: c.arguments })),
          ...calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: weatherResult[JSON.parse(c.arguments).city] })),
        ];
        const second = await responsesTurn(client, params, stream);
        assert.equal(second.output_text, want.answer);
      });
    }
  }

  for (const scenario of ['cut', 'errmid']) {
    test(`openai sdk responses: ${scenario} mid-stream on ${b.prefix} ends in response.failed`, async () => {
      const s = await openai().responses.create({ ...responsesParams(model(b, scenario), 'Hello'), stream: true });
      const events = [];
      for await (const ev of s) events.push(ev);
      const types = events.map((e) => e.type);
      assert.equal(types.at(-1), 'response.failed', `events ${types}`);
      const errEv = events.find((e) => e.type === 'error');
      assert.ok(errEv?.message, `an error event with a message in ${types}`);
      assert.equal(events.at(-1).response.status, 'failed');
      assert.ok(events.at(-1).response.error?.message);
    });
  }
}

const openaiErrors = [
  { name: 'bad key', client: () => openai('sk-lg-not-a-real-key'), m: 'an-text', status: 401, cls: OpenAI.AuthenticationError },
  { name: 'unknown model', client: () => openai(), m: 'no-such-model', status: 404, cls: OpenAI.NotFoundError },
  { name: 'model not allowed', client: () => openai(narrowKey), m: 'an-text', status: 403, cls: OpenAI.PermissionDeniedError },
  { name: 'chat backend rate limited', client: () => openai(), m: 'oa-ratelimit', status: 429, cls: OpenAI.RateLimitError },
  { name: 'anthropic backend rate limited', client: () => openai(), m: 'an-ratelimit', status: 429, cls: OpenAI.RateLimitError },
];
for (const c of openaiErrors) {
  for (const stream of modes) {
    test(`openai sdk: ${c.name} is ${c.cls.name} (${c.status}) on chat and responses, ${modeName(stream)}`, async () => {
      const client = c.client();
      // Started one at a time: a second request's rejection left unawaited
      // while the first is checked would fail the run as unhandled.
      const calls = stream
        ? [() => client.chat.completions.stream(chatParams(c.m, 'Hello')).finalChatCompletion(),
            () => client.responses.stream(responsesParams(c.m, 'Hello')).finalResponse()]
        : [() => client.chat.completions.create(chatParams(c.m, 'Hello')), () => client.responses.create(responsesParams(c.m, 'Hello'))];
      for (const call of calls) {
        await assert.rejects(call, (err) => {
          assert.ok(err instanceof c.cls, `${err} is ${c.cls.name}`);
          assert.equal(err.status, c.status);
          assert.ok(err.message.length > 0 && err.type, `type ${err.type} message ${err.message}`);
          return true;
        });
      }
    });
  }
}

test('openai sdk responses: previous_response_id continues a stored conversation; retrieve, delete, unknown id', async () => {
  const first = await openai().responses.create({ ...responsesParams('oa-text', 'My name is Ada.'), store: true });
  let second;
  const stream = await openai().responses.create({ ...responsesParams('oa-text', 'What is my name?'), store: true, previous_response_id: first.id, stream: true });
  for await (const ev of stream) {
    if (ev.type === 'response.completed') second = ev.response;
  }
  assert.ok(second && second.id !== first.id, `second response ${JSON.stringify(second)}`);
  assert.equal(second.previous_response_id, first.id);
  assert.equal(second.store, true);
  const got = await openai().responses.retrieve(second.id);
  assert.equal(got.id, second.id);
  assert.ok(got.output_text && got.output_text === second.output.map((o) => (o.content || []).map((c) => c.text || '').join('')).join(''), `retrieved ${JSON.stringify(got)}`);
  await openai().responses.delete(first.id);
  await assert.rejects(openai().responses.retrieve(first.id), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, `${err}`);
    return true;
  });
  await assert.rejects(openai().responses.create({ ...responsesParams('oa-text', 'Hello'), previous_response_id: 'resp_123' }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `${err}`);
    assert.equal(err.code, 'previous_response_not_found');
    assert.equal(err.param, 'previous_response_id');
    return true;
  });
});

// ---------------- Forced tool calls, every SDK and API ----------------
//
// The round trip an agent makes (mirrors forced_tools_go_test.go): offer
// tools, force a call, let the SDK parse it (finalChatCompletion,
// finalResponse, finalMessage when streaming), send the result back in the
// API's own way, get a text answer. On the simulator ("sim": arguments
// drawn from the offered schema, up to 3 parallel calls) and on the
// scripted Anthropic upstream's "forced" scenario ("an-forced": tool_use
// built from input_schema, input_json_delta streaming, and a text answer
// quoting the tool results in order).

const MAX_PARALLEL = 3; // simMaxParallelToolCalls in env_test.go
const FORCED_MAX_TOKENS = 512; // room for the simulator's text to end by itself
const UNITS = ['celsius', 'fahrenheit'];
const weatherFn = {
  name: 'get_weather',
  description: 'Current weather for a city',
  schema: {
    type: 'object',
    properties: { city: { type: 'string', minLength: 1, description: 'City name' }, unit: { type: 'string', enum: UNITS } },
    required: ['city', 'unit'],
    additionalProperties: false,
  },
};
const timeFn = {
  name: 'get_time',
  description: 'Local time in a city',
  schema: { type: 'object', properties: { city: { type: 'string', minLength: 1 } }, required: ['city'], additionalProperties: false },
};
const forcedBackends = [
  { prefix: 'sim', scripted: false, model: 'sim' },
  { prefix: 'an', scripted: true, model: 'an-forced' },
];
// named: get_weather named among two tools (get_time first); otherwise the
// one tool is required. parallel: several calls allowed and expected.
const forcings = [
  { name: 'required', named: false, parallel: false },
  { name: 'named', named: true, parallel: false },
  { name: 'parallel', named: false, parallel: true },
];
const forcedTools = (f) => (f.named ? [timeFn, weatherFn] : [weatherFn]);
const forcedAnswer = (results) => `Tool results: ${results.join(' | ')}`;

// forcedFirstTurn runs the first turn until the number of calls fits the
// forcing: exactly one, or several when parallel (two from the scripted
// upstream). The simulator draws the number of calls from the prompt
// (temperature 0), so a parallel test on it tries a few wordings.
async function forcedFirstTurn(b, f, run) {
  for (let i = 0; i < 8; i++) {
    const prompt = i === 0 ? 'What is the weather in Paris?' : `What is the weather in Paris? (take ${i + 1})`;
    const [res, n] = await run(prompt);
    if (!f.parallel && n === 1) return res;
    if (f.parallel && b.scripted && n === 2) return res;
    if (f.parallel && !b.scripted && n >= 2 && n <= MAX_PARALLEL) return res;
    if (!(f.parallel && !b.scripted && n === 1)) assert.fail(`${n} tool calls (${f.name} on ${b.prefix})`);
  }
  assert.fail('with parallel calls allowed, the simulator made a single call for 8 prompts in a row');
}

// checkForcedCall checks a call as the SDK parsed it: get_weather, its
// arguments an object valid against the offered schema (required city,
// unit from the enum, nothing else), and returns the tool's result.
function checkForcedCall(name, args) {
  assert.equal(name, weatherFn.name);
  const v = typeof args === 'string' ? JSON.parse(args) : args;
  assert.ok(v && typeof v === 'object' && !Array.isArray(v), `arguments ${JSON.stringify(args)} are an object`);
  assert.deepEqual(Object.keys(v).sort(), ['city', 'unit'], `arguments ${JSON.stringify(v)} hold the required properties and no other`);
  assert.ok(typeof v.city === 'string' && v.city.length > 0, `city ${JSON.stringify(v.city)}`);
  assert.ok(UNITS.includes(v.unit), `unit ${JSON.stringify(v.unit)} is one of ${UNITS}`);
  return JSON.stringify({ city: v.city, unit: v.unit, temperature: 18, sky: 'clear' });
}

function checkForcedAnswer(b, text, results) {
  assert.ok(text.length > 0, 'a text answer to the tool results');
  if (b.scripted) assert.equal(text, forcedAnswer(results));
}

const checkUsage = (what, a, b, total) => {
  assert.ok(a > 0 && b > 0, `${what}: usage ${a}+${b}`);
  if (total !== undefined) assert.equal(total, a + b, `${what}: total tokens`);
};

for (const b of forcedBackends) {
  for (const f of forcings) {
    for (const stream of modes) {
      test(`openai sdk chat: forced tool call (${f.name}) round trip on ${b.prefix}, ${modeName(stream)}`, async () => {
        const client = openai();
        let params;
        const first = await forcedFirstTurn(b, f, async (prompt) => {
          params = {
            ...chatParams(b.model, prompt),
            max_tokens: FORCED_MAX_TOKENS,
            temperature: 0,
            tools: forcedTools(f).map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.schema } })),
            tool_choice: f.named ? { type: 'function', function: { name: weatherFn.name } } : 'required',
            parallel_tool_calls: f.parallel,
          };
          const [c] = await chatTurn(client, params, stream);
          return [c, c.choices[0].message.tool_calls?.length ?? 0];
        });
        const ch = first.choices[0];
        assert.equal(ch.finish_reason, 'tool_calls');
        checkUsage('first turn', first.usage.prompt_tokens, first.usage.completion_tokens, first.usage.total_tokens);
        const calls = ch.message.tool_calls;
        assert.equal(new Set(calls.map((c) => c.id)).size, calls.length, 'unique call ids');
        const results = calls.map((c) => {
          assert.equal(c.type, 'function');
          return checkForcedCall(c.function.name, c.function.arguments);
        });
        params.messages = [...params.messages, ch.message, ...calls.map((c, i) => ({ role: 'tool', tool_call_id: c.id, content: results[i] }))];
        params.tool_choice = 'auto';
        const [second] = await chatTurn(client, params, stream);
        assert.equal(second.choices[0].finish_reason, 'stop');
        assert.ok(!second.choices[0].message.tool_calls?.length, 'no tool call in the answer to the results');
        checkForcedAnswer(b, second.choices[0].message.content, results);
        checkUsage('second turn', second.usage.prompt_tokens, second.usage.completion_tokens, second.usage.total_tokens);
      });

      for (const stored of [false, true]) {
        const how = stored ? 'previous_response_id' : 'full input resent';
        test(`openai sdk responses: forced function call (${f.name}) round trip by ${how} on ${b.prefix}, ${modeName(stream)}`, async () => {
          const client = openai();
          let params;
          const first = await forcedFirstTurn(b, f, async (prompt) => {
            params = {
              ...responsesParams(b.model, prompt),
              store: stored,
              max_output_tokens: FORCED_MAX_TOKENS,
              temperature: 0,
              tools: forcedTools(f).map((t) => ({ type: 'function', name: t.name, description: t.description, parameters: t.schema, strict: false })),
              tool_choice: f.named ? { type: 'function', name: weatherFn.name } : 'required',
              parallel_tool_calls: f.parallel,
            };
            const r = await responsesTurn(client, params, stream);
            return [r, r.output.filter((o) => o.type === 'function_call').length];
          });
          assert.equal(first.status, 'completed');
          checkUsage('first turn', first.usage.input_tokens, first.usage.output_tokens, first.usage.total_tokens);
          const calls = first.output.filter((o) => o.type === 'function_call');
          const results = calls.map((c) => {
            assert.ok(c.call_id, 'call_id');
            assert.equal(c.status, 'completed');
            return checkForcedCall(c.name, c.arguments);
          });
          const outputs = calls.map((c, i) => ({ type: 'function_call_output', call_id: c.call_id, output: results[i] }));
          const next = { ...params, tool_choice: 'auto' };
          if (stored) {
            next.previous_response_id = first.id;
            next.input = outputs;
          } else {
            // As Codex resends a stateless conversation: the input, the calls, their outputs.
            next.input = [...params.input, ...calls.map((c) => ({ type: 'function_call', call_id: c.call_id, name: c.name, arguments: c.arguments })), ...outputs];
          }
          const second = await responsesTurn(client, next, stream);
          assert.equal(second.status, 'completed');
          assert.equal(second.output.filter((o) => o.type === 'function_call').length, 0, 'no function call in the answer to the outputs');
          checkForcedAnswer(b, second.output_text, results);
          checkUsage('second turn', second.usage.input_tokens, second.usage.output_tokens, second.usage.total_tokens);
        });
      }

      test(`anthropic sdk: forced tool use (${f.name}) round trip on ${b.prefix}, ${modeName(stream)}`, async () => {
        const client = anthropic();
        let params;
        const first = await forcedFirstTurn(b, f, async (prompt) => {
          params = {
            ...messagesParams(b.model, prompt),
            max_tokens: FORCED_MAX_TOKENS,
            temperature: 0,
            tools: forcedTools(f).map((t) => ({ name: t.name, description: t.description, input_schema: t.schema })),
            tool_choice: f.named ? { type: 'tool', name: weatherFn.name } : { type: 'any', disable_parallel_tool_use: !f.parallel },
          };
          const msg = await anthropicTurn(client, params, stream);
          return [msg, msg.content.filter((c) => c.type === 'tool_use').length];
        });
        assert.equal(first.stop_reason, 'tool_use');
        checkUsage('first turn', first.usage.input_tokens, first.usage.output_tokens);
        const uses = first.content.filter((c) => c.type === 'tool_use');
        const results = uses.map((u) => {
          assert.ok(u.id, 'tool_use id');
          return checkForcedCall(u.name, u.input);
        });
        params.messages = [
          ...params.messages,
          { role: 'assistant', content: first.content },
          { role: 'user', content: uses.map((u, i) => ({ type: 'tool_result', tool_use_id: u.id, content: results[i] })) },
        ];
        params.tool_choice = { type: 'auto' };
        const second = await anthropicTurn(client, params, stream);
        assert.equal(second.stop_reason, 'end_turn');
        assert.equal(second.content.filter((c) => c.type === 'tool_use').length, 0, 'no tool use in the answer to the results');
        checkForcedAnswer(b, textOf(second), results);
        checkUsage('second turn', second.usage.input_tokens, second.usage.output_tokens);
      });
    }
  }
}
