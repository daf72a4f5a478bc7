// The Vercel AI SDK (ai, with @ai-sdk/openai-compatible) against
// `tandem serve`: text, streamed text, and a two-step tool loop (the
// model calls a tool, the SDK runs it, the model answers from its result).
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { z } from "zod";
import { base, model, apiKey, check, run, WEATHER, HELLO, SUNNY } from "./common.mjs";

const provider = createOpenAICompatible({ name: "tandem", baseURL: base + "/v1", apiKey, includeUsage: true });

await run([
  ["generate_text", null, async () => {
    const r = await generateText({ model: provider(model), prompt: "hi", maxOutputTokens: 32, maxRetries: 0 });
    check(r.text === HELLO && r.finishReason === "stop" && r.usage.outputTokens > 0, "text", { text: r.text, finish: r.finishReason, usage: r.usage });
  }],
  ["stream_text", null, async () => {
    const r = streamText({ model: provider(model), prompt: "hi", maxOutputTokens: 32, maxRetries: 0 });
    let text = "";
    for await (const part of r.textStream) text += part;
    check(text === HELLO, "streamed text", text);
  }],
  ["tool_loop", "tools", async () => {
    const calls = [];
    const r = await generateText({
      model: provider(model), prompt: WEATHER, maxOutputTokens: 128, maxRetries: 0, stopWhen: stepCountIs(3),
      tools: {
        get_weather: tool({
          description: "Current weather of a city",
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => {
            calls.push(city);
            return `sunny, 22C in ${city}`;
          },
        }),
      },
    });
    check(calls.length === 1 && calls[0] === "Paris", "the tool ran once for Paris", calls);
    check(r.steps.length === 2 && r.steps[0].finishReason === "tool-calls" && r.text === SUNNY, "two steps", { steps: r.steps.length, text: r.text });
  }],
]);
