// Shared by the client scripts that TestNodeClients runs against
// `tandem serve` (cmd/tandem/nodeclients_test.go): the server's address,
// model and key, which checks to run, and one line per check on stdout
// ("PASS name"), so the Go test reports each as its own subtest.
export const base = process.env.TANDEM_URL;
export const model = process.env.TANDEM_MODEL;
export const apiKey = process.env.TANDEM_API_KEY || "unused";
export const features = new Set((process.env.TANDEM_FEATURES || "").split(",").filter(Boolean));

export function check(cond, msg, got) {
  if (!cond) {
    throw new Error(msg + (got === undefined ? "" : ": " + JSON.stringify(got)));
  }
}

// run runs the checks in order; a check that needs a feature the server
// lacks is left out (the Go test skips it by name).
export async function run(checks) {
  for (const [name, need, fn] of checks) {
    if (need && !features.has(need)) continue;
    try {
      await fn();
    } catch (e) {
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
      process.exit(1);
    }
    console.log(`PASS ${name}`);
  }
}

// The mocker's reply script (nodeclients_test.go) answers these prompts.
export const WEATHER = "What is the weather in Paris?";
export const HELLO = "Hello from Tandem.";
export const SUNNY = "It is sunny in Paris.";
export const THINK = "Think first, then greet";
export const THOUGHT = "Paris is in France.";
export const weatherSchema = {
  type: "object",
  properties: { city: { type: "string" } },
  required: ["city"],
};
