"""What tests/ray/test_workflow_prompts_on_ray.py sends to Ray: an agent whose model takes a while to give its
verdict, and a Ray task (retried by Ray when its worker dies) that asks the agent for it as a workflow step."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import ray
from pydantic import BaseModel

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, tool_call


class Verdict(BaseModel):
    approved: bool
    reason: str


class SlowReviewer(ta.Think):
    """Gives its verdict after a second: long enough for the task's first worker to die waiting."""

    model = ScriptedModel([delay(1.0) + tool_call("final_answer", {"approved": True, "reason": "paid"}, id="f1")])


@ray.remote(max_retries=3)
def review(reviewer: Any, order: str, crashed_marker: str) -> dict[str, Any]:
    """One workflow step, in a Ray task. Its first attempt dies while it waits (the worker process exits, as a
    node would); Ray runs the task again, which asks for the same step and gets the one turn's result."""

    async def step(timeout_s: float) -> Any:
        return await reviewer.prompt(f"review-{order}", f"Review order {order}.", output=Verdict, timeout_s=timeout_s)

    if not os.path.exists(crashed_marker):
        open(crashed_marker, "w").close()
        with contextlib.suppress(TimeoutError):
            asyncio.run(step(0.2))
        os._exit(1)  # the worker dies mid-step
    done = asyncio.run(step(60))
    return {"status": done.status, "output": done.output.model_dump(), "id": done.submission_id}
