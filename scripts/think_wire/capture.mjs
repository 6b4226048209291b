// Records what @cloudflare/think puts on the WebSocket for each scenario, into tests/data/think_wire/.
// Usage: npm ci && npm run capture [-- NAME...]   (from scripts/think_wire; needs only the npm registry)
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

// A scenario is a list of actions, stored with the recording so tests/test_think_wire.py replays the same ones:
//   {open: "a"}                          open socket "a" on the scenario's agent
//   {send: "a", frame}                   send a frame; a value {$from: TYPE, key} is taken from the last TYPE frame
//   {wait: "a", for: PATTERN, count?}    wait until socket "a" has received `count` (1) frames matching PATTERN
//   {settle: MS}                         wait until no socket has received anything for MS milliseconds
//   {close: "a"}
// PATTERN keys must equal the frame's; the key `chunk` matches the type of the UI chunk in a response's body.
export function matches(frame, pattern) {
  return Object.entries(pattern).every(([key, want]) => key === "chunk"
    ? frame.type === "cf_agent_use_chat_response" && !!frame.body && !frame.error && JSON.parse(frame.body).type === want
    : frame[key] === want);
}

function resolve(value, frames) {
  if (Array.isArray(value)) return value.map((v) => resolve(v, frames));
  if (value && typeof value === "object") {
    if ("$from" in value) return frames.findLast((f) => f.type === value.$from)?.[value.key];
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolve(v, frames)]));
  }
  return value;
}

async function play(base, agent, name, actions) {
  const sockets = {};
  const frames = {};
  let last = Date.now();
  const until = async (check, what) => {
    const deadline = Date.now() + 10000;
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`${name}: timed out waiting for ${what}; got ${JSON.stringify(frames)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  for (const action of actions) {
    if (action.open) {
      const label = action.open;
      frames[label] = [];
      const ws = new WebSocket(`${base.replace("http", "ws")}agents/${agent}/${name}`);
      ws.on("message", (data) => { frames[label].push(JSON.parse(data.toString())); last = Date.now(); });
      await new Promise((ok, fail) => { ws.on("open", ok); ws.on("error", fail); });
      sockets[label] = ws;
    } else if (action.send) {
      sockets[action.send].send(JSON.stringify(resolve(action.frame, frames[action.send])));
    } else if (action.wait) {
      const count = action.count ?? 1;
      await until(() => frames[action.wait].filter((f) => matches(f, action.for)).length >= count,
        `${count} × ${JSON.stringify(action.for)} on ${action.wait}`);
    } else if (action.settle) {
      last = Date.now();
      await until(() => Date.now() - last >= action.settle, "silence");
    } else if (action.close) {
      sockets[action.close].close();
      delete sockets[action.close];
    }
  }
  for (const ws of Object.values(sockets)) ws.close();
  return frames;
}

function ask(text, { id = "req-1", history = [], ...body } = {}) {
  const messages = [...history, { id: `u${history.length + 1}`, role: "user", parts: [{ type: "text", text }] }];
  return { type: "cf_agent_use_chat_request", id, init: { method: "POST", body: JSON.stringify({
    messages, trigger: "submit-message", ...body }) } };
}

const DONE = { type: "cf_agent_use_chat_response", done: true };
const conversation = (request) => [{ open: "a" }, { settle: 300 }, { send: "a", frame: request }, { wait: "a", for: DONE },
  { settle: 300 }];
const locate = { clientTools: [{ name: "getLocation", description: "Where the user is",
  parameters: { type: "object", properties: {} } }] };
// The continuation after a tool result or approval is announced with cf_agent_stream_resuming; a socket that
// acknowledges it (as the npm client does) is sent the stream, one that does not hears only how it ended.
const RESUMING = { type: "cf_agent_stream_resuming" };
const acknowledge = [{ wait: "a", for: RESUMING },
  { send: "a", frame: { type: "cf_agent_stream_resume_ack", id: { $from: "cf_agent_stream_resuming", key: "id" } } }];
const approve = (approved, ack) => [...conversation(ask("delete /tmp/x")),
  { send: "a", frame: { type: "cf_agent_tool_approval", toolCallId: "call_1", approved, autoContinue: true } },
  ...(ack ? acknowledge : []), { wait: "a", for: DONE, count: 2 }, { settle: 300 }];

// Three requests at once: the second and third arrive while the first turn runs (a dropped one never gets a turn).
const said = (n) => ["one", "two", "three"].slice(0, n).map((text, i) => ({ id: `u${i + 1}`, role: "user",
  parts: [{ type: "text", text }] }));
const overlapping = (turns) => [{ open: "a" }, { settle: 300 },
  { send: "a", frame: ask("one") }, { send: "a", frame: ask("two", { id: "req-2", history: said(1) }) },
  { send: "a", frame: ask("three", { id: "req-3", history: said(2) }) },
  { wait: "a", for: DONE, count: 3 }, { settle: 500 }];

// name -> [agent class (kebab case), what its mock model streams, the actions]
const scenarios = {
  plain_reply: ["assistant", "text-start, text-delta 'Hello', text-delta ' there', text-end, finish stop",
    conversation(ask("hi"))],
  server_tool: ["calculator", "tool-input-start add, tool-input-delta '{\"a\": 2,', tool-input-delta ' \"b\": 3}', tool-input-end, tool-call add, finish tool-calls; then text 'It is 5.', finish stop",
    conversation(ask("2+3?"))],
  provider_error: ["broken", "doStream throws Error('provider exploded')", conversation(ask("hi"))],
  client_tool: ["locator", "tool-call getLocation {} (a client tool), finish tool-calls; after the result: text 'You are in Paris.'",
    [...conversation(ask("where am I?", locate)),
      { send: "a", frame: { type: "cf_agent_tool_result", toolCallId: "call_1", toolName: "getLocation",
        output: { city: "Paris" }, autoContinue: true } },
      ...acknowledge, { wait: "a", for: DONE, count: 2 }, { settle: 300 }]],
  // The npm client after addToolOutput: it asks for the continuation with a resume request (reconnectToStream)
  // while the continuation is still coalescing, hears it is pending, then follows it once it starts.
  client_tool_resumed: ["locator", "tool-call getLocation {} (a client tool), finish tool-calls; after the result: text 'You are in Paris.'",
    [...conversation(ask("where am I?", locate)),
      { send: "a", frame: { type: "cf_agent_tool_result", toolCallId: "call_1", toolName: "getLocation",
        output: { city: "Paris" }, autoContinue: true } },
      { send: "a", frame: { type: "cf_agent_stream_resume_request", probeId: "probe-1" } },
      ...acknowledge, { wait: "a", for: DONE, count: 2 }, { settle: 300 }]],
  client_tool_error: ["locator", "tool-call getLocation {} (a client tool), finish tool-calls",
    [...conversation(ask("where am I?", locate)),
      { send: "a", frame: { type: "cf_agent_tool_result", toolCallId: "call_1", toolName: "getLocation",
        output: null, state: "output-error", errorText: "no GPS" } },
      { settle: 500 }]],
  approval_granted: ["guarded", "tool-call deleteFile {path: '/tmp/x'} (needsApproval), finish tool-calls; after the result: text 'Done.'",
    approve(true, true)],
  approval_denied: ["guarded", "tool-call deleteFile {path: '/tmp/x'} (needsApproval), finish tool-calls; after the denial: text 'Done.' (the socket does not acknowledge the continuation)",
    approve(false, false)],
  cancel: ["staller", "text-start, text-delta 'Hel', then nothing until the request is aborted",
    [{ open: "a" }, { settle: 300 }, { send: "a", frame: ask("hi") }, { wait: "a", for: { chunk: "text-delta" } },
      { send: "a", frame: { type: "cf_agent_chat_request_cancel", id: "req-1" } }, { wait: "a", for: DONE },
      { settle: 300 }]],
  resume: ["staller", "text-start, text-delta 'Hel', then nothing until the request is aborted",
    [{ open: "a" }, { settle: 300 }, { send: "a", frame: ask("hi") }, { wait: "a", for: { chunk: "text-delta" } },
      { open: "b" }, { wait: "b", for: { type: "cf_agent_stream_resuming" } },
      { send: "b", frame: { type: "cf_agent_stream_resume_ack", id: { $from: "cf_agent_stream_resuming", key: "id" } } },
      { settle: 300 }, { send: "a", frame: { type: "cf_agent_chat_request_cancel", id: "req-1" } },
      { wait: "a", for: DONE }, { settle: 300 }]],
  resume_when_idle: ["assistant", "nothing (no turn runs)",
    [{ open: "a" }, { settle: 300 }, { send: "a", frame: { type: "cf_agent_stream_resume_request" } }, { settle: 300 }]],
  clear: ["assistant", "text-start, text-delta 'Hello', text-delta ' there', text-end, finish stop",
    [{ open: "a" }, { open: "b" }, { settle: 300 }, { send: "a", frame: ask("hi") }, { wait: "a", for: DONE },
      { settle: 300 }, { send: "a", frame: { type: "cf_agent_chat_clear" } }, { settle: 300 }]],
  regenerate: ["assistant", "text-start, text-delta 'Hello', text-delta ' there', text-end, finish stop (each turn)",
    [...conversation(ask("hi")),
      { send: "a", frame: { ...ask("hi", { id: "req-2" }), init: { method: "POST", body: JSON.stringify({
        messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: "hi" }] }], trigger: "regenerate-message" }) } } },
      { wait: "a", for: DONE, count: 2 }, { settle: 300 }]],
  ...Object.fromEntries(["queueing", "latest", "merging", "dropping", "debouncing"].map((agent) => [`concurrency_${agent}`, [agent,
    "text-start, text-delta 'Hello', text-end, finish stop (each turn; the first starts 300 ms late)",
    overlapping(agent === "dropping" ? 2 : 3)]])),
};

const mf = new Miniflare({
  modules: [{ type: "ESModule", path: "worker.mjs", contents: await bundle() }],
  compatibilityDate: "2026-07-29", compatibilityFlags: ["nodejs_compat"], host: "127.0.0.1", port: 0,
  durableObjects: Object.fromEntries(["Assistant", "Calculator", "Broken", "Locator", "Guarded", "Staller", "Queueing", "Latest", "Merging", "Dropping",
    "Debouncing"].map(
    (c) => [c, { className: c, useSQLite: true }])),
});
try {
  const base = (await mf.ready).href;
  mkdirSync(OUT, { recursive: true });
  const only = process.argv.slice(2); // `npm run capture -- NAME...` records just those scenarios
  for (const [name, [agent, model, actions]] of Object.entries(scenarios)) {
    if (only.length && !only.includes(name)) continue;
    const sockets = await play(base, agent, name.replaceAll("_", "-"), actions);
    const record = { source: "@cloudflare/think 0.23.0, agents 0.32.0, ai 7.0.173 in workerd (miniflare 4.20260730.0)",
      agent, model: `MockLanguageModelV4: ${model}`, actions, sockets };
    writeFileSync(new URL(`${name}.json`, OUT), JSON.stringify(record, null, 1) + "\n");
    console.log(`${name}: ${Object.entries(sockets).map(([s, f]) => `${s} ${f.length} frames`).join(", ")}`);
  }
} finally {
  await mf.dispose();
}
