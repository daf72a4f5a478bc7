// The @anthropic-ai/sdk npm package against `tandem serve`'s
// /v1/messages: messages, streaming (raw events and the stream helper),
// tool use and a tool result.
import Anthropic from "@anthropic-ai/sdk";
import { base, model, apiKey, check, run, WEATHER, HELLO, SUNNY, THINK, THOUGHT, weatherSchema } from "./common.mjs";

const client = new Anthropic({ baseURL: base, apiKey, maxRetries: 0, timeout: 30000 });
const tools = [{ name: "get_weather", description: "Current weather of a city", input_schema: weatherSchema }];

await run([
  ["messages", null, async () => {
    const m = await client.messages.create({ model, max_tokens: 32, system: "be brief", messages: [{ role: "user", content: "hi" }] });
    check(m.type === "message" && m.role === "assistant" && m.content[0].type === "text" && m.content[0].text === HELLO, "message", m);
    check(m.stop_reason === "end_turn" && m.usage.output_tokens > 0 && m.usage.input_tokens > 0, "stop/usage", m);
    let err;
    try {
      await client.messages.create({ model, max_tokens: 32, messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: "https://example.com/x.png" } }] }] });
    } catch (e) {
      err = e;
    }
    check(err instanceof Anthropic.BadRequestError && err.error?.error?.type === "invalid_request_error", "image refused", err && err.error);
  }],
  ["messages_stream", null, async () => {
    const s = await client.messages.create({ model, max_tokens: 32, messages: [{ role: "user", content: "hi" }], stream: true });
    const types = [];
    let text = "";
    for await (const ev of s) {
      types.push(ev.type);
      if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
    }
    check(types[0] === "message_start" && types.at(-2) === "message_delta" && types.at(-1) === "message_stop", "event order", types);
    check(text === HELLO, "streamed text", text);
    const helper = client.messages.stream({ model, max_tokens: 32, messages: [{ role: "user", content: "hi" }] });
    const final = await helper.finalMessage();
    check(final.content[0].text === HELLO && final.stop_reason === "end_turn", "stream helper", final);
  }],
  ["messages_tools", "tools", async () => {
    const m = await client.messages.create({ model, max_tokens: 128, tools, messages: [{ role: "user", content: WEATHER }] });
    const tu = m.content.find((b) => b.type === "tool_use");
    check(m.stop_reason === "tool_use" && tu && tu.name === "get_weather" && tu.input.city === "Paris", "tool_use", m);
    const m2 = await client.messages.create({
      model, max_tokens: 128, tools,
      messages: [{ role: "user", content: WEATHER }, { role: "assistant", content: m.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, content: "sunny, 22C" }] }],
    });
    check(m2.content.find((b) => b.type === "text")?.text === SUNNY && m2.stop_reason === "end_turn", "second step", m2);
    // Streamed: the helper assembles the input from input_json_delta events.
    const helper = client.messages.stream({ model, max_tokens: 128, tools, messages: [{ role: "user", content: WEATHER }] });
    const final = await helper.finalMessage();
    const stu = final.content.find((b) => b.type === "tool_use");
    check(final.stop_reason === "tool_use" && stu && stu.input.city === "Paris", "streamed tool_use", final);
  }],
  ["messages_thinking", "reasoning", async () => {
    const req = { model, max_tokens: 64, thinking: { type: "enabled", budget_tokens: 32 }, messages: [{ role: "user", content: THINK }] };
    const m = await client.messages.create(req);
    check(m.content.length === 2 && m.content[0].type === "thinking" && m.content[0].thinking === THOUGHT && m.content[1].text === HELLO, "thinking block", m);
    const helper = client.messages.stream(req);
    const final = await helper.finalMessage();
    check(final.content[0].type === "thinking" && final.content[0].thinking === THOUGHT && final.content[1].text === HELLO, "streamed thinking", final);
  }],
]);
