// The openai npm client's structured-output helper (zodResponseFormat +
// chat.completions.parse) against a Tandem server: NM is the clients'
// node_modules, BASE the server, MODEL its model.
const nm = process.env.NM;
const { default: OpenAI } = await import(nm + "/openai/index.mjs");
const { zodResponseFormat } = await import(nm + "/openai/helpers/zod.mjs");
const { z } = await import(nm + "/zod/index.js");
const client = new OpenAI({ baseURL: process.env.BASE + "/v1", apiKey: "x", maxRetries: 0 });
const Event = z.object({ name: z.string().max(20), date: z.string(), participants: z.array(z.string().max(10)).max(3), count: z.number().int() });
const c = await client.chat.completions.parse({
  model: process.env.MODEL, max_tokens: 2000,
  messages: [{ role: "user", content: "Alice and Bob go to the fair on Friday." }],
  response_format: zodResponseFormat(Event, "event"),
});
const p = c.choices[0].message.parsed;
if (!p || typeof p.name !== "string" || !Array.isArray(p.participants)) { console.log("FAIL", JSON.stringify(c.choices[0].message)); process.exit(1); }
console.log("PASS zod_parse", JSON.stringify(p));
