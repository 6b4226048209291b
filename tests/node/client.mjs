// The npm `agents` package's own chat client (AgentClient + WebSocketChatTransport) and the AI SDK's
// readUIMessageStream, driven against a think_actors gateway. Prints one JSON line per scenario result.
// Usage: node client.mjs <host:port> <scenario> <agent name>
import { AgentClient } from "agents/client";
import { WebSocketChatTransport } from "agents/chat/transport";
import { readUIMessageStream } from "ai";
import WS from "ws";

const [host, scenario, name] = process.argv.slice(2);

function connect(agent) {
  const client = new AgentClient({ host, agent, name, WebSocket: WS, protocol: "ws" });
  const opened = new Promise((resolve) => client.addEventListener("open", resolve, { once: true }));
  return { client, opened };
}

const user = (id, text) => ({ id, role: "user", parts: [{ type: "text", text }] });

// What useAgentChat does for the transport: hand it the resume handshake frames the agent sends.
function wire(client, transport) {
  client.addEventListener("message", (event) => {
    let frame;
    try { frame = JSON.parse(event.data); } catch { return; }
    if (frame.type === "cf_agent_stream_resuming") transport.handleStreamResuming(frame);
    else if (frame.type === "cf_agent_stream_resume_none") transport.handleStreamResumeNone(frame);
    else if (frame.type === "cf_agent_stream_pending") transport.handleStreamPending();
  });
  return transport;
}

async function last(stream, onMessage) {
  let message;
  for await (const m of readUIMessageStream({ stream })) {
    message = m;
    if (onMessage) onMessage(m);
  }
  return message;
}

async function send(transport, messages, extra = {}) {
  return transport.sendMessages({ chatId: name, messages, abortSignal: extra.signal, trigger: "submit-message" });
}

const scenarios = {
  async plain() {
    const { client, opened } = connect("shop");
    await opened;
    const transport = new WebSocketChatTransport({ agent: client });
    const message = await last(await send(transport, [user("u1", "hello")]));
    client.close();
    return message;
  },
  async tool() {
    const { client, opened } = connect("shop");
    await opened;
    const transport = new WebSocketChatTransport({ agent: client });
    const message = await last(await send(transport, [user("u1", "price of tea?")]));
    client.close();
    return message;
  },
  async clientTool() {
    const { client, opened } = connect("shop");
    await opened;
    const clientTools = [{ name: "get_location", description: "Where the user is", parameters: { type: "object", properties: {} } }];
    const transport = wire(client, new WebSocketChatTransport({ agent: client, prepareBody: () => ({ clientTools }) }));
    const first = await last(await send(transport, [user("u1", "where am I?")]));
    const call = first.parts.find((p) => p.type === "tool-get_location");
    // As useAgentChat's addToolOutput does: send the result, then follow the continuation it starts.
    client.send(JSON.stringify({ type: "cf_agent_tool_result", toolCallId: call.toolCallId, toolName: "get_location", output: { city: "Oslo" }, autoContinue: true }));
    transport.expectToolContinuation();
    const second = await last(await transport.reconnectToStream({ chatId: name }));
    client.close();
    return { first, second };
  },
  async cancel() {
    const { client, opened } = connect("shop");
    await opened;
    const transport = new WebSocketChatTransport({ agent: client });
    const controller = new AbortController();
    const stream = await send(transport, [user("u1", "tell me a long story")], { signal: controller.signal });
    let aborted = false;
    try {
      await last(stream, (m) => {
        if (!aborted && m.parts.some((p) => p.type === "text" && p.text.length > 0)) {
          aborted = true;
          controller.abort();
        }
      });
    } catch (err) {
      // the reader reports the abort; the server got the cancel frame
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    client.close();
    return { aborted };
  },
  async reconnect() {
    const first = connect("shop");
    await first.opened;
    const transport = new WebSocketChatTransport({ agent: first.client });
    const stream = await send(transport, [user("u1", "tell me a long story")]);
    const reader = stream.getReader();
    let seen = [];
    while (true) {
      const { value } = await reader.read();
      seen.push(value.type);
      if (value.type === "text-delta") break;
    }
    first.client.close();  // the tab goes away mid-stream
    const second = connect("shop");
    await second.opened;
    const resumed = wire(second.client, new WebSocketChatTransport({ agent: second.client }));
    const again = await resumed.reconnectToStream({ chatId: name });
    const message = again ? await last(again) : null;
    second.client.close();
    return { before: seen, message };
  },
};

const result = await scenarios[scenario]();
console.log(JSON.stringify(result));
process.exit(0);
