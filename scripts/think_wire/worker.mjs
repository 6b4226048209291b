// The reference agent for the wire capture: Think with a scripted AI SDK model (see capture.mjs).
import { Think } from "@cloudflare/think";
import { routeAgentRequest } from "agents";
import { MockLanguageModelV4 } from "ai/test";
import { simulateReadableStream } from "ai";

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
