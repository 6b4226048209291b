// The reference agent for the wire capture: Think with a scripted AI SDK model (see capture.mjs).
import { Think } from "@cloudflare/think";
import { routeAgentRequest } from "agents";
import { MockLanguageModelV4 } from "ai/test";
import { simulateReadableStream, tool } from "ai";
import { z } from "zod";

let texts = 0; // every text part gets an id of its own, as the AI SDK's providers give them
const usage = { inputTokens: { total: 3, noCache: 3, cacheRead: 0, cacheWrite: 0 },
                outputTokens: { total: 2, text: 2, reasoning: 0 } };

function model() {
  return new MockLanguageModelV4({
    doStream: async (_, id = `t${++texts}`) => ({
      stream: simulateReadableStream({ chunks: [
        { type: "stream-start", warnings: [] },
        { type: "text-start", id },
        { type: "text-delta", id, delta: "Hello" },
        { type: "text-delta", id, delta: " there" },
        { type: "text-end", id },
        { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage },
      ] }),
    }),
  });
}

export class Assistant extends Think {
  getModel() { return model(); }
  getSystemPrompt() { return "You are terse."; }
}

export default {
  async fetch(request, env) {
    return (await routeAgentRequest(request, env)) ?? new Response("not found", { status: 404 });
  },
};

// A server tool: the first step calls it, the step after its result answers.
export class Calculator extends Think {
  getModel() {
    return new MockLanguageModelV4({
      doStream: async ({ prompt }) => {
        const answered = prompt.at(-1)?.role === "tool";
        const chunks = answered
          ? [{ type: "text-start", id: "t2" }, { type: "text-delta", id: "t2", delta: "It is 5." },
             { type: "text-end", id: "t2" }]
          : [ // streamed as a real provider streams a call's input
            { type: "tool-input-start", id: "call_1", toolName: "add" },
            { type: "tool-input-delta", id: "call_1", delta: '{"a": 2,' },
            { type: "tool-input-delta", id: "call_1", delta: ' "b": 3}' },
            { type: "tool-input-end", id: "call_1" },
            { type: "tool-call", toolCallId: "call_1", toolName: "add", input: '{"a": 2, "b": 3}' }];
        return { stream: simulateReadableStream({ chunks: [
          { type: "stream-start", warnings: [] }, ...chunks,
          { type: "finish", finishReason: answered ? { unified: "stop", raw: "stop" }
            : { unified: "tool-calls", raw: "tool_calls" }, usage },
        ] }) };
      },
    });
  }
  getTools() {
    return { add: tool({ description: "Add two numbers", inputSchema: z.object({ a: z.number(), b: z.number() }),
      execute: async ({ a, b }) => a + b }) };
  }
}

// A provider that fails before streaming anything.
export class Broken extends Think {
  getModel() {
    return new MockLanguageModelV4({ doStream: async () => { throw new Error("provider exploded"); } });
  }
}

// A scripted model: `reply(prompt)` returns the chunks of one step (between stream-start and finish). The step
// after a tool result starts 300 ms late, so a socket's acknowledgement of the continuation arrives before it.
function scripted(reply) {
  return new MockLanguageModelV4({
    doStream: async ({ prompt }) => {
      const chunks = reply(prompt);
      const calls = chunks.some((c) => c.type === "tool-call");
      return { stream: simulateReadableStream({ initialDelayInMs: answered(prompt) ? 300 : 0, chunks: [
        { type: "stream-start", warnings: [] }, ...chunks,
        { type: "finish", finishReason: calls ? { unified: "tool-calls", raw: "tool_calls" }
          : { unified: "stop", raw: "stop" }, usage },
      ] }) };
    },
  });
}

const answered = (prompt) => prompt.at(-1)?.role === "tool";
const say = (text, id = `t${++texts}`) => [{ type: "text-start", id }, { type: "text-delta", id, delta: text }, { type: "text-end", id }];
// A call's input streams in two halves, as a real provider streams it (and as think_actors' scripted model does).
const call = (toolName, input) => {
  const half = Math.floor(input.length / 2);
  return [{ type: "tool-input-start", id: "call_1", toolName },
    { type: "tool-input-delta", id: "call_1", delta: input.slice(0, half) },
    { type: "tool-input-delta", id: "call_1", delta: input.slice(half) },
    { type: "tool-input-end", id: "call_1" }, { type: "tool-call", toolCallId: "call_1", toolName, input }];
};

// A client tool (offered in the request body): the first step calls it, the continuation after its result answers.
export class Locator extends Think {
  getModel() {
    return scripted((prompt) => answered(prompt) ? say("You are in Paris.") : call("getLocation", '{}'));
  }
}

// A server tool that needs a person's approval before it runs.
export class Guarded extends Think {
  getModel() {
    return scripted((prompt) => answered(prompt) ? say("Done.") : call("deleteFile", '{"path": "/tmp/x"}'));
  }
  getTools() {
    return { deleteFile: tool({ description: "Delete a file", inputSchema: z.object({ path: z.string() }),
      needsApproval: true, execute: async ({ path }) => `deleted ${path}` }) };
  }
}

// A model that streams the start of an answer, then waits until the turn is aborted (as a slow provider would).
export class Staller extends Think {
  getModel() {
    return new MockLanguageModelV4({
      doStream: async ({ abortSignal }) => ({
        stream: new ReadableStream({
          start(controller) {
            for (const chunk of [{ type: "stream-start", warnings: [] }, { type: "text-start", id: "t1" },
              { type: "text-delta", id: "t1", delta: "Hel" }]) controller.enqueue(chunk);
            abortSignal?.addEventListener("abort", () =>
              controller.error(abortSignal.reason ?? new DOMException("aborted", "AbortError")));
          },
        }),
      }),
    });
  }
}

// message_concurrency: the first turn's model answers 300 ms late, so the next requests overlap it.
function slowFirst() {
  let calls = 0;
  return new MockLanguageModelV4({
    doStream: async (_, id = `t${++texts}`) => ({
      stream: simulateReadableStream({ initialDelayInMs: calls++ === 0 ? 300 : 0, chunks: [
        { type: "stream-start", warnings: [] }, ...say("Hello", id),
        { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage },
      ] }),
    }),
  });
}

export class Queueing extends Think { // the default messageConcurrency: "queue"
  getModel() { return slowFirst(); }
}

export class Latest extends Think {
  messageConcurrency = "latest";
  getModel() { return slowFirst(); }
}

export class Merging extends Think {
  messageConcurrency = "merge";
  getModel() { return slowFirst(); }
}

export class Dropping extends Think {
  messageConcurrency = "drop";
  getModel() { return slowFirst(); }
}

export class Debouncing extends Think {
  messageConcurrency = { strategy: "debounce", debounceMs: 100 };
  getModel() { return slowFirst(); }
}
