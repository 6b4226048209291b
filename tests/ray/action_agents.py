"""The agent of tests/ray/test_actions_on_ray.py (Ray workers import it by name): a refund desk whose refund is a
durable-pause action, the side effect counted by a named Counter actor so any process can see how often it ran."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import ray

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, ToolCallDelta, Usage

COUNTER = "refund-counter"


class DeskModel:
    """Answers from the request alone (a restarted actor gets the same answers): no tool result yet, a refund
    call; a paused one, that it waits; a rejected one, that it was not approved; else, that the refund is done."""

    model_id = "desk"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if not results:
            yield ToolCallDelta(0, "r1", "refund", '{"order": "A-1"}')
            yield FinishEvent("tool_calls", Usage())
            return
        last = str(results[-1])
        said = (
            "Waiting for approval." if "paused" in last else "Not approved." if "rejected" in last else "Refund done."
        )
        yield TextDelta(said)
        yield FinishEvent("stop", Usage())


class RefundDesk(ta.Think):
    """Asks for a refund (parks), then, once a person answered, says what happened."""

    model = DeskModel()

    @ta.action(kind="durable-pause", permissions=["orders:refund"], idempotency_key=lambda value: value["order"])
    async def refund(self, order: str) -> str:
        """Refund an order."""
        counter = ray.get_actor(COUNTER, namespace=ray.get_runtime_context().namespace)
        await counter.bump.remote()
        return f"refunded {order}"


@ray.remote
def approve_from_elsewhere(desk: Any, execution_id: str) -> Any:
    """A person's approval, sent from another process of the cluster (a dashboard's worker, say)."""
    return asyncio.run(desk.approve_execution(execution_id))
