"""Port of the session-facing part of ``packages/think/src/tests/think-session.test.ts``: chat turns and their
persistence, errors and aborts, the message tree (idempotent appends, branches), context blocks and the frozen
system prompt, async ``configure_session``, ``on_chat_response``, ``save_messages`` / ``add_messages`` /
``continue_last_turn``, and ``wait_until_stable``.

The reference's ``ThinkTestAgent`` answers with a canned text (``setResponse``), fails on demand
(``testChatWithError``) and aborts after n chunks (``testChatWithAbort``); the scripted model does the same here.
The stream-watchdog cases are ``test_stall_recovery.py``'s. Left out (README.md): routed props, configuration
storage, sanitisation and row sizes, workspace replay, the recovery-incident budget cases, and platform transients.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

from .conftest import WAIT_S, Recorder, skip_greeting, texts

SRC = "packages/think/src/tests/think-session.test.ts"


def agent_with(*steps: Any, cls: type[Recorder] = Recorder, **options: Any) -> Recorder:
    return cls(model=ScriptedModel(list(steps)), store=ta.MemoryStore(), **options)


def roles(agent: ta.Think) -> list[str]:
    return [m.role for m in agent.get_messages()]


# -- core ----------------------------------------------------------------------------------------------------------


async def test_a_chat_turn_stores_the_user_message_and_the_reply() -> None:
    """think-session.test.ts:182 "should run a chat turn and persist messages" and :403 "should build assistant
    message with text parts"."""
    agent = agent_with(text("Hello back", chunk_size=3))
    chunks = await agent.chat("Hello!").collect()
    assert chunks[0].type == "start" and chunks[-1].type == "finish"
    assert texts(agent) == [("user", "Hello!"), ("assistant", "Hello back")]
    assert [p.type for p in agent.get_messages()[1].parts] == ["step-start", "text"]
    assert [m.role for m in await agent.store.list_messages()] == ["user", "assistant"]


async def test_turns_accumulate_and_a_clear_empties_the_history() -> None:
    """think-session.test.ts:270 "should accumulate messages across multiple turns", :286 "should clear all
    messages" and :357 "should return empty messages before first chat"."""
    agent = agent_with(text("one"), text("two"))
    assert agent.get_messages() == []
    await agent.chat("First message").collect()
    await agent.chat("Second message").collect()
    assert roles(agent) == ["user", "assistant", "user", "assistant"]
    await agent.clear()
    assert agent.get_messages() == [] and await agent.store.list_messages() == []


async def test_an_empty_string_still_runs_a_turn() -> None:
    """think-session.test.ts:333 "should run inference for an empty string chat message"."""
    agent = agent_with(text("Greeting from empty input"))
    stream = agent.chat("")
    await stream.collect()
    assert stream.status == "completed"
    [user, reply] = agent.get_messages()
    assert (user.role, [(p.type, getattr(p, "text", None)) for p in user.parts]) == ("user", [("text", "")])
    assert reply.text == "Greeting from empty input"


class Plain(Recorder):
    pass


async def connected(gateway: Any, *steps: Any) -> tuple[Any, Plain]:
    client, agent_of = await gateway(Plain, model=ScriptedModel(list(steps)))
    agent = await agent_of("plain", "r1")
    ws = await client.ws_connect("/agents/plain/r1")
    await skip_greeting(ws)
    return ws, agent


async def frames_until(ws: Any, wanted: Any) -> list[dict[str, Any]]:
    """Frames up to the first one ``wanted`` accepts; 1 s without a frame fails (these frames follow at once)."""
    frames = []
    while True:
        frame = json.loads((await asyncio.wait_for(ws.receive(), 1.0)).data)
        frames.append(frame)
        if wanted(frame):
            return frames


async def test_a_chat_turn_called_in_process_broadcasts_the_transcript(gateway: Any) -> None:
    """think-session.test.ts:195 "should broadcast RPC chat message updates to connected clients"."""
    ws, agent = await connected(gateway, text("hi"))
    await agent.chat("Hello from RPC").collect()
    frames = await frames_until(
        ws, lambda f: f["type"] == "cf_agent_chat_messages" and [m["role"] for m in f["messages"]][-1:] == ["assistant"]
    )
    assert [m["role"] for m in frames[-1]["messages"]] == ["user", "assistant"]


async def test_a_chat_turn_called_in_process_broadcasts_its_stream(gateway: Any) -> None:
    """think-session.test.ts:229 "should broadcast RPC chat stream chunks to connected clients"."""
    ws, agent = await connected(gateway, step(text("first "), text("second")))
    await agent.chat("Hello from RPC").collect()
    frames = await frames_until(ws, lambda f: f["type"] == "cf_agent_use_chat_response" and f["done"])
    deltas = [json.loads(f["body"]) for f in frames if f["type"] == "cf_agent_use_chat_response" and f["body"]]
    assert [d["delta"] for d in deltas if d["type"] == "text-delta"] == ["first ", "second"]


async def test_a_clear_called_in_process_is_broadcast(gateway: Any) -> None:
    """think-session.test.ts:298 "should broadcast programmatic clearMessages to connected clients"."""
    ws, agent = await connected(gateway, text("hi"))
    await agent.save_messages("Hello before clear")
    await agent.clear()
    frames = await frames_until(ws, lambda f: f["type"] == "cf_agent_chat_clear")
    assert frames[-1] == {"type": "cf_agent_chat_clear"}


# -- errors and aborts ----------------------------------------------------------------------------------------------


async def test_a_failed_turn_keeps_its_partial_reply_and_reports_once() -> None:
    """think-session.test.ts:426 "should handle errors and return error message", :435 "should persist partial
    assistant message on error", :455 "should log errors via onChatError hook" and :465 "emits chat:request:failed
    when a chat stream fails"."""
    agent = agent_with(error(ta.ProviderError("Mid-stream failure"), after=text("This is a partial response")))
    stream = agent.chat("go")
    chunks = await stream.collect()
    assert stream.status == "error"
    assert [c.error_text for c in chunks if c.type == "error"] == ["Mid-stream failure"]
    assert texts(agent) == [("user", "go"), ("assistant", "This is a partial response")]
    [(err, ctx)] = agent.seen("on_chat_error")
    assert "Mid-stream failure" in str(err) and ctx.stage == "stream" and ctx.messages_persisted is True
    [failed] = [e.payload for e in agent.events if e.type == "chat:request:failed"]
    assert (failed["stage"], failed["messagesPersisted"], failed["error"]) == ("stream", True, "Mid-stream failure")


async def test_a_turn_after_a_failed_one_runs_normally() -> None:
    """think-session.test.ts:664 "should recover and continue chatting after error"."""
    agent = agent_with(error(ta.ProviderError("boom")), text("fine now"))
    await agent.chat("first").collect()
    stream = agent.chat("second")
    await stream.collect()
    assert stream.status == "completed" and texts(agent)[-1] == ("assistant", "fine now")


async def test_an_aborted_turn_keeps_its_partial_reply_and_the_next_turn_runs() -> None:
    """think-session.test.ts:718 "should persist partial message on abort" and :741 "should recover and chat
    normally after abort"."""
    agent = agent_with(step(text("partial1 "), text("partial2 "), delay(5), text("partial3 ")), text("normal"))
    stream = agent.chat("Abort and persist")
    seen = []
    async for chunk in stream:
        seen.append(chunk)
        if sum(c.type == "text-delta" for c in seen) == 2:
            assert agent.cancel_chat(stream.request_id)
    assert stream.status == "aborted"
    assert texts(agent) == [("user", "Abort and persist"), ("assistant", "partial1 partial2 ")]
    [response] = agent.seen("on_chat_response")
    assert response.status == "aborted"
    await agent.chat("Normal after abort").collect()
    assert roles(agent) == ["user", "assistant", "user", "assistant"]


# -- input and the message tree -------------------------------------------------------------------------------------


async def test_a_ui_message_with_several_parts_is_the_input() -> None:
    """think-session.test.ts:759 "should accept UIMessage as input" and :779 "should handle UIMessage with multiple
    parts"."""
    agent = agent_with(text("ok"))
    message = ta.UIMessage.model_validate(
        {"id": "rich-1", "role": "user", "parts": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}
    )
    await agent.chat(message).collect()
    [user, _] = agent.get_messages()
    assert (user.id, [p.text for p in user.parts]) == ("rich-1", ["one", "two"])  # type: ignore[union-attr]


async def test_a_repeated_user_message_id_is_stored_once() -> None:
    """think-session.test.ts:821 "should idempotently handle duplicate user messages"."""
    agent = agent_with(text("first"), text("second"))
    await agent.chat(ta.user_message("same", id="dup-1")).collect()
    await agent.chat(ta.user_message("same", id="dup-1")).collect()
    assert [m.id for m in agent.get_messages() if m.role == "user"] == ["dup-1"]


async def test_get_messages_returns_a_copy() -> None:
    """think-session.test.ts:877 "returns a copy from getMessages"."""
    agent = agent_with(text("hi"))
    await agent.chat("hello").collect()
    copy = agent.get_messages()
    copy.clear()
    assert roles(agent) == ["user", "assistant"]


# -- context blocks and the system prompt ---------------------------------------------------------------------------


class Remembers(Recorder):
    async def configure_session(self, session: ta.Session) -> ta.Session:
        await asyncio.sleep(0)  # the reference's async configureSession
        return session.with_context("memory", description="Learned facts", max_tokens=500)


def system(model: ScriptedModel, index: int) -> str:
    return str(model.requests[index].messages[0]["content"])


async def test_context_blocks_are_rendered_into_a_frozen_system_prompt() -> None:
    """think-session.test.ts:960 "should freeze system prompt from context blocks", :973 "should persist context
    block content across turns", :1031 "should initialize and chat with async configureSession" and :1043 "should
    have working context blocks from async config": a write shows in the prompt once it is refreshed."""
    model = ScriptedModel([text("a"), text("b"), text("c")])
    agent = Remembers(model=model, store=ta.MemoryStore())
    await agent.save_messages("Hello!")
    assert agent.session is not None
    await agent.session.set_context("memory", "User prefers TypeScript.")
    await agent.save_messages("again")
    assert "MEMORY" in system(model, 0) and "User prefers TypeScript." not in system(model, 1)
    await agent.session.refresh_system_prompt()
    await agent.save_messages("and again")
    assert "User prefers TypeScript." in system(model, 2)
    assert await agent.session.get_context("memory") == "User prefers TypeScript."
    assert [t["function"]["name"] for t in model.requests[0].tools] == ["set_context"]


async def test_an_empty_writable_block_is_rendered_as_writable() -> None:
    """think-session.test.ts:996 "should render empty writable blocks in system prompt"."""
    model = ScriptedModel([text("a")])
    agent = Remembers(model=model, store=ta.MemoryStore())
    await agent.save_messages("Hello!")
    assert "MEMORY" in system(model, 0) and "[writable]" in system(model, 0)


# -- on_chat_response -----------------------------------------------------------------------------------------------


async def test_on_chat_response_reports_each_turn_with_its_status() -> None:
    """think-session.test.ts:1162 "should fire onChatResponse after successful chat turn", :1206 "... with error
    status on failure", :1241 "should persist partial parts and fire error status for in-band errors" and :1355
    "should accumulate response hooks across multiple turns"."""
    agent = agent_with(text("ok"), error(ta.ProviderError("in-band"), after=text("half")), text("ok again"))
    for prompt in ("one", "two", "three"):
        await agent.chat(prompt).collect()
    assert [(r.status, r.message.text) for r in agent.seen("on_chat_response")] == [
        ("completed", "ok"),
        ("error", "half"),
        ("completed", "ok again"),
    ]


async def test_an_error_before_any_reply_fires_on_chat_error_only() -> None:
    """think-session.test.ts:1217 "should fire onChatResponse with error status when in-band error arrives before
    any parts". The seed overrides Think here: a turn that failed before any part of a reply existed fires only
    on_chat_error (seed: on_chat_response runs for the paths that store an assistant message)."""
    agent = agent_with(error(ta.ProviderError("nothing streamed")))
    await agent.chat("one").collect()
    assert agent.seen("on_chat_response") == []
    assert [str(e) for e, _ in agent.seen("on_chat_error")] == ["nothing streamed"]


class SlowResponse(Recorder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.order: list[str] = []

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.order.append(f"turn:{ctx.messages[-1]['content']}")
        return None

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        await asyncio.sleep(0.01)
        self.order.append(f"response:{result.message.text}")


async def test_an_async_on_chat_response_finishes_before_the_next_turn_and_none_is_lost() -> None:
    """think-session.test.ts:5143 "does not drop results during rapid sequential turns" and :5159 "awaits async
    hook before next turn starts"."""
    agent = agent_with(text("a"), text("b"), text("c"), cls=SlowResponse)
    for prompt in ("1", "2", "3"):
        await agent.save_messages(prompt)
    assert agent.order == ["turn:1", "response:a", "turn:2", "response:b", "turn:3", "response:c"]


# -- tool results across turns --------------------------------------------------------------------------------------


async def test_earlier_client_tool_results_reach_later_turns() -> None:
    """think-session.test.ts:1708 "preserves earlier client-side tool results across turns"."""
    model = ScriptedModel([text("ok")])
    agent = Recorder(model=model, store=ta.MemoryStore())
    for i in range(3):
        part = {
            "type": "tool-clientChoice",
            "toolCallId": f"tc-{i}",
            "state": "output-available",
            "input": {"question": f"q{i}"},
            "output": f"user-choice-{i}",
        }
        await agent.add_messages(
            [
                ta.user_message(f"question {i}", id=f"u-{i}"),
                ta.UIMessage.model_validate({"id": f"a-{i}", "role": "assistant", "parts": [part]}),
            ]
        )
    await agent.save_messages("follow up")
    prompt = json.dumps(agent.seen("before_turn")[0].messages)
    assert [f"user-choice-{i}" in prompt for i in range(3)] == [True, True, True]


# -- save_messages, add_messages, continue_last_turn ----------------------------------------------------------------


async def test_save_messages_stores_and_runs_a_turn_and_takes_a_function() -> None:
    """think-session.test.ts:1749 "should inject messages and run a turn", :1769 "should support function form" and
    :1787 "should fire onChatResponse"."""
    agent = agent_with(text("one"), text("two"))
    first = await agent.save_messages([ta.user_message("Injected", id="inj-1")])
    second = await agent.save_messages(lambda history: [ta.user_message(f"after {len(history)} messages")])
    assert (first.status, second.status) == ("completed", "completed")
    assert texts(agent) == [
        ("user", "Injected"),
        ("assistant", "one"),
        ("user", "after 2 messages"),
        ("assistant", "two"),
    ]
    assert [r.request_id for r in agent.seen("on_chat_response")] == [first.request_id, second.request_id]


async def test_add_messages_appends_without_a_turn_idempotently_by_id() -> None:
    """think-session.test.ts:1843 "appends without starting a model turn", :1866 "keeps the live cache coherent",
    :1877 "is idempotent by message id in append mode" and :1944 "is a no-op for empty input"."""
    agent = agent_with()
    await agent.add_messages([])
    assert agent.get_messages() == []
    await agent.add_messages(
        [
            ta.user_message("Context A", id="add-1"),
            ta.UIMessage.model_validate({"id": "add-2", "role": "assistant", "parts": [{"type": "text", "text": "B"}]}),
        ]
    )
    await agent.add_messages([ta.user_message("Ignored", id="add-1")])
    assert [(m.id, m.text) for m in agent.get_messages()] == [("add-1", "Context A"), ("add-2", "B")]
    assert agent.log == []


async def test_add_messages_upserts_in_place_without_moving_the_message() -> None:
    """think-session.test.ts:1896 "updates in place in upsert mode" and :1996 "does not re-parent on upsert"."""
    agent = agent_with()
    await agent.add_messages([ta.user_message("A", id="r-A"), ta.user_message("B", id="r-B")])
    await agent.add_messages([ta.user_message("A after", id="r-A")], mode="upsert")
    assert [(m.id, m.text) for m in agent.get_messages()] == [("r-A", "A after"), ("r-B", "B")]


async def test_add_messages_chains_a_list_and_branches_under_an_explicit_parent() -> None:
    """think-session.test.ts:1913 "chains an array linearly into one path" and :1973 "keeps the live view correct
    when an explicit parentId branches"."""
    agent = agent_with()
    await agent.add_messages(
        [ta.user_message("A", id="b-A"), ta.user_message("B", id="b-B"), ta.user_message("C", id="b-C")]
    )
    assert [m.id for m in agent.get_messages()] == ["b-A", "b-B", "b-C"]
    reply = ta.UIMessage.model_validate({"id": "b-D", "role": "assistant", "parts": [{"type": "text", "text": "D"}]})
    await agent.add_messages([reply], parent_id="b-A")
    assert [m.id for m in agent.get_messages()] == ["b-A", "b-D"]
    assert [m.id for m in await agent.load_messages()] == ["b-A", "b-D"]


async def test_add_messages_under_an_unknown_parent_stores_nothing() -> None:
    """think-session.test.ts:1930 "throws on an unknown explicit parentId"."""
    agent = agent_with()
    with pytest.raises(ta.ThinkError, match="does not exist"):
        await agent.add_messages([ta.user_message("x", id="orphan")], parent_id="does-not-exist")
    assert agent.get_messages() == [] and await agent.store.list_messages() == []


async def test_added_messages_reach_the_next_turn() -> None:
    """think-session.test.ts:1953 "is visible to the next turn"."""
    agent = agent_with(text("42"))
    await agent.add_messages([ta.user_message("Remember 42", id="ctx-1")])
    await agent.save_messages("And?")
    assert [m["content"] for m in agent.seen("before_turn")[0].messages] == ["Remember 42", "And?"]


async def test_continue_last_turn_continues_the_last_reply_with_its_body() -> None:
    """think-session.test.ts:2035 "should continue from the last assistant message", :2057 "should set
    continuation: true on continueLastTurn", :2071 "... onChatResponse with continuation: true" and :2084 "should
    accept custom body"."""
    agent = agent_with(text("Start answer"), text(" and more"))
    await agent.save_messages("Start")
    result = await agent.continue_last_turn(body={"model": "fast"})
    assert result.status == "completed"
    turn = agent.seen("before_turn")[-1]
    assert (turn.continuation, turn.body) == (True, {"model": "fast"})
    assert [r.continuation for r in agent.seen("on_chat_response")] == [False, True]
    assert texts(agent) == [("user", "Start"), ("assistant", "Start answer"), ("assistant", " and more")]


async def test_continue_last_turn_without_a_reply_is_skipped() -> None:
    """think-session.test.ts:2049 "should skip when no assistant message exists"."""
    agent = agent_with()
    result = await agent.continue_last_turn()
    assert result.status == "skipped" and agent.log == []


# -- wait_until_stable ----------------------------------------------------------------------------------------------


async def test_an_idle_agent_is_stable_at_once() -> None:
    """think-session.test.ts:4915 "returns true immediately when no pending interactions" and :4922 "returns true
    when no turns are active"."""
    agent = agent_with(text("hi"))
    await agent.save_messages("hello")
    assert agent.has_pending_interaction() is False
    await agent.wait_until_stable(timeout_s=0.5)


@ta.tool(needs_approval=True)
async def dangerous(path: str) -> str:
    """Delete a path."""
    return f"deleted {path}"


async def test_an_approval_waiting_is_pending_until_answered() -> None:
    """think-session.test.ts:5005 "detects pending approval" and :5033 "returns false when no pending after tool
    result applied"."""
    agent = agent_with(tool_call("dangerous", {"path": "/tmp"}, id="tc-approve"), tools=[dangerous])
    await agent.save_messages("clean up")
    assert agent.has_pending_interaction() is True
    with pytest.raises(TimeoutError):
        await agent.wait_until_stable(timeout_s=0.1)
    await agent.add_tool_approval("tc-approve", False)
    assert agent.has_pending_interaction() is False
    await agent.wait_until_stable(timeout_s=WAIT_S)


async def test_a_client_tool_call_waiting_is_pending() -> None:
    """think-session.test.ts:4931 "detects a pending CLIENT-tool interaction (the SPA can still replay the
    tool-result)"."""
    agent = agent_with()
    await agent.set_client_tools([ta.ClientToolSchema(name="client_action")])
    await agent.add_messages(waiting_call("tool-client_action", "tc-1", {"action": "test"}))
    assert agent.has_pending_interaction() is True


def waiting_call(part_type: str, tool_call_id: str, input: Any) -> list[ta.UIMessage]:
    """A user message and a reply holding one call that waits for its result."""
    part = {"type": part_type, "toolCallId": tool_call_id, "state": "input-available", "input": input}
    return [
        ta.user_message("Use a tool", id="user-1"),
        ta.UIMessage.model_validate({"id": "assistant-1", "role": "assistant", "parts": [part]}),
    ]


async def test_a_server_tool_orphan_does_not_hold_stability() -> None:
    """think-session.test.ts:4965 "does NOT block stability on a dead SERVER-tool input-available orphan"."""
    agent = agent_with()
    await agent.set_client_tools([ta.ClientToolSchema(name="client_action")])
    await agent.add_messages(waiting_call("tool-preview_tool", "tc-server-1", {"url": "https://example.com"}))
    assert agent.has_pending_interaction() is False
    await agent.wait_until_stable(timeout_s=1.0)
