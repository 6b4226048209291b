"""A durable-pause action on Ray: the call parks in the agent's actor, the actor is killed and restarted, and a
person approves from another process (a Ray task holding the pickled handle). The action runs once (a second
approve, racing or late, is refused), the paused output is replaced, and the conversation continues with nobody
connected. A hibernated agent's parked action is rejected through its handle, which wakes it."""

from __future__ import annotations

from typing import Any

from action_agents import COUNTER, RefundDesk, approve_from_elsewhere
from ray_agents import Counter

import think_actors as ta


async def test_a_parked_action_outlives_its_actor_and_is_approved_from_another_process(
    ray_runtime: Any, unique: str
) -> None:
    named = {"name": COUNTER, "namespace": ray_runtime.namespace, "get_if_exists": True}
    counter: Any = Counter.options(**named).remote()  # type: ignore[attr-defined]
    desk = await ta.spawn(RefundDesk, unique)
    await desk.save_messages("Please refund order A-1.")
    [pending] = await desk.pending_approvals()
    assert pending.descriptor["action"] == "refund" and pending.descriptor["input"] == {"order": "A-1"}

    await desk.kill(restart=True)  # the process goes away; the pending approval is in the agent's store
    assert [p.execution_id for p in await desk.pending_approvals()] == [pending.execution_id]

    first = await approve_from_elsewhere.remote(desk, pending.execution_id)
    second = await desk.approve_execution(pending.execution_id)
    await desk.wait_until_stable(timeout_s=60)

    assert first == "refunded A-1"
    assert second["status"] == "error" and "no longer pending" in second["error"]
    assert await counter.count.remote() == 1
    messages = await desk.load_messages()
    outputs = [p.output for m in messages for p in m.parts if isinstance(p, ta.ToolPart)]
    assert outputs == ["refunded A-1"]
    assert messages[-1].text == "Refund done."
    assert await desk.pending_approvals() == []


async def test_a_parked_action_of_a_hibernated_agent_wakes_it_when_approved(ray_runtime: Any, unique: str) -> None:
    named = {"name": COUNTER, "namespace": ray_runtime.namespace, "get_if_exists": True}
    counter: Any = Counter.options(**named).remote()  # type: ignore[attr-defined]
    before = await counter.count.remote()
    desk = await ta.spawn(RefundDesk, f"{unique}-sleepy")
    await desk.save_messages("Please refund order A-1.")
    [pending] = await desk.pending_approvals()

    await desk.kill(restart=False)  # hibernated: not resident, still addressable
    rejected = await desk.reject_execution(pending.execution_id, "not this one")
    await desk.wait_until_stable(timeout_s=60)

    assert rejected["status"] == "rejected" and rejected["reason"] == "not this one"
    assert await counter.count.remote() == before  # the refund never ran
    messages = await desk.load_messages()
    outputs = [p.output for m in messages for p in m.parts if isinstance(p, ta.ToolPart)]
    assert outputs == [rejected]
    assert messages[-1].text == "Not approved."  # the conversation went on with the rejection
