"""Port of ``packages/think/src/tests/client-tools.test.ts``: applying client tool results and approvals, the
auto-continuation barrier, client tool schemas, broadcast, regeneration, message concurrency, transcript repair
and client tools over ``chat()``.

The reference's ``ThinkClientToolsAgent`` answers a request offering ``client_action`` with a call ``tc-client-1``
and, in server-approval mode, calls its own ``updateTrigger`` tool (``needsApproval``) as ``tc-server-approval-1``;
the same agents are built here. Results and approvals are sent in process (``add_tool_result`` /
``add_tool_approval``) unless the behaviour is the wire's (default error text, ``cf_agent_message_updated``, tabs,
request bodies, regeneration, message concurrency), which goes through the gateway. Where the reference proves an
absence by waiting 400 ms, these wait 150 ms (three times the 50 ms coalesce window). Left out (README.md): the
eviction cases of the barrier, the resume coordination of a pending continuation.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, step, text, tool_call

from .conftest import (
    WAIT_S,
    Recorder,
    chat_request,
    handled,
    next_frame,
    skip_greeting,
    texts,
    tool_parts,
    until_done,
    until_type,
    wire_user,
)

SRC = "packages/think/src/tests/client-tools.test.ts"
ABSENCE_S = 0.15
CLIENT_ACTION = ta.ClientToolSchema(name="client_action", description="A client tool")


def wire_message(message_id: str, role: str, *parts: dict[str, Any]) -> ta.UIMessage:
    return ta.UIMessage.model_validate({"id": message_id, "role": role, "parts": list(parts)})


def client_part(tool_call_id: str, state: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "tool-client_action",
        "toolCallId": tool_call_id,
        "toolName": "client_action",
        "state": state,
        "input": {"action": "test"},
        **extra,
    }


async def seeded(state: str, tool_call_id: str = "tc1", *steps: Any, **extra: Any) -> Recorder:
    """An agent whose history is a user message and an assistant message with one client tool part."""
    agent = Recorder(model=ScriptedModel(list(steps)), store=ta.MemoryStore())
    await agent.add_messages(
        [
            wire_message("u1", "user", {"type": "text", "text": "hello"}),
            wire_message("a1", "assistant", client_part(tool_call_id, state, **extra)),
        ]
    )
    return agent


def part_of(agent: ta.Think, tool_call_id: str) -> ta.ToolPart:
    [part] = [p for p in tool_parts(agent) if p.tool_call_id == tool_call_id]
    return part


def continuations(agent: Recorder) -> list[ta.ChatResponseResult]:
    return [r for r in agent.seen("on_chat_response") if r.continuation]


async def nothing_happens(agent: Recorder) -> None:
    """Wait out three coalesce windows and check no turn started meanwhile."""
    started = asyncio.Event()
    unsubscribe = agent.observe("agents:chat", lambda e: started.set() if e.type == "chat:turn:start" else None)
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(started.wait(), ABSENCE_S)
    finally:
        unsubscribe()


# -- tool result application --------------------------------------------------------------------------------------


async def test_a_result_sets_the_part_output_available() -> None:
    """client-tools.test.ts:252 "updates tool part to output-available"."""
    agent = await seeded("input-available")
    assert await agent.add_tool_result("tc1", "result data") is True
    part = part_of(agent, "tc1")
    assert (part.state, part.output) == ("output-available", "result data")
    assert (await agent.store.get_message("a1")).parts[0].state == "output-available"  # type: ignore[union-attr]


async def test_an_error_result_sets_output_error_with_its_text() -> None:
    """client-tools.test.ts:284 "sets output-error state with errorText"."""
    agent = await seeded("input-available")
    assert await agent.add_tool_result("tc1", None, error="Something went wrong") is True
    part = part_of(agent, "tc1")
    assert (part.state, part.error_text) == ("output-error", "Something went wrong")


class Plain(ta.Think):
    pass


async def test_an_error_result_without_text_gets_the_default_text(gateway: Any) -> None:
    """client-tools.test.ts:317 "uses default errorText when omitted" (a wire default)."""
    client, agent_of = await gateway(Plain, model=ScriptedModel())
    agent = await agent_of("plain", "r1")
    await agent.add_messages(
        [
            wire_message("u1", "user", {"type": "text", "text": "hello"}),
            wire_message("a1", "assistant", client_part("tc-default-err", "input-available")),
        ]
    )
    ws = await client.ws_connect("/agents/plain/r1")
    await skip_greeting(ws)
    await ws.send_str(
        json.dumps(
            {
                "type": "cf_agent_tool_result",
                "toolCallId": "tc-default-err",
                "toolName": "client_action",
                "output": None,
                "state": "output-error",
            }
        )
    )
    [updated] = [f for f in await until_type(ws, "cf_agent_message_updated")][-1:]
    part = updated["message"]["parts"][0]
    assert (part["state"], part["errorText"]) == ("output-error", "Tool execution denied by user")
    assert (part_of(agent, "tc-default-err").state, part_of(agent, "tc-default-err").error_text) == (
        "output-error",
        "Tool execution denied by user",
    )
    await ws.close()


@pytest.mark.parametrize(
    ("state", "extra", "line", "name"),
    [
        ("output-available", {"output": "original"}, 349, "does NOT update tool in output-available state"),
        ("output-denied", {}, 381, "does NOT update tool in output-denied state"),
    ],
)
async def test_a_result_never_overwrites_a_settled_part(
    state: str, extra: dict[str, Any], line: int, name: str
) -> None:
    """client-tools.test.ts:349 and :381: the first settlement wins."""
    agent = await seeded(state, "tc1", **extra)
    assert await agent.add_tool_result("tc1", "overwrite attempt") is False
    part = part_of(agent, "tc1")
    assert (part.state, part.output) == (state, extra.get("output"))


@pytest.mark.parametrize(
    ("state", "line", "name"),
    [
        ("approval-requested", 411, "applies to tool in approval-requested state"),
        ("approval-responded", 442, "applies to tool in approval-responded state"),
    ],
)
async def test_a_result_applies_to_a_part_waiting_on_approval(state: str, line: int, name: str) -> None:
    """client-tools.test.ts:411 and :442."""
    agent = await seeded(
        state, "tc1", approval={"id": "ap-1", **({"approved": True} if state == "approval-responded" else {})}
    )
    assert await agent.add_tool_result("tc1", "approved result") is True
    part = part_of(agent, "tc1")
    assert (part.state, part.output) == ("output-available", "approved result")


# -- tool approval --------------------------------------------------------------------------------------------------


async def test_an_approval_sets_approval_responded() -> None:
    """client-tools.test.ts:476 "approved=true transitions to approval-responded"."""
    agent = await seeded("approval-requested", "tc1", approval={"id": "tc1"})
    assert await agent.add_tool_approval("tc1", True) is True
    part = part_of(agent, "tc1")
    assert part.state == "approval-responded" and part.approval is not None and part.approval.approved is True


async def test_a_denial_sets_output_denied() -> None:
    """client-tools.test.ts:505 "approved=false transitions to output-denied"."""
    agent = await seeded("approval-requested", "tc1", approval={"id": "tc1"})
    assert await agent.add_tool_approval("tc1", False) is True
    part = part_of(agent, "tc1")
    assert part.state == "output-denied" and part.approval is not None and part.approval.approved is False


async def test_an_approval_for_an_unknown_call_changes_nothing() -> None:
    """client-tools.test.ts:534 "non-existent toolCallId is a no-op"."""
    agent = await seeded("approval-requested", "tc1", approval={"id": "tc1"})
    before = agent.get_messages()
    assert await agent.add_tool_approval("nope", True) is False
    assert agent.get_messages() == before


async def test_an_approval_never_changes_a_settled_part() -> None:
    """client-tools.test.ts:562 "does NOT update tool in output-available state"."""
    agent = await seeded("output-available", "tc1", output="done")
    assert await agent.add_tool_approval("tc1", True) is False
    part = part_of(agent, "tc1")
    assert (part.state, part.output) == ("output-available", "done")


async def test_an_approval_keeps_the_approval_id() -> None:
    """client-tools.test.ts:593 "preserves approval data"."""
    agent = await seeded("approval-requested", "tc1", approval={"id": "approval-123"})
    await agent.add_tool_approval("tc1", True)
    approval = part_of(agent, "tc1").approval
    assert approval is not None and (approval.id, approval.approved) == ("approval-123", True)


# -- auto-continuation ----------------------------------------------------------------------------------------------


def client_turn_agent(*after: Any) -> Recorder:
    """The reference's client-tools agent: a call ``tc-client-1`` of ``client_action``, then ``after``."""
    steps = [tool_call("client_action", {"action": "test"}, id="tc-client-1"), *after]
    return Recorder(model=ScriptedModel(steps), store=ta.MemoryStore())


async def test_a_result_with_auto_continue_runs_a_continuation() -> None:
    """client-tools.test.ts:631 "autoContinue: true triggers continuation"."""
    agent = client_turn_agent(text("Thanks for the output"))
    await agent.chat("use client tool", client_tools=[CLIENT_ACTION]).collect()
    assert part_of(agent, "tc-client-1").state == "input-available"
    await agent.add_tool_result("tc-client-1", "tool output", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert texts(agent)[-1] == ("assistant", "Thanks for the output")
    assert [(r.status, r.continuation) for r in agent.seen("on_chat_response")] == [
        ("completed", False),
        ("completed", True),
    ]


async def test_a_result_without_auto_continue_runs_nothing() -> None:
    """client-tools.test.ts:672 "without autoContinue, no continuation"."""
    agent = await seeded("input-available", "tc-no-continue")
    await agent.add_tool_result("tc-no-continue", "result")
    await nothing_happens(agent)
    assert len(agent.get_messages()) == 2


@pytest.mark.parametrize(("approved", "line"), [(True, 702), (False, 933)])
async def test_an_approval_or_denial_with_auto_continue_runs_a_continuation(approved: bool, line: int) -> None:
    """client-tools.test.ts:702 "approval with autoContinue triggers continuation" and :933 "rejection with
    autoContinue still triggers continuation"."""
    agent = await seeded("approval-requested", "tc1", text("continued"), approval={"id": "tc1"})
    await agent.add_tool_approval("tc1", approved, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert [(r.status, r.continuation) for r in agent.seen("on_chat_response")] == [("completed", True)]


class Triggers(Recorder):
    """The reference's server-approval mode: ``updateTrigger`` needs approval; ``fail`` makes it raise."""

    def __init__(self, *args: Any, fail: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executions = 0
        self.fail = fail

    @ta.tool(needs_approval=True)
    async def updateTrigger(self, enabled: bool) -> dict[str, bool]:
        """Update the trigger."""
        self.executions += 1
        if self.fail:
            raise RuntimeError("Trigger update failed")
        return {"enabled": enabled}


def triggers(**options: Any) -> Triggers:
    steps = [tool_call("updateTrigger", {"enabled": True}, id="tc-server-approval-1"), text("Updated.")]
    return Triggers(model=ScriptedModel(steps), store=ta.MemoryStore(), **options)


async def test_an_approved_server_tool_runs_in_the_continuation_and_its_output_is_stored() -> None:
    """client-tools.test.ts:735 "streams and persists output from an approved server tool continuation (#1627)"."""
    agent = triggers()
    first = await agent.chat("update my trigger").collect()
    assert [c.tool_call_id for c in first if c.type == "tool-approval-request"] == ["tc-server-approval-1"]
    assert agent.executions == 0
    await agent.add_tool_approval("tc-server-approval-1", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert agent.executions == 1
    part = part_of(agent, "tc-server-approval-1")
    assert (part.state, part.output) == ("output-available", {"enabled": True})
    assert [r.continuation for r in agent.seen("on_chat_response")] == [False, True]


async def test_an_approved_call_waiting_for_its_run_is_not_repaired() -> None:
    """client-tools.test.ts:807 "treats a pending approved tool as complete — no spurious transcript-repair
    backstop (#1627)"."""
    agent = triggers()
    await agent.chat("update my trigger").collect()
    await agent.add_tool_approval("tc-server-approval-1", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert agent.executions == 1
    repaired = [e.payload for e in agent.events if e.type == "chat:transcript:repaired"]
    assert all("tc-server-approval-1" not in (p.get("toolCallIds") or []) for p in repaired)


async def test_a_denied_server_tool_never_runs_and_keeps_its_denial() -> None:
    """client-tools.test.ts:854 "does not execute a rejected server approval tool and retains denial"."""
    agent = triggers()
    await agent.chat("do not update my trigger").collect()
    await agent.add_tool_approval("tc-server-approval-1", False, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert agent.executions == 0
    assert part_of(agent, "tc-server-approval-1").state == "output-denied"
    assert [r.continuation for r in agent.seen("on_chat_response")] == [False, True]


async def test_an_approved_server_tool_that_raises_stores_its_error() -> None:
    """client-tools.test.ts:894 "persists an approved server tool execution error as terminal output"."""
    agent = triggers(fail=True)
    await agent.chat("update a broken trigger").collect()
    await agent.add_tool_approval("tc-server-approval-1", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert agent.executions == 1
    part = part_of(agent, "tc-server-approval-1")
    assert part.state == "output-error" and part.error_text is not None and "Trigger update failed" in part.error_text


async def parallel_pair(*after: Any) -> Recorder:
    agent = Recorder(model=ScriptedModel(list(after)), store=ta.MemoryStore())
    await agent.add_messages(
        [
            wire_message("u1", "user", {"type": "text", "text": "use two tools"}),
            wire_message(
                "assistant-parallel",
                "assistant",
                {**client_part("tc-fast", "input-available"), "input": {"action": "fast"}},
                {**client_part("tc-slow", "input-available"), "input": {"action": "slow"}},
            ),
        ]
    )
    await agent.set_client_tools([CLIENT_ACTION])
    return agent


async def test_a_continuation_waits_for_every_parallel_result() -> None:
    """client-tools.test.ts:966 "waits for ALL parallel client-tool results before continuing (#1649)"."""
    agent = await parallel_pair(text("both done"))
    await agent.add_tool_result("tc-fast", "fast output", auto_continue=True)
    await nothing_happens(agent)
    assert continuations(agent) == []
    await agent.add_tool_result("tc-slow", "slow output", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1
    assert [(p.tool_call_id, p.state, p.output) for p in tool_parts(agent)] == [
        ("tc-fast", "output-available", "fast output"),
        ("tc-slow", "output-available", "slow output"),
    ]
    assert [e for e in agent.events if e.type == "chat:transcript:repaired"] == []


async def test_concurrent_parallel_results_do_not_clobber_each_other() -> None:
    """client-tools.test.ts:1067 "serializes overlapping tool-result applies so neither clobbers the other" and
    :1173 "does not clobber siblings when parallel results arrive concurrently (#1649)"."""
    agent = await parallel_pair(text("both done"))
    applied = await asyncio.gather(
        agent.add_tool_result("tc-fast", "fast output", auto_continue=True),
        agent.add_tool_result("tc-slow", "slow output", auto_continue=True),
    )
    assert applied == [True, True]
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert [(p.tool_call_id, p.output) for p in tool_parts(agent)] == [
        ("tc-fast", "fast output"),
        ("tc-slow", "slow output"),
    ]
    assert len(continuations(agent)) == 1


async def test_wait_until_stable_holds_while_a_continuation_is_armed() -> None:
    """client-tools.test.ts:1534 "waitUntilStable does not report stable while an auto-continuation is armed"."""
    agent = await parallel_pair(text("both done"))
    await agent.add_tool_result("tc-fast", "fast output", auto_continue=True)
    with pytest.raises(TimeoutError):
        await agent.wait_until_stable(timeout_s=ABSENCE_S)


async def test_an_errored_sibling_without_auto_continue_completes_the_batch() -> None:
    """client-tools.test.ts:1552 "continues when an errored sibling (autoContinue:false) completes the batch"."""
    agent = await parallel_pair(text("handled"))
    await agent.add_tool_result("tc-fast", "fast output", auto_continue=True)
    await agent.add_tool_result("tc-slow", None, error="tool failed", auto_continue=False)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1
    assert (part_of(agent, "tc-slow").state, part_of(agent, "tc-slow").error_text) == ("output-error", "tool failed")


async def test_a_lone_errored_result_without_auto_continue_does_not_continue() -> None:
    """client-tools.test.ts:1648 "does not continue a standalone errored tool (autoContinue:false, no opted-in
    sibling) (#1650)"."""
    agent = await seeded("input-available", "tc-solo-err")
    await agent.add_tool_result("tc-solo-err", None, error="tool failed", auto_continue=False)
    await nothing_happens(agent)
    assert continuations(agent) == []


async def test_an_approval_requested_sibling_holds_the_barrier_until_approved() -> None:
    """client-tools.test.ts:2172 "holds the parallel barrier for an approval-requested sibling until it is
    approved (#1649)"."""
    agent = Recorder(model=ScriptedModel([text("all done")]), store=ta.MemoryStore())
    await agent.add_messages(
        [
            wire_message("u1", "user", {"type": "text", "text": "go"}),
            wire_message(
                "a1",
                "assistant",
                client_part("tc-fast", "input-available"),
                client_part("tc-gated", "approval-requested", approval={"id": "tc-gated"}),
            ),
        ]
    )
    await agent.set_client_tools([CLIENT_ACTION])
    await agent.add_tool_result("tc-fast", "fast output", auto_continue=True)
    await nothing_happens(agent)
    await agent.add_tool_approval("tc-gated", True, auto_continue=True)
    await agent.add_tool_result("tc-gated", "gated output", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1


# -- client tool schemas, broadcast, bodies, regeneration: the wire -----------------------------------------------


class Clienty(Recorder):
    pass


async def connect(gateway: Any, model: ScriptedModel, cls: type[ta.Think] = Clienty, room: str = "r1") -> Any:
    client, agent_of = await gateway(cls, model=model)
    ws = await client.ws_connect(f"/agents/{ta.kebab_case(cls.__name__)}/{room}")
    await skip_greeting(ws)
    return client, ws, await agent_of(ta.kebab_case(cls.__name__), room)


def offered(model: ScriptedModel, index: int = -1) -> list[str]:
    return [t["function"]["name"] for t in model.requests[index].tools]


async def test_client_tools_of_a_chat_request_reach_the_model(gateway: Any) -> None:
    """client-tools.test.ts:2271 "clientTools from chat request are passed to the inference loop"."""
    model = ScriptedModel([text("hi")])
    _, ws, _ = await connect(gateway, model)
    tools = [
        {"name": "tool_a", "description": "Tool A"},
        {"name": "tool_b", "description": "Tool B", "parameters": {"type": "object"}},
    ]
    await ws.send_str(chat_request("req-1", wire_user("hello", "u1"), clientTools=tools))
    await until_done(ws, "req-1")
    assert offered(model) == ["tool_a", "tool_b"]


async def test_client_tools_sent_with_a_result_are_the_continuations(gateway: Any) -> None:
    """client-tools.test.ts:2299 "clientTools from TOOL_RESULT update stored tools"."""
    model = ScriptedModel([tool_call("client_action", {}, id="tc-schema-update"), text("continued")])
    _, ws, _agent = await connect(gateway, model)
    await ws.send_str(chat_request("req-1", wire_user("hello", "u1"), clientTools=[{"name": "client_action"}]))
    await until_done(ws, "req-1")
    await ws.send_str(
        json.dumps(
            {
                "type": "cf_agent_tool_result",
                "toolCallId": "tc-schema-update",
                "toolName": "client_action",
                "output": "result",
                "clientTools": [{"name": "new_tool", "description": "New tool"}],
                "autoContinue": True,
            }
        )
    )
    await until_done(ws)
    assert offered(model) == ["new_tool"]


async def test_a_clear_forgets_the_client_tools(gateway: Any) -> None:
    """client-tools.test.ts:2330 "clear clears stored client tools"."""
    model = ScriptedModel([text("hi"), text("again")])
    _, ws, _agent = await connect(gateway, model)
    await ws.send_str(chat_request("req-1", wire_user("hello", "u1"), clientTools=[{"name": "tool_a"}]))
    await until_done(ws, "req-1")
    await ws.send_str(json.dumps({"type": "cf_agent_chat_clear"}))
    await ws.send_str(chat_request("req-2", wire_user("after clear", "u2")))  # frames of a socket run in order
    await until_done(ws, "req-2")
    assert (offered(model, 0), offered(model, 1)) == (["tool_a"], [])


async def test_a_request_with_empty_client_tools_forgets_them(gateway: Any) -> None:
    """client-tools.test.ts:2357 "new request without clientTools clears stored tools"."""
    model = ScriptedModel([text("hi"), text("again"), text("later")])
    _, ws, agent = await connect(gateway, model)
    await ws.send_str(chat_request("req-1", wire_user("hello", "u1"), clientTools=[{"name": "tool_a"}]))
    await until_done(ws, "req-1")
    await ws.send_str(chat_request("req-2", wire_user("hello again", "u2"), clientTools=[]))
    await until_done(ws, "req-2")
    assert offered(model, 1) == []
    await agent.save_messages("programmatic")
    assert offered(model, 2) == []


async def test_a_tool_result_broadcasts_the_updated_message(gateway: Any) -> None:
    """client-tools.test.ts:2391 "broadcasts MESSAGE_UPDATED after tool result"."""
    _, ws, agent = await connect(gateway, ScriptedModel())
    await agent.add_messages(
        [
            wire_message("u1", "user", {"type": "text", "text": "hello"}),
            wire_message("a1", "assistant", client_part("tc-broadcast", "input-available")),
        ]
    )
    await ws.send_str(
        json.dumps(
            {
                "type": "cf_agent_tool_result",
                "toolCallId": "tc-broadcast",
                "toolName": "client_action",
                "output": "result",
            }
        )
    )
    updated = (await until_type(ws, "cf_agent_message_updated"))[-1]
    assert updated["message"]["id"] == "a1"
    assert updated["message"]["parts"][0]["state"] == "output-available"


async def test_a_tool_result_survives_a_new_agent_instance(tmp_path: Any) -> None:
    """client-tools.test.ts:2421 "tool state survives across agent instances"."""
    store_path = str(tmp_path / "agent.db")
    first = Recorder(model=ScriptedModel(), store=ta.SQLiteStore(store_path, agent="r/1"))
    await first.add_messages(
        [
            wire_message("u1", "user", {"type": "text", "text": "hello"}),
            wire_message("a1", "assistant", client_part("tc-persist", "input-available")),
        ]
    )
    await first.add_tool_result("tc-persist", "persisted result")
    await first.close()
    second = Recorder(model=ScriptedModel(), store=ta.SQLiteStore(store_path, agent="r/1"))
    await second.load_messages()
    part = part_of(second, "tc-persist")
    assert (part.state, part.output) == ("output-available", "persisted result")
    await second.close()


async def test_every_tab_gets_the_continuation_stream(gateway: Any) -> None:
    """client-tools.test.ts:2454 "other tabs receive continuation stream chunks"."""
    model = ScriptedModel([tool_call("client_action", {}, id="tc-client-1"), text("continued")])
    client, _agent_of = await gateway(Clienty, model=model)
    ws1 = await client.ws_connect("/agents/clienty/r1")
    ws2 = await client.ws_connect("/agents/clienty/r1")
    await skip_greeting(ws1)
    await skip_greeting(ws2)
    await ws1.send_str(chat_request("req-1", wire_user("use tool", "u1"), clientTools=[{"name": "client_action"}]))
    await until_done(ws1, "req-1")
    await until_done(ws2, "req-1")
    await ws1.send_str(
        json.dumps(
            {
                "type": "cf_agent_tool_result",
                "toolCallId": "tc-client-1",
                "toolName": "client_action",
                "output": "tool output",
                "autoContinue": True,
            }
        )
    )
    done1 = (await until_done(ws1))[-1]
    done2 = (await until_done(ws2))[-1]
    assert done1["id"] == done2["id"] and done2.get("continuation") is True


async def test_a_websocket_turn_fires_on_chat_response(gateway: Any) -> None:
    """client-tools.test.ts:2872 "fires onChatResponse after WebSocket chat request"."""
    _, ws, agent = await connect(gateway, ScriptedModel([text("hi")]))
    await ws.send_str(chat_request("req-1", wire_user("hello from ws", "u1")))
    await until_done(ws, "req-1")
    await agent.wait_idle()
    [response] = agent.seen("on_chat_response")
    assert (response.status, response.continuation, response.message.role) == ("completed", False, "assistant")


async def test_an_auto_continuation_fires_on_chat_response_with_continuation(gateway: Any) -> None:
    """client-tools.test.ts:2893 "fires onChatResponse with continuation=true after auto-continuation"."""
    model = ScriptedModel([tool_call("client_action", {}, id="tc-client-1"), text("continued")])
    _, ws, agent = await connect(gateway, model)
    await ws.send_str(
        chat_request("req-1", wire_user("use client tool", "u1"), clientTools=[{"name": "client_action"}])
    )
    await until_done(ws, "req-1")
    await ws.send_str(
        json.dumps(
            {
                "type": "cf_agent_tool_result",
                "toolCallId": "tc-client-1",
                "toolName": "client_action",
                "output": "tool output",
                "autoContinue": True,
            }
        )
    )
    await until_done(ws)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert [(r.status, r.continuation) for r in agent.seen("on_chat_response")] == [
        ("completed", False),
        ("completed", True),
    ]


async def test_custom_body_fields_reach_the_turn_and_a_request_without_them_clears_them(gateway: Any) -> None:
    """client-tools.test.ts:2939 "body fields persist and are available after turn" and :2973 "body is cleared
    when request has no custom fields"."""
    _, ws, agent = await connect(gateway, ScriptedModel([text("one"), text("two")]))
    await ws.send_str(chat_request("req-1", wire_user("hello", "u1"), model="fast-model", temperature=0.7))
    await until_done(ws, "req-1")
    await ws.send_str(chat_request("req-2", wire_user("no body", "u2")))
    await until_done(ws, "req-2")
    assert [ctx.body for ctx in agent.seen("before_turn")] == [{"model": "fast-model", "temperature": 0.7}, None]
    assert len(agent.get_messages()) == 4


def regenerate(request_id: str, *messages: dict[str, Any]) -> str:
    return chat_request(request_id, *messages, trigger="regenerate-message")


async def test_a_regeneration_adds_a_sibling_reply() -> None:
    """client-tools.test.ts:3001 "regenerate-message creates a sibling branch, not a replacement" and :3045
    "multiple regenerations create multiple branches" (in process: ``chat(branch_from=...)``)."""
    agent = Recorder(model=ScriptedModel([text("first"), text("second"), text("third")]), store=ta.MemoryStore())
    await agent.chat(ta.user_message("explain monads", id="u1")).collect()
    first = agent.get_messages()[1]
    await agent.chat(branch_from="u1").collect()
    await agent.chat(branch_from="u1").collect()
    assert texts(agent) == [("user", "explain monads"), ("assistant", "third")]
    siblings = [m for m in await agent.store.list_messages() if m.role == "assistant"]
    assert [m.text for m in siblings] == ["first", "second", "third"]
    assert first.id in [m.id for m in siblings]


async def test_a_regeneration_over_the_wire_keeps_the_history_before_the_branch(gateway: Any) -> None:
    """client-tools.test.ts:3084 "regeneration preserves conversation history before the branch point" and :3131
    "regeneration fires onChatResponse"."""
    _, ws, agent = await connect(gateway, ScriptedModel([text("a1"), text("a2"), text("a2 again")]))
    await ws.send_str(chat_request("req-1", wire_user("hello", "u1")))
    await until_done(ws, "req-1")
    assistant1 = agent.get_messages()[1].model_dump(mode="json", by_alias=True, exclude_none=True)
    await ws.send_str(chat_request("req-2", wire_user("hello", "u1"), assistant1, wire_user("tell me more", "u2")))
    await until_done(ws, "req-2")
    await ws.send_str(regenerate("req-3", wire_user("hello", "u1"), assistant1, wire_user("tell me more", "u2")))
    await until_done(ws, "req-3")
    await agent.wait_idle()
    assert [(m.id if m.role == "user" else m.role, m.text) for m in agent.get_messages()] == [
        ("u1", "hello"),
        ("assistant", "a1"),
        ("u2", "tell me more"),
        ("assistant", "a2 again"),
    ]
    assert [r.status for r in agent.seen("on_chat_response")] == ["completed", "completed", "completed"]


async def test_a_regeneration_with_nothing_to_regenerate_is_a_normal_turn(gateway: Any) -> None:
    """client-tools.test.ts:3159 "regeneration with empty message list is a normal submit"."""
    _, ws, agent = await connect(gateway, ScriptedModel([text("fresh")]))
    await ws.send_str(regenerate("req-1", wire_user("fresh start", "u1")))
    await until_done(ws, "req-1")
    assert texts(agent) == [("user", "fresh start"), ("assistant", "fresh")]


# -- message concurrency ----------------------------------------------------------------------------------------


def strategy(name: Any) -> type[Recorder]:
    return type(f"Concurrency{abs(hash(str(name)))}", (Recorder,), {"message_concurrency": name})


async def overlapping(
    gateway: Any, how: Any, *, third_trigger: str | None = None
) -> tuple[Any, list[list[dict[str, Any]]]]:
    """Three submits over one socket while the first turn's model waits; the agent and each request's frames."""
    model = ScriptedModel([step(delay(0.1), text("first")), text("second"), text("third")])
    _, ws, agent = await connect(gateway, model, strategy(how))
    await ws.send_str(chat_request("req-1", wire_user("one", "u1")))
    await ws.send_str(chat_request("req-2", wire_user("two", "u2")))
    extra = {"trigger": third_trigger} if third_trigger else {}
    await ws.send_str(chat_request("req-3", wire_user("three", "u3"), **extra))
    frames: dict[str, list[dict[str, Any]]] = {"req-1": [], "req-2": [], "req-3": []}
    done: set[str] = set()
    while done != set(frames):
        frame = await next_frame(ws)
        rid = frame.get("id")
        if frame["type"] == "cf_agent_use_chat_response" and rid in frames:
            frames[rid].append(frame)
            if frame["done"]:
                done.add(rid)
    await agent.wait_idle()
    return agent, [frames["req-1"], frames["req-2"], frames["req-3"]]


def ran(frames: list[dict[str, Any]]) -> bool:
    return any(f["body"] for f in frames)


async def test_queue_runs_every_overlapping_submit_in_order(gateway: Any) -> None:
    """client-tools.test.ts:3186 "queue: processes all overlapping submits in order"."""
    agent, frames = await overlapping(gateway, "queue")
    assert [ran(f) for f in frames] == [True, True, True]
    assert [t for r, t in texts(agent) if r == "assistant"] == ["first", "second", "third"]


async def test_latest_runs_only_the_newest_overlapping_submit(gateway: Any) -> None:
    """client-tools.test.ts:3209 "latest: only newest overlapping submit runs" and :3400 "latest: onChatResponse
    fires only for actual runs"."""
    agent, frames = await overlapping(gateway, "latest")
    assert [ran(f) for f in frames] == [True, False, True]
    assert [t for r, t in texts(agent) if r == "user"] == ["one", "two", "three"]
    assert [t for r, t in texts(agent) if r == "assistant"] == ["first", "second"]
    assert len(agent.seen("on_chat_response")) == 2


async def test_drop_refuses_overlapping_submits(gateway: Any) -> None:
    """client-tools.test.ts:3236 "drop: rejects overlapping submits" and :3428 "drop: onChatResponse fires only
    for accepted turn"."""
    agent, frames = await overlapping(gateway, "drop")
    assert [ran(f) for f in frames] == [True, False, False]
    assert texts(agent) == [("user", "one"), ("assistant", "first")]
    assert len(agent.seen("on_chat_response")) == 1


async def test_merge_keeps_every_message_and_runs_one_turn_for_the_overlap(gateway: Any) -> None:
    """client-tools.test.ts:3266 "merge: all user messages preserved, single model turn for overlapping"."""
    agent, frames = await overlapping(gateway, "merge")
    assert [ran(f) for f in frames] == [True, False, True]
    assert [t for r, t in texts(agent) if r == "user"] == ["one", "two", "three"]
    assert [t for r, t in texts(agent) if r == "assistant"] == ["first", "second"]


async def test_debounce_runs_only_the_trailing_submit(gateway: Any) -> None:
    """client-tools.test.ts:3293 "debounce: waits for quiet period"."""
    _agent, frames = await overlapping(gateway, {"strategy": "debounce", "debounce_ms": 30})
    assert [ran(f) for f in frames] == [True, False, True]


async def test_concurrency_applies_to_submits_not_regenerations(gateway: Any) -> None:
    """client-tools.test.ts:3322 "only applies to submit-message, not regenerate-message"."""
    _agent, frames = await overlapping(gateway, "drop", third_trigger="regenerate-message")
    assert [ran(f) for f in frames] == [True, False, True]


# -- repair of interrupted calls and malformed input ------------------------------------------------------------


class AskUser(Recorder):
    """Repairs an interrupted ``ask_user`` call into a text part carrying its prompt (the reference's override)."""

    def repair_interrupted_tool_part(self, part: ta.ToolPart) -> Any:
        if part.type == "tool-ask_user":
            return ta.TextPart(text=part.input["prompt"])
        return super().repair_interrupted_tool_part(part)


async def repaired_after_a_turn(*parts: dict[str, Any]) -> tuple[list[Any], ScriptedModel]:
    model = ScriptedModel([text("ok")])
    agent = AskUser(model=model, store=ta.MemoryStore())
    await agent.add_messages(
        [wire_message("u1", "user", {"type": "text", "text": "hi"}), wire_message("a1", "assistant", *parts)]
    )
    await agent.save_messages("next")
    stored = await agent.store.get_message("a1")
    assert stored is not None
    return list(stored.parts), model


async def test_an_interrupted_ask_user_becomes_a_text_part() -> None:
    """client-tools.test.ts:3454 "converts an interrupted ask_user into a text part carrying the prompt"."""
    parts, _ = await repaired_after_a_turn(
        {
            "type": "tool-ask_user",
            "toolCallId": "tc1",
            "state": "input-available",
            "input": {"prompt": "Ship it tonight?"},
        }
    )
    assert [(p.type, getattr(p, "text", None)) for p in parts] == [("text", "Ship it tonight?")]


async def test_other_interrupted_calls_get_the_default_error_result() -> None:
    """client-tools.test.ts:3480 "falls back to the default errored-result repair for non-ask_user tools"."""
    parts, _ = await repaired_after_a_turn(client_part("tc1", "input-available"))
    assert [(p.type, p.state) for p in parts] == [("tool-client_action", "output-error")]


async def test_a_settled_ask_user_is_left_alone() -> None:
    """client-tools.test.ts:3503 "leaves a settled ask_user untouched (only interrupted calls are repaired)"."""
    parts, _ = await repaired_after_a_turn(
        {
            "type": "tool-ask_user",
            "toolCallId": "tc1",
            "state": "output-available",
            "input": {"prompt": "Q?"},
            "output": {"answer": "yes"},
        }
    )
    assert [(p.type, p.state, p.output) for p in parts] == [("tool-ask_user", "output-available", {"answer": "yes"})]


@pytest.mark.parametrize("value", ["", None, [{"id": 1}], 7], ids=["empty string", "null", "array", "number"])
async def test_a_settled_call_with_malformed_input_gets_an_empty_object(value: Any) -> None:
    """client-tools.test.ts:3532 "normalizes settled tool input %s to {}"."""
    parts, model = await repaired_after_a_turn(
        {
            "type": "tool-doThing",
            "toolCallId": "tc1",
            "state": "output-available",
            "input": value,
            "output": {"ok": True},
        }
    )
    [call] = [c for m in model.requests[0].messages for c in m.get("tool_calls") or []]
    assert json.loads(call["function"]["arguments"]) == {}
    assert [(p.state, p.output) for p in parts] == [("output-available", {"ok": True})]


async def test_a_settled_call_with_json_string_input_gets_the_parsed_object() -> None:
    """client-tools.test.ts:3561 "parses a stringified-JSON object input"."""
    _, model = await repaired_after_a_turn(
        {
            "type": "tool-doThing",
            "toolCallId": "tc1",
            "state": "output-available",
            "input": '{"prompt":"a cat"}',
            "output": {"ok": True},
        }
    )
    [call] = [c for m in model.requests[0].messages for c in m.get("tool_calls") or []]
    assert json.loads(call["function"]["arguments"]) == {"prompt": "a cat"}


# -- client tools over chat() -------------------------------------------------------------------------------------

ACTION = ta.ClientToolSchema(
    name="client_action",
    description="A client tool",
    parameters={"type": "object", "properties": {"action": {"type": "string"}}},
)
ACTION_2 = ta.ClientToolSchema(name="client_action_2", description="Another client tool")


class Executor:
    def __init__(self, *, raises: bool = False) -> None:
        self.calls: list[tuple[str, Any, str]] = []
        self.raises = raises

    async def __call__(self, tool_name: str, input: Any, tool_call_id: str) -> Any:
        self.calls.append((tool_name, input, tool_call_id))
        if self.raises:
            raise RuntimeError("executor failed")
        return {"ok": True, "echoed": input}


def states(agent: ta.Think) -> list[tuple[str | None, str]]:
    return [(p.tool_name, p.state) for p in tool_parts(agent)]


async def test_an_executor_completes_the_client_tool_round_trip_in_the_turn() -> None:
    """client-tools.test.ts:3588 "completes the client-tool round trip inline when an executor is supplied" and
    :3736 "invokes onClientToolCall across the RPC boundary (caller-supplied executor)"."""
    model = ScriptedModel(
        [tool_call("client_action", {"action": "do_thing"}, id="tc-client-1"), text("Continuation after tool")]
    )
    agent = Recorder(model=model, store=ta.MemoryStore())
    executor = Executor()
    stream = agent.chat("use client tool", client_tools=[ACTION], on_client_tool_call=executor)
    await stream.collect()
    assert stream.status == "completed"
    assert "client_action" in agent.seen("before_turn")[0].tools
    assert executor.calls == [("client_action", {"action": "do_thing"}, "tc-client-1")]
    assert states(agent) == [("client_action", "output-available")]
    assert texts(agent)[-1] == ("assistant", "Continuation after tool")


async def test_chat_client_tools_are_for_that_turn_only() -> None:
    """client-tools.test.ts:3613 "registers client tools for the turn WITHOUT polluting the persisted registry
    (recovery safety)": the next turn does not offer them."""
    model = ScriptedModel(
        [tool_call("client_action", {"action": "do_thing"}, id="tc-client-1"), text("done"), text("next")]
    )
    agent = Recorder(model=model, store=ta.MemoryStore())
    await agent.chat("use client tool", client_tools=[ACTION], on_client_tool_call=Executor()).collect()
    await agent.save_messages("and now")
    assert offered(model, 0) == ["client_action"] and offered(model, 2) == []


async def test_an_interrupted_chat_client_tool_call_is_not_a_pending_interaction() -> None:
    """client-tools.test.ts:3630 "does not classify an interrupted RPC client-tool call as a pending human
    interaction (recovers, not parks)"."""
    agent = Recorder(model=ScriptedModel([tool_call("client_action", {}, id="tc-client-1")]), store=ta.MemoryStore())
    await agent.chat("use client tool", client_tools=[ACTION]).collect()
    assert states(agent) == [("client_action", "input-available")]
    assert agent.has_pending_interaction() is False


async def test_a_call_of_a_persisted_client_tool_is_a_pending_interaction() -> None:
    """client-tools.test.ts:3642 "would wedge recovery if the RPC client tool were persisted (guards the fix)":
    once the tool is in the persisted registry, its waiting call is a pending interaction."""
    agent = Recorder(model=ScriptedModel([tool_call("client_action", {}, id="tc-client-1")]), store=ta.MemoryStore())
    await agent.chat("use client tool", client_tools=[ACTION]).collect()
    await agent.set_client_tools([ACTION])
    assert agent.has_pending_interaction() is True


async def test_an_executor_that_raises_is_a_tool_error_and_the_turn_goes_on() -> None:
    """client-tools.test.ts:3655 "handles an executor that throws without crashing the turn"."""
    model = ScriptedModel([tool_call("client_action", {"action": "do_thing"}, id="tc-client-1"), text("recovered")])
    agent = Recorder(model=model, store=ta.MemoryStore())
    executor = Executor(raises=True)
    stream = agent.chat("use client tool", client_tools=[ACTION], on_client_tool_call=executor)
    await stream.collect()
    assert stream.status == "completed" and len(executor.calls) == 1
    assert states(agent) == [("client_action", "output-error")]


async def test_without_an_executor_the_call_is_left_waiting() -> None:
    """client-tools.test.ts:3671 "surfaces a dangling tool call when no executor is supplied"."""
    model = ScriptedModel([tool_call("client_action", {"action": "do_thing"}, id="tc-client-1")])
    agent = Recorder(model=model, store=ta.MemoryStore())
    stream = agent.chat("use client tool", client_tools=[ACTION])
    await stream.collect()
    assert stream.status == "completed"
    assert states(agent) == [("client_action", "input-available")]
    model.assert_complete()


async def test_parallel_client_tool_calls_all_reach_the_executor() -> None:
    """client-tools.test.ts:3687 "resolves multiple client tools called in parallel within one turn"."""
    model = ScriptedModel(
        [
            [tool_call("client_action", {"action": "a"}, id="c1"), tool_call("client_action_2", {}, id="c2")],
            text("Continuation after parallel tools"),
        ]
    )
    agent = Recorder(model=model, store=ta.MemoryStore())
    executor = Executor()
    await agent.chat("use client tools", client_tools=[ACTION, ACTION_2], on_client_tool_call=executor).collect()
    assert sorted(c[0] for c in executor.calls) == ["client_action", "client_action_2"]
    assert sorted(states(agent)) == [("client_action", "output-available"), ("client_action_2", "output-available")]
    assert texts(agent)[-1] == ("assistant", "Continuation after parallel tools")


async def test_the_executor_runs_across_sequential_steps() -> None:
    """client-tools.test.ts:3711 "invokes the executor across multiple sequential steps in one turn"."""
    model = ScriptedModel(
        [
            tool_call("client_action", {"action": "a"}, id="c1"),
            tool_call("client_action_2", {}, id="c2"),
            text("Done after two steps"),
        ]
    )
    agent = Recorder(model=model, store=ta.MemoryStore())
    executor = Executor()
    await agent.chat("use client tools", client_tools=[ACTION, ACTION_2], on_client_tool_call=executor).collect()
    assert [c[0] for c in executor.calls] == ["client_action", "client_action_2"]
    assert states(agent) == [("client_action", "output-available"), ("client_action_2", "output-available")]
    assert texts(agent)[-1] == ("assistant", "Done after two steps")


# -- results that arrive while the reply is still streaming -------------------------------------------------------


class Gates(ScriptedModel):
    """A scripted model whose first request stops after its n-th event for every n in ``gates``, until released.

    Its events: the response metadata, then two argument fragments per tool call, then the finish.
    """

    def __init__(self, steps: list[Any], *gates: int) -> None:
        super().__init__(steps)
        self.gates = {n: (asyncio.Event(), asyncio.Event()) for n in gates}

    async def reached(self, n: int) -> None:
        await asyncio.wait_for(self.gates[n][0].wait(), WAIT_S)

    def release(self, n: int) -> None:
        self.gates[n][1].set()

    def stream(self, request: Any) -> Any:
        inner = super().stream(request)
        first = len(self.requests) == 1

        async def gated() -> Any:
            count = 0
            async for event in inner:
                yield event
                count += 1
                if first and count in self.gates:
                    reached, release = self.gates[count]
                    reached.set()
                    await release.wait()

        return gated()


class StepHeld(Recorder):
    """Holds the end of its first step (``on_step_finish``): the reply exists only in the turn, not in the store."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_done = asyncio.Event()
        self.go_on = asyncio.Event()

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        await super().on_step_finish(ctx)
        if not self.go_on.is_set():
            self.step_done.set()
            await self.go_on.wait()


async def test_a_result_for_a_reply_not_yet_stored_is_applied() -> None:
    """client-tools.test.ts:1076 "applies a client tool result delivered before the assistant message is persisted
    (#1649)"."""
    agent = StepHeld(model=ScriptedModel([tool_call("client_action", {}, id="tc-midstream-1")]), store=ta.MemoryStore())
    turn = asyncio.ensure_future(agent.chat("go", client_tools=[CLIENT_ACTION]).collect())
    await asyncio.wait_for(agent.step_done.wait(), WAIT_S)
    assert [m.role for m in await agent.store.list_messages()] == ["user"]
    assert await agent.add_tool_result("tc-midstream-1", "mid-stream result") is True
    agent.go_on.set()
    await asyncio.wait_for(turn, WAIT_S)
    part = part_of(agent, "tc-midstream-1")
    assert (part.state, part.output) == ("output-available", "mid-stream result")


async def test_an_approval_for_a_reply_not_yet_stored_is_applied() -> None:
    """client-tools.test.ts:1093 "applies a client tool approval delivered before the assistant message is persisted
    (#1649)"."""
    steps = [tool_call("updateTrigger", {"enabled": True}, id="tc-midstream-approval-1")]

    class HeldTriggers(StepHeld, Triggers):
        pass

    agent = HeldTriggers(model=ScriptedModel(steps), store=ta.MemoryStore())
    turn = asyncio.ensure_future(agent.chat("update my trigger").collect())
    await asyncio.wait_for(agent.step_done.wait(), WAIT_S)
    assert await agent.add_tool_approval("tc-midstream-approval-1", True) is True
    agent.go_on.set()
    await asyncio.wait_for(turn, WAIT_S)
    assert part_of(agent, "tc-midstream-approval-1").state == "approval-responded"
    assert agent.executions == 0


def repaired_ids(agent: Recorder) -> list[str]:
    return [i for e in agent.events if e.type == "chat:transcript:repaired" for i in e.payload.get("toolCallIds") or []]


async def test_a_result_sent_over_the_socket_while_the_reply_streams_survives(gateway: Any) -> None:
    """client-tools.test.ts:1107 "applies a client tool result that arrives mid-stream over the WebSocket
    (#1649)"."""
    model = ScriptedModel([tool_call("client_action", {"action": "test"}, id="tc-client-1"), text("continued")])
    client, agent_of = await gateway(StepHeld, model=model)
    agent = await agent_of("step-held", "r1")
    ws = await client.ws_connect("/agents/step-held/r1")
    await skip_greeting(ws)
    await ws.send_str(chat_request("req-1", wire_user("do the thing", "u1"), clientTools=[{"name": "client_action"}]))
    await asyncio.wait_for(agent.step_done.wait(), WAIT_S)
    seen = []
    while "tool-input-available" not in seen:  # the client has the call: it answers before the reply is stored
        frame = await next_frame(ws)
        if frame["type"] == "cf_agent_use_chat_response" and frame["body"]:
            seen.append(json.loads(frame["body"])["type"])
    answer = {"toolCallId": "tc-client-1", "toolName": "client_action", "output": "mid-stream output"}
    await ws.send_str(json.dumps({"type": "cf_agent_tool_result", **answer, "autoContinue": True}))
    await handled(ws)
    agent.go_on.set()
    await agent.wait_until_stable(timeout_s=WAIT_S)
    part = part_of(agent, "tc-client-1")
    assert (part.state, part.output) == ("output-available", "mid-stream output")
    assert [r.continuation for r in agent.seen("on_chat_response")] == [False, True]
    assert "tc-client-1" not in repaired_ids(agent)


FAST_SLOW = [ta.ClientToolSchema(name="fast_tool"), ta.ClientToolSchema(name="slow_tool")]


def fast_then_slow(*gates: int) -> tuple[Recorder, Gates]:
    """One step calling ``fast_tool`` (events 2-3) then ``slow_tool`` (events 4-5), then a continuation's text."""
    model = Gates(
        [step(tool_call("fast_tool", {}, id="tc-fast"), tool_call("slow_tool", {}, id="tc-slow")), text("both done")],
        *gates,
    )
    return Recorder(model=model, store=ta.MemoryStore()), model


async def test_a_sibling_streamed_after_a_resolved_call_holds_the_continuation() -> None:
    """client-tools.test.ts:1889 "waits for a sibling tool emitted LATER in the same stream before continuing
    (#1649 headline / #1650)"."""
    agent, model = fast_then_slow(3)
    turn = asyncio.ensure_future(agent.chat("delete A and modify B", client_tools=FAST_SLOW).collect())
    await model.reached(3)
    assert await agent.add_tool_result("tc-fast", "fast output", auto_continue=True) is True
    model.release(3)
    await asyncio.wait_for(turn, WAIT_S)
    assert part_of(agent, "tc-slow").state == "input-available"
    await nothing_happens(agent)
    assert continuations(agent) == [] and "tc-slow" not in repaired_ids(agent)
    await agent.add_tool_result("tc-slow", "slow output", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1 and "tc-slow" not in repaired_ids(agent)
    assert [(p.tool_call_id, p.state, p.output) for p in tool_parts(agent)] == [
        ("tc-fast", "output-available", "fast output"),
        ("tc-slow", "output-available", "slow output"),
    ]


async def test_a_batch_answered_entirely_while_streaming_continues_once_the_stream_ends() -> None:
    """client-tools.test.ts:1995 "fires an all-fast parallel batch resolved entirely mid-stream once the stream
    finalizes (#1650)"."""
    agent, model = fast_then_slow(3, 5)
    turn = asyncio.ensure_future(agent.chat("delete A and modify B", client_tools=FAST_SLOW).collect())
    await model.reached(3)
    await agent.add_tool_result("tc-fast", "fast output", auto_continue=True)
    model.release(3)
    await model.reached(5)
    await agent.add_tool_result("tc-slow", "slow output", auto_continue=True)
    model.release(5)
    await asyncio.wait_for(turn, WAIT_S)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1 and repaired_ids(agent) == []
    assert [(p.tool_call_id, p.state) for p in tool_parts(agent)] == [
        ("tc-fast", "output-available"),
        ("tc-slow", "output-available"),
    ]


async def test_a_sibling_answered_after_the_stream_ended_is_not_errored() -> None:
    """client-tools.test.ts:2077 "does not error a slow sibling answered AFTER stream end when a fast sibling
    auto-continued mid-stream (#1649)"."""
    agent, model = fast_then_slow(5)
    turn = asyncio.ensure_future(agent.chat("delete A and modify B", client_tools=FAST_SLOW).collect())
    await model.reached(5)
    await agent.add_tool_result("tc-fast", "fast output", auto_continue=True)
    model.release(5)
    await asyncio.wait_for(turn, WAIT_S)
    await nothing_happens(agent)
    assert continuations(agent) == [] and "tc-slow" not in repaired_ids(agent)
    await agent.add_tool_result("tc-slow", "slow output", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1 and "tc-slow" not in repaired_ids(agent)
    part = part_of(agent, "tc-slow")
    assert (part.state, part.output) == ("output-available", "slow output")


# -- the barrier over the wire --------------------------------------------------------------------------------------


async def stored_batch(gateway: Any, message_id: str, *parts: dict[str, Any], model: Any = None) -> Any:
    """A socket to an agent whose history ends with an assistant reply holding ``parts``."""
    client, ws, agent = await connect(gateway, model or ScriptedModel([text("continued")]))
    await agent.add_messages(
        [wire_message("u1", "user", {"type": "text", "text": "go"}), wire_message(message_id, "assistant", *parts)]
    )
    return client, ws, agent


def result_frame(tool_call_id: str, tool_name: str, output: Any, **extra: Any) -> str:
    return json.dumps(
        {"type": "cf_agent_tool_result", "toolCallId": tool_call_id, "toolName": tool_name, "output": output, **extra}
    )


async def test_a_settled_dynamic_tool_beside_a_waiting_call_holds_the_barrier(gateway: Any) -> None:
    """client-tools.test.ts:1264 "holds the barrier when a settled dynamic-tool sits beside a pending tool
    (#1649)"."""
    dynamic = {
        "type": "dynamic-tool",
        "toolName": "dyn_action",
        "toolCallId": "tc-dyn",
        "state": "input-available",
        "input": {"action": "dyn"},
    }
    _, ws, agent = await stored_batch(gateway, "assistant-dynamic", dynamic, client_part("tc-reg", "input-available"))
    await ws.send_str(result_frame("tc-dyn", "dyn_action", "dyn output", autoContinue=True))
    await until_type(ws, "cf_agent_message_updated")
    await nothing_happens(agent)
    assert continuations(agent) == []
    await ws.send_str(result_frame("tc-reg", "client_action", "reg output", autoContinue=True))
    await until_done(ws)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1
    assert [(p.tool_call_id, p.state) for p in tool_parts(agent)] == [
        ("tc-dyn", "output-available"),
        ("tc-reg", "output-available"),
    ]


async def test_a_person_answering_beside_a_fast_tool_holds_the_barrier_without_repair(gateway: Any) -> None:
    """client-tools.test.ts:1334 "does not fire through a human-in-the-loop tool parked beside a fast tool
    (#1650)"."""
    human = {
        "type": "tool-ask_user",
        "toolCallId": "tc-human",
        "toolName": "ask_user",
        "state": "input-available",
        "input": {"prompt": "What is your name?"},
    }
    _, ws, agent = await stored_batch(gateway, "assistant-human", client_part("tc-fast", "input-available"), human)
    await ws.send_str(result_frame("tc-fast", "client_action", "fast output", autoContinue=True))
    await until_type(ws, "cf_agent_message_updated")
    await nothing_happens(agent)
    assert continuations(agent) == [] and "tc-human" not in repaired_ids(agent)
    assert part_of(agent, "tc-human").state == "input-available"
    await ws.send_str(result_frame("tc-human", "ask_user", "Ada", autoContinue=True))
    await until_done(ws)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1 and "tc-human" not in repaired_ids(agent)
    assert [(p.tool_call_id, p.state, p.output) for p in tool_parts(agent)] == [
        ("tc-fast", "output-available", "fast output"),
        ("tc-human", "output-available", "Ada"),
    ]


async def test_a_sibling_that_never_arrives_leaves_the_continuation_armed_and_the_call_waiting(gateway: Any) -> None:
    """client-tools.test.ts:1444 "does not pin the isolate when a sibling result never arrives — client disconnect
    mid-batch (#1650)": no continuation and no repair; the armed continuation still runs once a later answer
    completes the batch (the reference checks that through its barrier's in-memory state)."""
    _, ws, agent = await stored_batch(
        gateway,
        "assistant-orphan",
        client_part("tc-fast", "input-available"),
        client_part("tc-gone", "input-available"),
    )
    await ws.send_str(result_frame("tc-fast", "client_action", "fast output", autoContinue=True))
    await until_type(ws, "cf_agent_message_updated")
    await ws.close()
    await nothing_happens(agent)
    assert continuations(agent) == [] and "tc-gone" not in repaired_ids(agent)
    assert [(p.tool_call_id, p.state) for p in tool_parts(agent)] == [
        ("tc-fast", "output-available"),
        ("tc-gone", "input-available"),
    ]
    await agent.add_tool_result("tc-gone", "late output")
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1


async def test_parallel_results_over_the_wire_make_one_continuation_in_either_order(gateway: Any) -> None:
    """client-tools.test.ts:2776 "coalesces parallel tool results into a single continuation regardless of arrival
    order (#1649)"."""
    _, ws, agent = await stored_batch(
        gateway,
        "assistant-deferred-1",
        {**client_part("tc-deferred-1", "input-available"), "input": {"action": "first"}},
        {**client_part("tc-deferred-2", "input-available"), "input": {"action": "second"}},
    )
    await ws.send_str(result_frame("tc-deferred-1", "client_action", "first done", autoContinue=True))
    await until_type(ws, "cf_agent_message_updated")
    await nothing_happens(agent)
    assert continuations(agent) == []
    await ws.send_str(result_frame("tc-deferred-2", "client_action", "second done", autoContinue=True))
    await until_done(ws)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(continuations(agent)) == 1
    assert [
        (m.id if m.role == "assistant" and m.id == "assistant-deferred-1" else m.role, m.text)
        for m in agent.get_messages()
    ] == [
        ("user", "go"),
        ("assistant-deferred-1", ""),
        ("assistant", "continued"),
    ]


# -- resume requests while a continuation is armed ------------------------------------------------------------------

RESUME_TYPES = ("cf_agent_stream_pending", "cf_agent_stream_resuming", "cf_agent_stream_resume_none")


async def test_a_resume_request_right_after_a_result_hears_the_continuation_not_none(gateway: Any) -> None:
    """client-tools.test.ts:2500 "does not send STREAM_RESUME_NONE for an immediate resume request after tool
    output" and :2632 "holds STREAM_RESUME_REQUEST while continuation is pending": the socket is told to wait
    (pending), then RESUMING with the continuation's id."""
    _, ws, agent = await stored_batch(
        gateway, "assistant-immediate-resume", client_part("tc-immediate-resume", "input-available")
    )
    await ws.send_str(result_frame("tc-immediate-resume", "client_action", "done", autoContinue=True))
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request"}))
    frames = await until_type(ws, "cf_agent_stream_resuming")
    assert [f["type"] for f in frames if f["type"] in RESUME_TYPES] == [
        "cf_agent_stream_pending",
        "cf_agent_stream_resuming",
    ]
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": frames[-1]["id"]}))
    done = (await until_done(ws))[-1]
    assert done["id"] == frames[-1]["id"] and done.get("continuation") is True
    await agent.wait_until_stable(timeout_s=WAIT_S)


async def test_the_continuation_runs_when_the_answering_socket_closes_before_it_starts(gateway: Any) -> None:
    """client-tools.test.ts:2568 "continues when the initiating connection closes before coalescing finishes"."""
    _, ws, agent = await stored_batch(
        gateway, "assistant-close", client_part("tc-close-before-coalesce", "input-available")
    )
    await ws.send_str(result_frame("tc-close-before-coalesce", "client_action", "done", autoContinue=True))
    await until_type(ws, "cf_agent_message_updated")
    await ws.close()
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert [(r.status, r.continuation) for r in agent.seen("on_chat_response")] == [("completed", True)]


async def test_a_resume_request_after_the_continuation_ended_is_answered_idle_with_its_probe(gateway: Any) -> None:
    """client-tools.test.ts:2698 "correlates idle STREAM_RESUME_NONE after a continuation completes"."""
    client, ws1, agent = await stored_batch(
        gateway, "assistant-resume-none", client_part("tc-resume-none", "input-available")
    )
    ws2 = await client.ws_connect("/agents/clienty/r1")
    await skip_greeting(ws2)
    await ws1.send_str(result_frame("tc-resume-none", "client_action", "done", autoContinue=True))
    await until_done(ws1)
    await until_done(ws2)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    await ws2.send_str(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "probe-idle-continuation"}))
    reply = (await until_type(ws2, "cf_agent_stream_resume_none"))[-1]
    assert reply == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "probe-idle-continuation"}


# -- clear and message concurrency ----------------------------------------------------------------------------------


async def test_a_clear_skips_a_queued_latest_submit(gateway: Any) -> None:
    """client-tools.test.ts:3349 "clear skips queued latest submits"."""
    model = Gates([text("first"), text("never")], 1)
    _, ws, agent = await connect(gateway, model, strategy("latest"))
    await ws.send_str(chat_request("req-1", wire_user("First", "u1")))
    await model.reached(1)
    await ws.send_str(chat_request("req-2", wire_user("Second", "u2")))
    await ws.send_str(json.dumps({"type": "cf_agent_chat_clear"}))
    await handled(ws)
    model.release(1)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert agent.get_messages() == []
    assert [ctx.request_id for ctx in agent.seen("before_turn")] == ["req-1"]
    assert model.remaining == 1


async def test_a_submit_after_a_clear_does_not_overlap_the_one_before(gateway: Any) -> None:
    """client-tools.test.ts:3372 "post-clear submits are not treated as overlapping" (``drop``)."""
    _, ws, agent = await connect(gateway, ScriptedModel([text("before"), text("after")]), strategy("drop"))
    await ws.send_str(chat_request("req-1", wire_user("Before clear", "u1")))
    await until_done(ws, "req-1")
    await ws.send_str(json.dumps({"type": "cf_agent_chat_clear"}))
    await ws.send_str(chat_request("req-2", wire_user("After clear", "u2")))
    await until_done(ws, "req-2")
    await agent.wait_idle()
    assert texts(agent) == [("user", "After clear"), ("assistant", "after")]
