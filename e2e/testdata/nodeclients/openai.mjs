// The openai npm package against `tandem serve`: chat, chat with tools
// (whole and streamed), the Responses API (create, streaming, the
// stream helper, previous_response_id, function calls) and logprobs.
import OpenAI from "openai";
import { base, model, apiKey, check, run, WEATHER, HELLO, SUNNY, THINK, THOUGHT, weatherSchema } from "./common.mjs";

const client = new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0, timeout: 30000 });
const chatTools = [{ type: "function", function: { name: "get_weather", description: "Current weather of a city", parameters: weatherSchema } }];
const respTools = [{ type: "function", name: "get_weather", description: "Current weather of a city", parameters: weatherSchema, strict: false }];

await run([
  ["chat", null, async () => {
    const c = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 32 });
    check(c.choices[0].message.content === HELLO, "content", c.choices[0].message);
    check(c.choices[0].finish_reason === "stop" && c.usage.completion_tokens > 0, "finish/usage", c);
  }],
  ["chat_stream", null, async () => {
    const s = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 32, stream: true, stream_options: { include_usage: true } });
    let text = "", usage;
    for await (const ch of s) {
      if (ch.choices[0]?.delta?.content) text += ch.choices[0].delta.content;
      if (ch.usage) usage = ch.usage;
    }
    check(text === HELLO && usage && usage.completion_tokens > 0, "streamed text", { text, usage });
  }],
  ["responses_create", null, async () => {
    const r = await client.responses.create({ model, instructions: "be brief", input: "hi", max_output_tokens: 32 });
    check(r.object === "response" && r.status === "completed" && r.output_text === HELLO, "response", r);
    check(r.usage.output_tokens > 0 && r.usage.input_tokens > 0, "usage", r.usage);
    const r2 = await client.responses.create({ model, input: "hi again", previous_response_id: r.id, max_output_tokens: 32 });
    check(r2.previous_response_id === r.id && r2.output_text === HELLO, "previous_response_id", r2);
    const got = await client.responses.retrieve(r2.id);
    check(got.id === r2.id && got.output_text === HELLO, "retrieve", got);
    let err;
    try {
      await client.responses.create({ model, input: "x", previous_response_id: "resp_never" });
    } catch (e) {
      err = e;
    }
    check(err instanceof OpenAI.NotFoundError && /previous_response_id/.test(String(err.param ?? err.error?.param ?? "")), "gone id", err && err.error);
  }],
  ["responses_stream", null, async () => {
    const s = await client.responses.create({ model, input: "hi", max_output_tokens: 32, stream: true });
    const types = [];
    let text = "", completed;
    for await (const ev of s) {
      types.push(ev.type);
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.completed") completed = ev.response;
    }
    check(types[0] === "response.created" && types[1] === "response.in_progress" && types.at(-1) === "response.completed", "event order", types);
    check(text === HELLO && completed.output[0].content[0].text === HELLO, "streamed text", { text, completed });
    // The stream helper rebuilds the response from the events alone.
    const helper = client.responses.stream({ model, input: "hi", max_output_tokens: 32 });
    const final = await helper.finalResponse();
    // (finalResponse carries no output_text convenience field.)
    check(final.status === "completed" && final.output[0].content[0].text === HELLO, "stream helper", final);
  }],
  ["chat_tools", "tools", async () => {
    const c = await client.chat.completions.create({ model, messages: [{ role: "user", content: WEATHER }], tools: chatTools, max_tokens: 128 });
    const m = c.choices[0].message;
    check(c.choices[0].finish_reason === "tool_calls" && m.tool_calls?.length === 1, "tool call", c.choices[0]);
    check(m.tool_calls[0].function.name === "get_weather" && JSON.parse(m.tool_calls[0].function.arguments).city === "Paris", "arguments", m.tool_calls[0]);
    const c2 = await client.chat.completions.create({
      model, tools: chatTools, max_tokens: 128,
      messages: [{ role: "user", content: WEATHER }, m, { role: "tool", tool_call_id: m.tool_calls[0].id, content: "sunny, 22C" }],
    });
    check(c2.choices[0].message.content === SUNNY, "second step", c2.choices[0]);
  }],
  ["chat_tools_stream", "tools", async () => {
    const s = await client.chat.completions.create({ model, messages: [{ role: "user", content: WEATHER }], tools: chatTools, max_tokens: 128, stream: true });
    let first, args = "", finish;
    for await (const ch of s) {
      const d = ch.choices[0]?.delta;
      for (const tc of d?.tool_calls ?? []) {
        if (!first) first = tc;
        args += tc.function?.arguments ?? "";
      }
      if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    }
    check(first && first.index === 0 && first.id && first.type === "function" && first.function.name === "get_weather", "first tool-call delta", first);
    check(JSON.parse(args).city === "Paris" && finish === "tool_calls", "streamed arguments", { args, finish });
    const helper = client.chat.completions.stream({ model, messages: [{ role: "user", content: WEATHER }], tools: chatTools, max_tokens: 128 });
    const final = await helper.finalChatCompletion();
    check(final.choices[0].message.tool_calls[0].function.name === "get_weather", "stream helper", final.choices[0]);
  }],
  ["responses_tools", "tools", async () => {
    const s = await client.responses.create({ model, input: WEATHER, tools: respTools, max_output_tokens: 128, stream: true });
    let call, argsDone;
    for await (const ev of s) {
      if (ev.type === "response.output_item.done" && ev.item.type === "function_call") call = ev.item;
      if (ev.type === "response.function_call_arguments.done") argsDone = ev.arguments;
    }
    check(call && call.name === "get_weather" && JSON.parse(call.arguments).city === "Paris" && argsDone === call.arguments, "function call", call);
    const r2 = await client.responses.create({
      model, tools: respTools, max_output_tokens: 128,
      input: [{ role: "user", content: WEATHER }, { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
        { type: "function_call_output", call_id: call.call_id, output: "sunny, 22C" }],
    });
    check(r2.output_text === SUNNY, "second step", r2);
  }],
  ["responses_reasoning", "reasoning", async () => {
    const s = await client.responses.create({ model, input: THINK, max_output_tokens: 64, stream: true, reasoning: { effort: "low" } });
    let thought = "", text = "", completed;
    for await (const ev of s) {
      if (ev.type === "response.reasoning_text.delta") thought += ev.delta;
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.completed") completed = ev.response;
    }
    check(thought === THOUGHT && text === HELLO, "streamed reasoning and text", { thought, text });
    const out = completed.output;
    check(out.length === 2 && out[0].type === "reasoning" && out[0].content[0].type === "reasoning_text" && out[0].content[0].text === THOUGHT, "reasoning item", out);
    check(out[1].type === "message" && out[1].content[0].text === HELLO, "message item", out);
    check(completed.usage.output_tokens_details.reasoning_tokens > 0, "reasoning tokens", completed.usage);
  }],
  ["chat_logprobs", "logprobs", async () => {
    const c = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 32, logprobs: true, top_logprobs: 2 });
    const lp = c.choices[0].logprobs?.content;
    check(Array.isArray(lp) && lp.length > 0 && lp.length <= c.usage.completion_tokens, "an entry per token", { lp, usage: c.usage });
    for (const e of lp) {
      check(typeof e.token === "string" && e.logprob <= 0 && e.top_logprobs.length === 2, "entry", e);
    }
  }],
]);
