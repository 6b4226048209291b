"""Client tool results, approvals and auto-continuation from Python (reference §1.9; the client-tools.test.ts
cases that do not need a socket). The same through WebSocket frames is in test_gateway.py."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import RecordingAgent

import think_actors as ta
from think_actors.testing import ScriptedModel, step, text, tool_call

WAIT_S = 5
ASK = {"name": "ask", "description": "Ask the user", "parameters": {"type": "object", "properties": {}}}
LOCATE = {"name": "locate", "description": "Where the user is", "parameters": {"type": "object", "properties": {}}}


class Shop(RecordingAgent):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.charged: list[Any] = []
        agent = self

        @ta.tool(needs_approval=True)
        async def charge(amount: int) -> str:
            """Charge the card."""
            agent.charged.append(amount)
            if amount < 0:
                raise ValueError("negative amounts cannot be charged")
            return f"charged {amount}"

        @ta.tool(needs_approval=lambda input: input.get("amount", 0) > 100)
        async def refund(amount: int) -> str:
            """Refund; large refunds need approval."""
            return f"refunded {amount}"

        self.tools = (charge, refund)


def parts_of(agent: ta.Think) -> dict[str, tuple[str, Any]]:
    return {
        p.tool_call_id: (p.state, p.output if p.state == "output-available" else p.error_text)
        for m in agent.get_messages()
        for p in m.parts
        if isinstance(p, ta.ToolPart)
    }


def texts(agent: ta.Think) -> list[str]:
    return [m.text for m in agent.get_messages() if m.text]


async def client_call(agent: ta.Think, *calls: str, tools: list[Any] | None = None) -> None:
    """A turn whose model calls the client tools ``calls`` and ends waiting for their results; the client's tools
    are stored first, as the gateway stores a request's (so continuations offer them and their calls wait)."""
    await agent.set_client_tools(tools or [ASK, LOCATE])
    await agent.chat("go", client_tools=tools or [ASK, LOCATE]).collect()


async def test_a_client_tool_result_settles_the_call_and_auto_continues() -> None:
    model = ScriptedModel([tool_call("ask", {}, id="c1"), text("thanks, Oslo it is")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await client_call(agent, "c1")
    assert parts_of(agent) == {"c1": ("input-available", None)}
    assert agent.has_pending_interaction()

    assert await agent.add_tool_result("c1", {"city": "Oslo"}, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)

    assert parts_of(agent) == {"c1": ("output-available", {"city": "Oslo"})}
    assert texts(agent)[-1] == "thanks, Oslo it is"
    assert not agent.has_pending_interaction()
    responses = agent.contexts("on_chat_response")
    assert [(r.continuation, r.status) for r in responses] == [(False, "completed"), (True, "completed")]
    assert [m["role"] for m in model.requests[1].messages][-2:] == ["assistant", "tool"]


async def test_results_first_write_wins_and_unknown_ids_are_no_ops() -> None:
    agent = Shop(model=ScriptedModel([tool_call("ask", {}, id="c1")]), store=ta.MemoryStore())
    await client_call(agent, "c1")
    assert await agent.add_tool_result("nope", 1) is False
    assert await agent.add_tool_result("c1", error="the user closed the dialog") is True
    assert await agent.add_tool_result("c1", "too late") is False
    assert parts_of(agent) == {"c1": ("output-error", "the user closed the dialog")}
    await agent.wait_until_stable(timeout_s=WAIT_S)  # no auto_continue: nothing runs
    assert len(agent.get_messages()) == 2


async def test_a_continuation_waits_for_every_parallel_result() -> None:
    model = ScriptedModel([step(tool_call("ask", {}, id="a"), tool_call("locate", {}, id="b")), text("both in")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await client_call(agent, "a", "b")
    await agent.add_tool_result("a", "yes", auto_continue=True)
    await asyncio.sleep(0.1)  # past the coalescing window: the barrier holds for b
    assert len(model.requests) == 1
    await agent.add_tool_result("b", "Oslo", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(model.requests) == 2 and texts(agent)[-1] == "both in"


async def test_an_errored_sibling_without_auto_continue_still_completes_the_batch() -> None:
    model = ScriptedModel([step(tool_call("ask", {}, id="a"), tool_call("locate", {}, id="b")), text("partly")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await client_call(agent, "a", "b")
    await agent.add_tool_result("a", "yes", auto_continue=True)
    await agent.add_tool_result("b", error="no GPS")
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert texts(agent)[-1] == "partly"


async def test_a_standalone_errored_result_without_auto_continue_does_not_continue() -> None:
    model = ScriptedModel([tool_call("ask", {}, id="a")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await client_call(agent, "a")
    await agent.add_tool_result("a", error="dismissed")
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(model.requests) == 1
    model.assert_complete()


async def test_an_approved_call_runs_in_the_continuation_through_before_tool_call() -> None:
    model = ScriptedModel([tool_call("charge", {"amount": 42}, id="p1"), text("paid")])
    agent = Shop(model=model, store=ta.MemoryStore())
    chunks = await agent.chat("pay 42").collect()
    assert [c.type for c in chunks if c.type.startswith("tool-")][-1] == "tool-approval-request"
    assert parts_of(agent) == {"p1": ("approval-requested", None)}
    assert agent.charged == [] and agent.has_pending_interaction()

    assert await agent.add_tool_approval("p1", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)

    assert agent.charged == [42]  # once, after approval
    assert parts_of(agent) == {"p1": ("output-available", "charged 42")}
    [part] = [p for m in agent.get_messages() for p in m.parts if isinstance(p, ta.ToolPart)]
    assert part.approval is not None and part.approval.approved is True
    assert texts(agent)[-1] == "paid"
    assert [c.tool_name for c in agent.contexts("before_tool_call")] == ["charge"]  # the outer gate after approval


async def test_a_denied_call_never_runs_and_the_model_sees_the_denial() -> None:
    model = ScriptedModel([tool_call("charge", {"amount": 42}, id="p1"), text("ok, not paying")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await agent.chat("pay 42").collect()
    await agent.add_tool_approval("p1", False, reason="too expensive", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert agent.charged == []
    assert parts_of(agent)["p1"][0] == "output-denied"
    tool_message = next(m for m in model.requests[1].messages if m["role"] == "tool")
    assert tool_message["content"] == "The tool call was denied: too expensive."


async def test_an_approved_call_that_fails_settles_with_its_error() -> None:
    model = ScriptedModel([tool_call("charge", {"amount": -1}, id="p1"), text("it failed")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await agent.chat("refund me by charging -1").collect()
    await agent.add_tool_approval("p1", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert parts_of(agent) == {"p1": ("output-error", "negative amounts cannot be charged")}


async def test_approval_by_predicate_and_results_for_calls_awaiting_approval() -> None:
    model = ScriptedModel(
        [step(tool_call("refund", {"amount": 5}, id="small"), tool_call("refund", {"amount": 500}, id="big"))]
    )
    agent = Shop(model=model, store=ta.MemoryStore())
    await agent.chat("refund both").collect()
    assert parts_of(agent) == {"small": ("output-available", "refunded 5"), "big": ("approval-requested", None)}
    # A result may also answer a call that awaits approval (the client answered for it).
    assert await agent.add_tool_result("big", "handled by a person")
    assert parts_of(agent)["big"] == ("output-available", "handled by a person")


async def test_the_continuation_offers_the_client_tools_of_the_turn_it_continues() -> None:
    model = ScriptedModel([tool_call("ask", {}, id="c1"), tool_call("ask", {}, id="c2"), text("done")])
    agent = Shop(model=model, store=ta.MemoryStore())
    continued = asyncio.Event()
    agent.observe(
        "agents:chat",
        lambda e: (
            continued.set() if e.type == "chat:turn:finish" and e.payload["trigger"] == "auto-continuation" else None
        ),
    )
    await client_call(agent, "c1", tools=[ASK])
    await agent.add_tool_result("c1", "first answer", auto_continue=True)
    await asyncio.wait_for(continued.wait(), WAIT_S)
    names = [[t["function"]["name"] for t in r.tools] for r in model.requests]
    assert names[1] == ["charge", "refund", "ask"]  # the client tool is still offered
    assert parts_of(agent)["c2"] == ("input-available", None)  # and the model could call it again


async def test_a_result_that_arrives_mid_stream_is_applied_once_the_reply_is_stored() -> None:
    model = ScriptedModel([step(tool_call("ask", {}, id="c1"), text(" (waiting for you)")), text("got it")])
    agent = Shop(model=model, store=ta.MemoryStore())
    async for chunk in agent.chat("go", client_tools=[ASK]):
        if chunk.type == "tool-input-available":
            # A fast client answers before the turn has stored the reply holding the call.
            assert await agent.add_tool_result("c1", "answered early", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert parts_of(agent) == {"c1": ("output-available", "answered early")}
    assert texts(agent)[-1] == "got it"


async def test_the_continuation_sees_the_custom_body_of_the_turn_it_continues() -> None:
    model = ScriptedModel([tool_call("ask", {}, id="c1"), text("done")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await agent.chat("go", client_tools=[ASK], body={"selected_file": "a.py"}).collect()
    await agent.add_tool_result("c1", "ok", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert [ctx.body for ctx in agent.contexts("before_turn")] == [{"selected_file": "a.py"}] * 2


async def test_settled_parts_are_never_changed_by_a_late_answer() -> None:
    model = ScriptedModel([step(tool_call("charge", {"amount": 1}, id="p1"), tool_call("ask", {}, id="c1"))])
    agent = Shop(model=model, store=ta.MemoryStore())
    chunks = await agent.chat("go", client_tools=[ASK]).collect()
    [request] = [c for c in chunks if c.type == "tool-approval-request"]
    assert await agent.add_tool_approval("p1", False)  # output-denied
    assert await agent.add_tool_result("p1", "too late") is False
    assert await agent.add_tool_approval("p1", True) is False
    assert await agent.add_tool_result("c1", "yes")
    assert await agent.add_tool_approval("c1", True) is False  # output-available stays
    assert parts_of(agent)["p1"][0] == "output-denied" and parts_of(agent)["c1"] == ("output-available", "yes")
    [denied] = [
        p for m in agent.get_messages() for p in m.parts if isinstance(p, ta.ToolPart) and p.tool_call_id == "p1"
    ]
    # The approval keeps the id the request gave it.
    assert denied.approval is not None and (denied.approval.id, denied.approval.approved) == (
        request.approval_id,
        False,
    )


async def test_a_result_may_answer_a_call_that_a_person_approved() -> None:
    model = ScriptedModel([tool_call("charge", {"amount": 1}, id="p1")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await agent.chat("go").collect()
    await agent.add_tool_approval("p1", True)  # approval-responded, no auto-continue
    assert await agent.add_tool_result("p1", "settled elsewhere")
    assert parts_of(agent)["p1"] == ("output-available", "settled elsewhere")
    assert agent.charged == []


async def test_concurrent_answers_to_parallel_calls_never_clobber_each_other() -> None:
    model = ScriptedModel([step(tool_call("ask", {}, id="a"), tool_call("locate", {}, id="b")), text("both")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await client_call(agent, "a", "b")
    await asyncio.gather(
        agent.add_tool_result("a", "yes", auto_continue=True), agent.add_tool_result("b", "Oslo", auto_continue=True)
    )
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert parts_of(agent) == {"a": ("output-available", "yes"), "b": ("output-available", "Oslo")}
    assert len(model.requests) == 2  # one continuation for the batch


async def test_wait_until_stable_is_not_stable_while_a_continuation_is_armed() -> None:
    model = ScriptedModel([tool_call("ask", {}, id="c1"), text("ok")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await client_call(agent, "c1")
    await agent.add_tool_result("c1", "yes", auto_continue=True)
    assert not agent._engine.interactions.stable()  # armed: the coalescing window is open
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(model.requests) == 2


async def test_tool_state_survives_a_new_agent_instance(tmp_path: Any) -> None:
    path = tmp_path / "a.db"
    first = Shop("s", model=ScriptedModel([tool_call("ask", {}, id="c1")]), store=ta.SQLiteStore(path))
    await client_call(first, "c1")
    await first.add_tool_result("c1", {"answer": 42})
    await first.close()
    second = Shop("s", model=ScriptedModel(), store=ta.SQLiteStore(path))
    await second.load_messages()
    assert parts_of(second) == {"c1": ("output-available", {"answer": 42})}


async def test_the_body_and_client_tools_a_continuation_reuses_survive_a_restart(tmp_path: Any) -> None:
    path = tmp_path / "a.db"
    first = Shop("s", model=ScriptedModel([tool_call("ask", {}, id="c1")]), store=ta.SQLiteStore(path))
    await first.set_client_tools([ASK])
    await first.chat("go", client_tools=[ASK], body={"tab": "settings"}).collect()
    await first.close()

    model = ScriptedModel([text("after the restart")])
    second = Shop("s", model=model, store=ta.SQLiteStore(path))
    await second.add_tool_result("c1", "yes", auto_continue=True)
    await second.wait_until_stable(timeout_s=WAIT_S)
    assert [t["function"]["name"] for t in model.requests[0].tools] == ["charge", "refund", "ask"]
    assert [ctx.body for ctx in second.contexts("before_turn")] == [{"tab": "settings"}]


async def test_a_result_for_a_call_awaiting_approval_leaves_no_pending_approval_behind() -> None:
    # A part holds only the fields of its state (the AI SDK's UIToolInvocation): a result answers the call, and an
    # approval that was requested and never given is not part of a result.
    model = ScriptedModel([tool_call("refund", {"amount": 500}, id="big")])
    agent = Shop(model=model, store=ta.MemoryStore())
    await agent.chat("refund").collect()
    assert await agent.add_tool_result("big", "handled by a person")
    [part] = [p for m in await agent.store.load_messages() for p in m.parts if isinstance(p, ta.ToolPart)]
    assert part.to_wire() == {
        "type": "tool-refund",
        "toolCallId": "big",
        "state": "output-available",
        "toolName": "refund",
        "input": {"amount": 500},
        "output": "handled by a person",
        "preliminary": False,
    }
