"""Actions (Think's ``action()``): permissions through ``authorize_turn`` / ``authorize_action``, the ledger
(replay, key conflict, a run of unknown outcome), the timeout and output cap, error envelopes, and durable-pause
actions that park for a person and run when approved, hours later, with no socket.

Ported from the reference's ``actions-durable-pause.test.ts`` (park without the side effect, pending approvals with
their descriptor, exactly-once approve by claim-by-delete, concurrent approves, reject, approve after reject, the
approval predicate deciding inline vs park, an action removed before approve, an idempotency-keyed second park
replayed, the connection-less continuation after approve, the outcome note when the paused part is gone) and the
actions cases of ``hooks.test.ts`` (permissioned actions allowed by default, denied before execute)."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import pytest

import think_actors as ta
from think_actors import actions
from think_actors.testing import ScriptedModel, delay, text, tool_call


class Shop(ta.Think):
    """Refunds (durable pause, high risk), a lookup (server action), a slow and a chatty one."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.refunded: list[str] = []
        self.lookups = 0

    @ta.action(
        kind="durable-pause", permissions=["orders:refund"], approval_summary="Refund an order", approval_risk="high"
    )
    async def refund(self, order: str) -> str:
        """Refund an order."""
        self.refunded.append(order)
        return f"refunded {order}"

    @ta.action(permissions=["orders:read"], idempotency_key=lambda value: value["order"])
    async def lookup(self, order: str) -> str:
        """Look an order up."""
        self.lookups += 1
        return f"order {order}: shipped"

    @ta.action(timeout_s=0.05)
    async def slow(self) -> str:
        """Takes too long."""
        await asyncio.sleep(5)
        return "never"

    @ta.action
    async def chatty(self) -> str:
        """Says too much."""
        return "x" * 25_000

    @ta.action
    async def broken(self) -> str:
        """Fails."""
        raise ValueError("the warehouse is closed")


def shop(*steps: Any, cls: type[Shop] = Shop) -> Shop:
    return cls("shop", model=ScriptedModel(list(steps)), store=ta.MemoryStore())


def outputs(agent: ta.Think) -> dict[str, Any]:
    return {p.tool_call_id: p.output for m in agent.get_messages() for p in m.parts if isinstance(p, ta.ToolPart)}


async def test_a_durable_pause_action_parks_without_its_side_effect_and_lists_its_descriptor() -> None:
    agent = shop(tool_call("refund", {"order": "7"}, id="r1"), text("Waiting for approval."))

    await agent.save_messages("refund order 7")

    paused = outputs(agent)["r1"]
    assert paused["status"] == "paused" and paused["action"] == "refund"
    assert paused["executionId"].startswith("actpause_")
    assert "permissions" not in paused and "descriptor" not in paused  # the model sees the minimum
    assert agent.refunded == []
    [pending] = await agent.pending_approvals()
    assert pending.execution_id == paused["executionId"]
    assert pending.descriptor == {
        "requestId": pending.descriptor["requestId"],
        "toolCallId": "r1",
        "action": "refund",
        "summary": "Refund an order",
        "input": {"order": "7"},
        "permissions": ["orders:refund"],
        "kind": "durable-pause",
        "risk": "high",
    }


async def test_approve_runs_it_once_replaces_the_paused_output_and_continues_with_no_socket() -> None:
    agent = shop(tool_call("refund", {"order": "7"}, id="r1"), text("Waiting."), text("Refund done."))
    await agent.save_messages("refund order 7")
    [pending] = await agent.pending_approvals()

    result = await agent.approve_execution(pending.execution_id)
    again = await agent.approve_execution(pending.execution_id)
    await agent.wait_until_stable(timeout_s=10)

    assert result == "refunded 7" and agent.refunded == ["7"]
    assert again["status"] == "error" and "no longer pending" in again["error"]
    assert outputs(agent)["r1"] == "refunded 7"
    assert agent.get_messages()[-1].text == "Refund done."  # the continuation ran, nobody connected
    assert await agent.pending_approvals() == []


async def test_concurrent_approves_pick_one_winner() -> None:
    agent = shop(tool_call("refund", {"order": "9"}, id="r1"), text("Waiting."), text("Done."))
    await agent.save_messages("refund order 9")
    [pending] = await agent.pending_approvals()

    first, second = await asyncio.gather(
        agent.approve_execution(pending.execution_id, auto_continue=False),
        agent.approve_execution(pending.execution_id, auto_continue=False),
    )

    assert [first, second].count("refunded 9") == 1 and agent.refunded == ["9"]
    loser = first if second == "refunded 9" else second
    assert loser["status"] == "error" and "no longer pending" in loser["error"]


async def test_reject_never_runs_it_and_approve_after_reject_is_an_error() -> None:
    agent = shop(tool_call("refund", {"order": "3"}, id="r1"), text("Waiting."), text("Understood."))
    await agent.save_messages("refund order 3")
    [pending] = await agent.pending_approvals()

    rejected = await agent.reject_execution(pending.execution_id, "not now")
    approved = await agent.approve_execution(pending.execution_id)
    await agent.wait_until_stable(timeout_s=10)

    assert rejected == {
        "status": "rejected",
        "executionId": pending.execution_id,
        "action": "refund",
        "reason": "not now",
    }
    assert approved["status"] == "error" and agent.refunded == []
    assert outputs(agent)["r1"] == rejected
    assert agent.get_messages()[-1].text == "Understood."


async def test_a_rejection_without_auto_continue_starts_no_turn() -> None:
    model = ScriptedModel([tool_call("refund", {"order": "3"}, id="r1"), text("Waiting.")])
    agent = Shop("shop", model=model, store=ta.MemoryStore())
    await agent.save_messages("refund order 3")
    [pending] = await agent.pending_approvals()

    await agent.reject_execution(pending.execution_id, "pause here", auto_continue=False)
    await agent.wait_until_stable(timeout_s=10)

    assert len(model.requests) == 2 and model.remaining == 0


async def test_the_approval_predicate_decides_between_running_inline_and_parking() -> None:
    class Careful(Shop):
        @ta.action(kind="durable-pause", approval=lambda value: float(value["amount"]) > 100)
        async def pay(self, amount: float) -> str:
            """Pay an amount."""
            self.refunded.append(f"paid {amount}")
            return f"paid {amount}"

    agent = shop(
        tool_call("pay", {"amount": 20}, id="p1"),
        text("Paid."),
        tool_call("pay", {"amount": 500}, id="p2"),
        text("Waiting."),
        cls=Careful,
    )
    await agent.save_messages("pay 20")
    await agent.save_messages("pay 500")

    assert outputs(agent)["p1"] == "paid 20.0"
    assert outputs(agent)["p2"]["status"] == "paused" and agent.refunded == ["paid 20.0"]


async def test_an_action_removed_before_its_approval_consumes_the_approval_with_an_error() -> None:
    agent = shop(tool_call("refund", {"order": "1"}, id="r1"), text("Waiting."), text("Sorry."))
    await agent.save_messages("refund order 1")
    [pending] = await agent.pending_approvals()

    # The next version of the agent has no refund action any more.
    restarted = ta.Think("shop", model=ScriptedModel([text("Sorry.")]), store=agent.store)
    result = await restarted.approve_execution(pending.execution_id)

    assert result["status"] == "error" and "no longer registered" in result["error"]
    assert await restarted.pending_approvals() == []


async def test_a_pause_outlives_the_agent_and_is_approved_by_a_new_one_on_the_same_store() -> None:
    agent = shop(tool_call("refund", {"order": "5"}, id="r1"), text("Waiting."))
    await agent.save_messages("refund order 5")
    [pending] = await agent.pending_approvals()
    store = copy.deepcopy(agent.store)  # the process is gone; its store stays

    later = Shop("shop", model=ScriptedModel([text("Refunded, as approved.")]), store=store)
    result = await later.approve_execution(pending.execution_id)
    await later.wait_until_stable(timeout_s=10)

    assert result == "refunded 5" and later.refunded == ["5"] and agent.refunded == []
    assert later.get_messages()[-1].text == "Refunded, as approved."


async def test_permissions_are_allowed_by_default_and_limited_by_what_authorize_turn_grants() -> None:
    class Guarded(Shop):
        async def authorize_turn(self, ctx: ta.TurnContext) -> Any:
            if ctx.principal is not None and "support" in ctx.principal.roles:
                return ta.ActionAuthorization(granted_permissions=("orders:read",))
            if ctx.principal is not None and "banned" in ctx.principal.roles:
                return "banned users may not act"
            return None

    steps = [tool_call("lookup", {"order": "1"}, id=f"l{i}") for i in range(3)]
    agent = shop(steps[0], text("ok"), steps[1], text("ok"), steps[2], text("ok"), cls=Guarded)
    refund = [tool_call("refund", {"order": "1"}, id="r1"), text("no")]
    agent.model.extend(refund)  # type: ignore[union-attr]

    await agent.save_messages("look up 1")
    await agent.save_messages("look up 1", principal=ta.Principal(id="s", roles=frozenset({"support"})))
    await agent.save_messages("look up 1", principal=ta.Principal(id="b", roles=frozenset({"banned"})))
    await agent.save_messages("refund 1", principal=ta.Principal(id="s", roles=frozenset({"support"})))

    seen = outputs(agent)
    assert seen["l0"] == "order 1: shipped" and seen["l1"] == "order 1: shipped"
    assert seen["l2"] == {
        "error": {
            "name": "ActionAuthorizationError",
            "message": "banned users may not act",
            "permissions": ["orders:read"],
        }
    }
    assert seen["r1"] == {
        "error": {
            "name": "ActionAuthorizationError",
            "message": "Missing required permission: orders:refund",
            "permissions": ["orders:refund"],
        }
    }
    assert agent.lookups == 1  # keyed by the order: the second lookup replayed the first's result


async def test_a_keyed_action_replays_and_refuses_the_same_key_with_other_input() -> None:
    class Keyed(Shop):
        @ta.action(idempotency_key="the-one-key")
        async def charge(self, amount: int) -> str:
            """Charge once."""
            self.refunded.append(str(amount))
            return f"charged {amount}"

    agent = shop(
        tool_call("charge", {"amount": 5}, id="c1"),
        text("ok"),
        tool_call("charge", {"amount": 5}, id="c2"),
        text("ok"),
        tool_call("charge", {"amount": 6}, id="c3"),
        text("ok"),
        cls=Keyed,
    )
    for _ in range(3):
        await agent.save_messages("charge")

    seen = outputs(agent)
    assert seen["c1"] == seen["c2"] == "charged 5" and agent.refunded == ["5"]
    assert seen["c3"]["error"]["name"] == "ActionKeyConflict"


async def test_a_run_left_unfinished_by_a_crash_is_not_run_again_until_its_lease_passes() -> None:
    agent = shop(
        tool_call("lookup", {"order": "2"}, id="l1"),
        text("ok"),
        tool_call("lookup", {"order": "2"}, id="l2"),
        text("ok"),
    )
    row = {"action": "lookup", "inputHash": actions._hash({"order": "2"}), "status": "pending"}
    # A process claimed the key and died before it settled: its outcome is unknown.
    await agent.store.set_kv("action-ledger:action:lookup:2", {**row, "updatedAt": time.time()})
    await agent.save_messages("look up 2")
    assert outputs(agent)["l1"]["error"]["name"] == "ActionPendingError" and agent.lookups == 0

    # Five minutes later an explicitly keyed action is safe to run again (the key is the developer's promise).
    await agent.store.set_kv("action-ledger:action:lookup:2", {**row, "updatedAt": time.time() - 301})
    await agent.save_messages("look up 2")
    assert outputs(agent)["l2"] == "order 2: shipped" and agent.lookups == 1


async def test_timeouts_caps_and_exceptions_become_envelopes_the_model_reads() -> None:
    agent = shop(
        tool_call("slow", {}, id="s1"),
        tool_call("chatty", {}, id="c1"),
        tool_call("broken", {}, id="b1"),
        text("ok"),
    )
    agent.model.steps[:3] = [agent.model.steps[0] + agent.model.steps[1] + agent.model.steps[2]]  # type: ignore[union-attr]

    await agent.save_messages("try them")

    seen = outputs(agent)
    assert seen["s1"] == {"error": {"name": "TimeoutError", "message": "Action timed out after 0.05 s"}}
    assert seen["c1"].startswith("x" * 100) and seen["c1"].endswith("[truncated 5000 chars]")
    assert seen["b1"] == {"error": {"name": "ValueError", "message": "the warehouse is closed"}}


def test_bad_action_definitions_are_refused_where_they_are_written() -> None:
    with pytest.raises(ta.ConfigurationError, match="never parks"):
        ta.action(kind="durable-pause", approval=False)(lambda order: order)
    with pytest.raises(ta.ConfigurationError, match="action kind 'later'"):
        ta.action(kind="later")  # type: ignore[arg-type]
    with pytest.raises(ta.ConfigurationError, match="timeout_s must be"):
        ta.action(timeout_s=0)


async def test_an_approved_actions_input_cannot_be_changed_by_before_tool_call() -> None:
    class Rewriting(Shop):
        @ta.action(approval=True)
        async def transfer(self, amount: int) -> str:
            """Transfer money (a person approves each transfer)."""
            self.refunded.append(f"transferred {amount}")
            return f"transferred {amount}"

        async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
            return ta.Allow(input={"amount": 10_000}) if ctx.tool_name == "transfer" else None

    agent = shop(tool_call("transfer", {"amount": 5}, id="t1"), text("Done?"), cls=Rewriting)
    await agent.save_messages("send 5")
    assert next(p for p in agent.get_messages()[-1].parts if isinstance(p, ta.ToolPart)).state == "approval-requested"

    assert await agent.add_tool_approval("t1", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=10)

    assert outputs(agent)["t1"] == {
        "error": {
            "name": "ActionApprovalInputError",
            "message": "Approved action input cannot be changed by before_tool_call",
        }
    }
    assert agent.refunded == []


async def test_another_agent_approves_a_parked_action_from_its_tool() -> None:
    desk = shop(tool_call("refund", {"order": "8"}, id="r1"), text("Waiting."), text("Refunded."))
    handle = ta.LocalAgentHandle(desk)

    class Supervisor(ta.Think):
        @ta.tool
        async def approve_all(self) -> list[Any]:
            """Approve every refund waiting at the desk."""
            return [await handle.approve_execution(p.execution_id) for p in await handle.pending_approvals()]

    await desk.save_messages("refund order 8")
    supervisor = Supervisor(
        "boss", model=ScriptedModel([tool_call("approve_all", {}), text("Approved.")]), store=ta.MemoryStore()
    )
    await supervisor.save_messages("approve what waits")
    await desk.wait_until_stable(timeout_s=10)

    assert desk.refunded == ["8"] and outputs(supervisor)
    assert desk.get_messages()[-1].text == "Refunded."


async def test_an_approval_racing_a_cancelled_turn_runs_once_and_continues_after_it() -> None:
    agent = shop(
        tool_call("refund", {"order": "4"}, id="r1"),
        text("Waiting."),
        delay(0.5) + text("never finished"),  # a new turn, cancelled while the approval arrives
        text("Refund done."),
    )
    await agent.save_messages("refund order 4")
    [pending] = await agent.pending_approvals()

    stream = agent.chat("anything else?")
    reading = asyncio.ensure_future(stream.collect())
    await asyncio.sleep(0.05)
    approved = asyncio.ensure_future(agent.approve_execution(pending.execution_id))
    agent.cancel_chat(stream.request_id)
    await reading
    result = await approved
    await agent.wait_until_stable(timeout_s=10)

    assert stream.outcome.status == "aborted"
    assert result == "refunded 4" and agent.refunded == ["4"]
    assert outputs(agent)["r1"] == "refunded 4"
    assert agent.get_messages()[-1].text == "Refund done."
    assert await agent.pending_approvals() == []
