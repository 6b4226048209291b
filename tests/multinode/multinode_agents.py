"""The agents of the multi-node scenario; every node's workers import them by name (scenario.py puts this
directory on PYTHONPATH before it starts the nodes, and the gateway serves this module).

Their models hold no script position: what they answer depends only on the request and on the node they run
on, so an actor that Ray re-creates on another node answers the same request the same way, at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import ray

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, ToolCallDelta, Usage

HOLD_S = 3600.0  # how long "hold on <node>" keeps a turn running on that node: until the node is gone
COUNTER = "refund-counter"  # the named actor counting RefundDesk's refunds, on the head (it outlives w2)


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


@ray.remote(num_cpus=0)
class Counter:
    """Counts the refunds that ran, whichever process ran them."""

    def __init__(self) -> None:
        self.calls = 0

    async def bump(self) -> int:
        self.calls += 1
        return self.calls

    async def count(self) -> int:
        return self.calls


class DeskModel:
    """No tool result yet: a refund call; a paused one: that it waits; else: that the refund is done."""

    model_id = "desk"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if not results:
            yield ToolCallDelta(0, "r1", "refund", '{"order": "A-1"}')
            yield FinishEvent("tool_calls", Usage())
            return
        yield TextDelta("Waiting for approval." if "paused" in str(results[-1]) else "Refund done.")
        yield FinishEvent("stop", Usage())


class RefundDesk(ta.Think):
    """Asks for a refund, a durable-pause action (it parks), and once it is approved says it is done."""

    model = DeskModel()

    @ta.action(kind="durable-pause", permissions=["orders:refund"], idempotency_key=lambda value: value["order"])
    async def refund(self, order: str) -> str:
        """Refund an order."""
        counter = ray.get_actor(COUNTER, namespace=ray.get_runtime_context().namespace)
        await counter.bump.remote()
        return f"refunded {order}"


class ApproveWhatIsAsked:
    """``approve <execution id>``: calls ``approve`` with that id (a fixed call id), then answers with its output."""

    model_id = "approve-what-is-asked"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if not results:
            execution_id = last_user_text(request).removeprefix("approve ")
            yield ToolCallDelta(0, "call-approve", "approve", json.dumps({"execution_id": execution_id}))
            yield FinishEvent("tool_calls", Usage())
        else:
            yield TextDelta(f"approver heard: {results[-1]}")
            yield FinishEvent("stop", Usage())


class Approver(ta.Think):
    """Approves the parked actions of ``desk`` (an AgentHandle: it pickles into this actor, wherever that runs)."""

    model = ApproveWhatIsAsked()

    def __init__(self, *args: Any, desk: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.desk = desk

    @ta.tool
    async def approve(self, execution_id: str) -> Any:
        """Approve one of the desk's parked actions.

        Args:
            execution_id: The parked action's execution id.
        """
        return await self.desk.approve_execution(execution_id)
