"""The openai-agents peer of scripts/bench_live.py: ``Runner.run_streamed`` behind the floor's WebSocket server.

The server, the frames and the per-socket history are scripts/floor_relay.py's; what runs a turn is openai-agents:
an ``Agent`` with the ``lookup`` tool and an ``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI`` client pointed
at the paced provider, run with ``Runner.run_streamed(agent, input=history)``, where ``history`` is the previous
turn's ``result.to_input_list()`` plus the new user message (how their docs keep a conversation without a
session). Its stream events become the gateway's chunks: a ``response.created`` event starts a step, each
``response.output_text.delta`` is a ``text-delta``, ``response.completed`` ends the step's text; ``tool_called``
and ``tool_output`` run items give the tool chunks. Tracing is off (its default exporter sends spans to OpenAI).

Runs in the bench venv only (openai-agents lives there): .venv-bench/bin/python scripts/peer_relay.py [--port 0]
($OPENAI_API_BASE: the provider; prints ``listening on URL``)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from typing import Any

from aiohttp import web
from floor_relay import ChatFrames, serve, serve_socket
from openai import AsyncOpenAI

import agents as oa  # openai-agents (run as a script, the repo's own agents/ is not on sys.path)

if not hasattr(oa, "Runner"):
    raise SystemExit("`agents` here is the repo's demo package, not openai-agents: run this file from .venv-bench")


@oa.function_tool
def lookup(query: str) -> str:
    """Look a query up."""
    return f"found {query}"


class PeerRelay:
    """The server: one openai-agents ``Agent`` and one OpenAI client, shared by every socket."""

    def __init__(self, base: str, api_key: str) -> None:
        oa.set_tracing_disabled(True)
        # max_retries=0: a refused stream is lost, as in the other systems; no connection cap below the load's.
        client = AsyncOpenAI(base_url=base, api_key=api_key, max_retries=0)
        model = oa.OpenAIChatCompletionsModel(model="paced", openai_client=client)
        self.agent = oa.Agent(name="live", instructions="You chat.", model=model, tools=[lookup])

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/agents/{agent}/{name}", self.socket)
        return app

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        return await serve_socket(request, self.turn)

    async def turn(self, frames: ChatFrames, text: str, history: list[Any]) -> None:
        result = oa.Runner.run_streamed(self.agent, input=[*history, {"role": "user", "content": text}], max_turns=4)
        await frames.chunk({"type": "start", "messageId": uuid.uuid4().hex})
        text_id = None
        async for event in result.stream_events():
            if event.type == "raw_response_event":
                kind = event.data.type
                if kind == "response.created":
                    await frames.chunk({"type": "start-step"})
                elif kind == "response.output_text.delta":
                    if text_id is None:
                        text_id = uuid.uuid4().hex
                        await frames.chunk({"type": "text-start", "id": text_id})
                    await frames.chunk({"type": "text-delta", "id": text_id, "delta": event.data.delta})
                elif kind == "response.completed" and text_id is not None:
                    await frames.chunk({"type": "text-end", "id": text_id})
                    text_id = None
            elif event.type == "run_item_stream_event" and event.name == "tool_called":
                call = event.item.raw_item
                await frames.chunk({"type": "tool-input-start", "toolCallId": call.call_id, "toolName": call.name})
                await frames.chunk(
                    {"type": "tool-input-delta", "toolCallId": call.call_id, "inputTextDelta": call.arguments}
                )
                available = {"type": "tool-input-available", "toolCallId": call.call_id, "toolName": call.name}
                await frames.chunk({**available, "input": json.loads(call.arguments or "{}")})
            elif event.type == "run_item_stream_event" and event.name == "tool_output":
                call_id = event.item.raw_item["call_id"]
                await frames.chunk(
                    {"type": "tool-output-available", "toolCallId": call_id, "output": event.item.output}
                )
                await frames.chunk({"type": "finish-step"})
        await frames.chunk({"type": "finish-step"})
        await frames.chunk({"type": "finish", "finishReason": "stop"})
        history[:] = result.to_input_list()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    relay = PeerRelay(os.environ["OPENAI_API_BASE"], os.environ.get("OPENAI_API_KEY", "sk-bench"))
    asyncio.run(serve(args.host, args.port, relay.app()))


if __name__ == "__main__":
    main()
