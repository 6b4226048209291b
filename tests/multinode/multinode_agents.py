"""The agents of the multi-node scenario; every node's workers import them by name (scenario.py puts this
directory on PYTHONPATH before it starts the nodes, and the gateway serves this module).

Their models hold no script position: what they answer depends only on the request and on the node they run
on, so an actor that Ray re-creates on another node answers the same request the same way, at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import ray

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, ToolCallDelta, Usage

HOLD_S = 3600.0  # how long "hold on <node>" keeps a turn running on that node: until the node is gone


def this_node() -> str:
    return ray.get_runtime_context().get_node_id()


def last_user_text(request: ModelRequest) -> str:
    content = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content)
    return str(content)


class NodeEcho:
    """Answers ``echo: <last user text>``; ``hold on <node id>`` is answered only after HOLD_S on that node (so
    its turn runs until the node dies) and at once anywhere else (where Ray re-creates the agent)."""

    model_id = "node-echo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        text = last_user_text(request)
        if text == f"hold on {this_node()}":
            await asyncio.sleep(HOLD_S)
        yield TextDelta(f"echo: {text}")
        yield FinishEvent("stop", Usage())


class Echo(ta.Think):
    model = NodeEcho()


class NodeReport:
    """Says which node it runs on, in two pieces (so the parent forwards more than one text chunk)."""

    model_id = "node-report"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        yield TextDelta("helper on ")
        yield TextDelta(this_node())
        yield FinishEvent("stop", Usage())


class Helper(ta.Think):
    model = NodeReport()


class AskTheHelper:
    """Calls the helper (a fixed call id), then answers with what it said."""

    model_id = "ask-the-helper"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if not results:
            yield ToolCallDelta(0, "call-helper", "ask_helper", '{"input": "where are you?"}')
            yield FinishEvent("tool_calls", Usage())
        else:
            yield TextDelta(f"lead heard: {results[-1]}")
            yield FinishEvent("stop", Usage())


class Lead(ta.Think):
    """A parent whose agent tool places its child on ``child_node`` (its own node is chosen by its spawn)."""

    model = AskTheHelper()

    def __init__(self, *args: Any, child_node: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tools = (ta.agent_tool(Helper, name="ask_helper", description="Ask the helper.", node_id=child_node),)
