"""The floor of scripts/bench_live.py: the least a WebSocket chat server can do and still speak the gateway's protocol.

A chat request (``cf_agent_use_chat_request``) streams the provider's answer (OpenAI chat completions over SSE,
read with aiohttp) and sends it as the gateway does: one ``cf_agent_use_chat_response`` frame per chunk of the AI
SDK's UI message stream (``start``, ``start-step``, ``text-start``, a ``text-delta`` per provider token,
``text-end``, ``finish-step``, ``finish``), numbered by ``seq``, then the terminal frame (``done: true``,
``outcome``, ``messageIds``). A tool call the model makes is run here (``lookup``, as scripts/live_agents.py
has it), its chunks sent as the gateway sends them, and its result goes back to the model for the next step.

What it leaves out is the point: no agent, no hooks, no store, no transcript frames, no resume, no turn queue (a
socket's requests run one after the other, the socket unread meanwhile). A conversation's history is kept per socket
in memory, as any chat server sends it to the provider.

``ChatFrames`` and ``turn_frames`` are shared with scripts/peer_relay.py, the openai-agents server.

Usage: python scripts/floor_relay.py [--port 0]   ($OPENAI_API_BASE: the provider; prints ``listening on URL``)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

CHAT_REQUEST = "cf_agent_use_chat_request"
CHAT_RESPONSE = "cf_agent_use_chat_response"
MAX_STEPS = 4  # as live_agents.LiveChat
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a query up.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


def dumps(value: Any) -> str:
    """JSON as the gateway writes it (compact, non-ASCII kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def lookup(query: str) -> str:
    """The tool of scripts/live_agents.py."""
    return f"found {query}"


class ChatFrames:
    """The response frames of one chat request, numbered as the gateway numbers them."""

    def __init__(self, ws: web.WebSocketResponse, request_id: str, message_ids: list[str]) -> None:
        self.ws = ws
        self.request_id = request_id
        self.message_ids = message_ids
        self.seq = 0

    async def chunk(self, chunk: dict[str, Any]) -> None:
        frame = {"type": CHAT_RESPONSE, "id": self.request_id, "body": dumps(chunk), "done": False, "seq": self.seq}
        self.seq += 1
        await self.ws.send_str(dumps(frame))

    async def done(self, outcome: str = "completed") -> None:
        frame = {"type": CHAT_RESPONSE, "id": self.request_id, "body": "", "done": True, "outcome": outcome}
        await self.ws.send_str(dumps({**frame, "messageIds": self.message_ids}))

    async def error(self, text: str) -> None:
        frame = {"type": CHAT_RESPONSE, "id": self.request_id, "body": text, "done": True, "error": True}
        await self.ws.send_str(dumps({**frame, "messageIds": self.message_ids}))


def chat_request(data: str) -> tuple[str, str, list[str]] | None:
    """A chat request frame's id, the text of its last user message and the ids of its trailing user messages;
    None for any other frame."""
    frame = json.loads(data)
    if frame.get("type") != CHAT_REQUEST:
        return None
    messages = json.loads(frame["init"]["body"])["messages"]
    ids: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "user":
            break
        ids.insert(0, message["id"])
    text = "".join(p.get("text", "") for p in messages[-1]["parts"] if p.get("type") == "text")
    return frame["id"], text, ids


async def serve_socket(request: web.Request, turn: Any) -> web.WebSocketResponse:
    """A socket: each chat request runs ``turn(frames, text, history)`` to its end; ``history`` is the socket's."""
    ws = web.WebSocketResponse(max_msg_size=4 * 1024 * 1024)
    await ws.prepare(request)
    history: list[Any] = []
    async for message in ws:
        if message.type != aiohttp.WSMsgType.TEXT:
            continue
        parsed = chat_request(message.data)
        if parsed is None:
            continue
        request_id, text, ids = parsed
        frames = ChatFrames(ws, request_id, ids)
        try:
            await turn(frames, text, history)
        except Exception as err:  # the socket hears it, as from the gateway
            if not ws.closed:
                await frames.error(f"{type(err).__name__}: {err}")
        else:
            await frames.done()
    return ws


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of a chat-completions SSE stream, up to ``[DONE]``."""
    async for line in response.content:
        if not line.startswith(b"data: "):
            continue
        payload = line[6:].strip()
        if payload == b"[DONE]":
            return
        yield json.loads(payload)


class FloorRelay:
    """The server: one aiohttp session to the provider, shared by every socket."""

    def __init__(self, base: str, api_key: str) -> None:
        self.url = base.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/agents/{agent}/{name}", self.socket)
        app.router.add_get("/health", self.health)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app: web.Application) -> None:
        # No connection limit: aiohttp's default (100) would queue the 101st concurrent stream.
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def _close(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        return await serve_socket(request, self.turn)

    async def turn(self, frames: ChatFrames, text: str, history: list[dict[str, Any]]) -> None:
        """One chat turn: model steps until one ends without tool calls."""
        assert self.session is not None
        history.append({"role": "user", "content": text})
        await frames.chunk({"type": "start", "messageId": uuid.uuid4().hex})
        for _ in range(MAX_STEPS):
            await frames.chunk({"type": "start-step"})
            body = {"model": "paced", "messages": history, "stream": True, "tools": [LOOKUP]}
            async with self.session.post(self.url, json=body, headers=self.headers) as response:
                response.raise_for_status()
                reply, calls = await step_frames(frames, sse_events(response))
            if not calls:
                history.append({"role": "assistant", "content": reply})
                await frames.chunk({"type": "finish-step"})
                await frames.chunk({"type": "finish", "finishReason": "stop"})
                return
            history.append({"role": "assistant", "content": reply or None, "tool_calls": calls})
            for call in calls:
                name, arguments = call["function"]["name"], call["function"]["arguments"]
                tool_input = json.loads(arguments or "{}")
                available = {"type": "tool-input-available", "toolCallId": call["id"], "toolName": name}
                await frames.chunk({**available, "input": tool_input})
                output = lookup(**tool_input)
                await frames.chunk({"type": "tool-output-available", "toolCallId": call["id"], "output": output})
                history.append({"role": "tool", "tool_call_id": call["id"], "content": output})
            await frames.chunk({"type": "finish-step"})
        await frames.chunk({"type": "finish", "finishReason": "tool-calls"})


async def step_frames(frames: ChatFrames, events: AsyncIterator[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Send one model step's text and tool-call chunks; returns its text and its tool calls (OpenAI's shape)."""
    text_id = None
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async for event in events:
        if not event.get("choices"):
            continue
        delta = event["choices"][0].get("delta") or {}
        if delta.get("content"):
            if text_id is None:
                text_id = uuid.uuid4().hex
                await frames.chunk({"type": "text-start", "id": text_id})
            text.append(delta["content"])
            await frames.chunk({"type": "text-delta", "id": text_id, "delta": delta["content"]})
        for fragment in delta.get("tool_calls") or ():
            call = calls.get(fragment["index"])
            function = fragment.get("function") or {}
            if call is None:
                call = calls[fragment["index"]] = {"id": fragment["id"], "type": "function"}
                call["function"] = {"name": function.get("name", ""), "arguments": ""}
                start = {"type": "tool-input-start", "toolCallId": call["id"], "toolName": call["function"]["name"]}
                await frames.chunk(start)
            if function.get("arguments"):
                call["function"]["arguments"] += function["arguments"]
                delta_chunk = {"type": "tool-input-delta", "toolCallId": call["id"]}
                await frames.chunk({**delta_chunk, "inputTextDelta": function["arguments"]})
    if text_id is not None:
        await frames.chunk({"type": "text-end", "id": text_id})
    return "".join(text), [calls[i] for i in sorted(calls)]


async def serve(host: str, port: int, app: web.Application) -> None:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = runner.addresses[0]
    print(f"listening on http://{bound[0]}:{bound[1]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    relay = FloorRelay(os.environ["OPENAI_API_BASE"], os.environ.get("OPENAI_API_KEY", "sk-bench"))
    asyncio.run(serve(args.host, args.port, relay.app()))


if __name__ == "__main__":
    main()
