// Records what @cloudflare/think puts on the WebSocket for each scenario, into tests/data/think_wire/.
// Usage: npm ci && npm run capture   (from scripts/think_wire; needs only the npm registry)
import { mkdirSync, writeFileSync } from "node:fs";
import * as esbuild from "esbuild";
import { Miniflare } from "miniflare";
import WebSocket from "ws";

const OUT = new URL("../../tests/data/think_wire/", import.meta.url);

async function bundle() {
  const result = await esbuild.build({
    entryPoints: ["worker.mjs"], bundle: true, format: "esm", platform: "neutral", write: false,
    conditions: ["workerd", "worker", "browser"], mainFields: ["module", "main"], logLevel: "warning",
    // Node built-ins come from workerd's nodejs_compat; just-bash is an optional peer of the agents package.
    external: ["cloudflare:*", "node:*", "async_hooks", "crypto", "path", "fs", "os", "stream", "util",
      "events", "buffer", "just-bash"],
  });
  // The `chat` package builds an AbortController at module scope, which workerd refuses outside a handler;
  // Think only reads this never-aborted signal, so a plain object with the same surface stands in for it.
  const text = result.outputFiles[0].text.replace(
    "var NEVER_ABORTED_SIGNAL = new AbortController().signal;",
    "var NEVER_ABORTED_SIGNAL = { aborted: false, addEventListener() {}, removeEventListener() {} };");
  return text;
}

function converse(base, agent, name, request) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${base.replace("http", "ws")}agents/${agent}/${name}`);
    const frames = [];
    ws.on("message", (data) => {
      const frame = JSON.parse(data.toString());
      frames.push(frame);
      if (frame.type === "cf_agent_use_chat_response" && frame.done) { ws.close(); resolve(frames); }
    });
    ws.on("open", () => setTimeout(() => ws.send(JSON.stringify(request)), 200));
    ws.on("error", reject);
    setTimeout(() => reject(new Error(`no done frame; got ${JSON.stringify(frames)}`)), 10000);
  });
}

function ask(text) {
  return { type: "cf_agent_use_chat_request", id: "req-1", init: { method: "POST", body: JSON.stringify({
    messages: [{ id: "u1", role: "user", parts: [{ type: "text", text }] }], trigger: "submit-message" }) } };
}

// name -> [agent class (kebab case), what its mock model streams, the request]
const scenarios = {
  plain_reply: ["assistant", "text-start, text-delta 'Hello', text-delta ' there', text-end, finish stop", ask("hi")],
  server_tool: ["calculator", "tool-input-start add, tool-input-delta '{\"a\": 2,', tool-input-delta ' \"b\": 3}', tool-input-end, tool-call add, finish tool-calls; then text 'It is 5.', finish stop",
    ask("2+3?")],
  provider_error: ["broken", "doStream throws Error('provider exploded')", ask("hi")],
};

const mf = new Miniflare({
  modules: [{ type: "ESModule", path: "worker.mjs", contents: await bundle() }],
  compatibilityDate: "2026-07-29", compatibilityFlags: ["nodejs_compat"], host: "127.0.0.1", port: 0,
  durableObjects: Object.fromEntries(["Assistant", "Calculator", "Broken"].map(
    (c) => [c, { className: c, useSQLite: true }])),
});
try {
  const base = (await mf.ready).href;
  mkdirSync(OUT, { recursive: true });
  for (const [name, [agent, model, request]] of Object.entries(scenarios)) {
    const frames = await converse(base, agent, name.replaceAll("_", "-"), request);
    const record = { source: "@cloudflare/think 0.23.0, agents 0.32.0, ai 7.0.173 in workerd (miniflare 4.20260730.0)",
      agent, model: `MockLanguageModelV4: ${model}`, request, frames };
    writeFileSync(new URL(`${name}.json`, OUT), JSON.stringify(record, null, 1) + "\n");
    console.log(`${name}: ${frames.length} frames`);
  }
} finally {
  await mf.dispose();
}
