// The reference agent for the wire capture: Think with a scripted AI SDK model (see capture.mjs).
import { Think } from "@cloudflare/think";
import { routeAgentRequest } from "agents";
import { MockLanguageModelV4 } from "ai/test";
import { simulateReadableStream, tool } from "ai";
import { z } from "zod";

const usage = { inputTokens: { total: 3, noCache: 3, cacheRead: 0, cacheWrite: 0 },
                outputTokens: { total: 2, text: 2, reasoning: 0 } };

function model() {
  return new MockLanguageModelV4({
    doStream: async () => ({
      stream: simulateReadableStream({ chunks: [
        { type: "stream-start", warnings: [] },
        { type: "text-start", id: "t1" },
        { type: "text-delta", id: "t1", delta: "Hello" },
        { type: "text-delta", id: "t1", delta: " there" },
        { type: "text-end", id: "t1" },
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
