"""Port of ``packages/think/src/e2e-tests/chat-recovery.test.ts``: a turn whose process dies mid-stream is
finished after the restart, also through restart churn; a failure after the input was stored is reported.

The reference SIGKILLs ``wrangler dev``; here the process "dies" exactly: the agent is frozen inside a hook, its
store is copied byte for byte and a second agent starts on the copy (``killed_at``). Real process kills of
agent actors are ``tests/ray/test_crash_recovery.py``'s. Left out (README.md): the helper sub-agent and the
agent-tool re-attach cases, whose process boundary is a child actor's.
"""

from __future__ import annotations

from typing import Any

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, step, text

from .conftest import (
    Freezer,
    Recorder,
    chat_request,
    killed_at,
    settle_recovery,
    skip_greeting,
    texts,
    until_done,
    wire_user,
)

SRC = "packages/think/src/e2e-tests/chat-recovery.test.ts"

# A slow story: a pause long enough for the chunk log's timed flush, then the chunk the process dies on.
STORY = step(text("Once upon "), delay(0.08), text("a time"), text(" there was"))


class Storyteller(Recorder):
    def __init__(self, *args: Any, freezer: Freezer | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.freezer = freezer or Freezer(None)
        self.recoveries: list[ta.ChatRecoveryContext] = []

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        await super().on_chunk(ctx)
        await self.freezer.point(f"chunk:{ctx.text}")

    async def on_chat_recovery(self, ctx: ta.ChatRecoveryContext) -> None:
        self.recoveries.append(ctx)


async def test_a_turn_killed_mid_stream_is_recovered_after_the_restart() -> None:
    """chat-recovery.test.ts:432 "should recover chat after process kill via persisted alarm": the recovery hook
    sees the partial text that streamed before the kill, and no turn record is left once it finished."""
    store = ta.MemoryStore()
    freezer = Freezer("chunk: there was")
    agent = Storyteller(model=ScriptedModel([STORY]), store=store, freezer=freezer)
    snapshot = await killed_at(lambda: agent.chat("Tell me a long story").collect(), freezer, store)
    assert len(await snapshot.list_turns()) == 1

    restarted = Storyteller(model=ScriptedModel([text(" a dragon.")]), store=snapshot)
    await restarted.load_messages()
    await settle_recovery(restarted)

    [ctx] = restarted.recoveries
    assert ctx.kind == "continue" and ctx.partial is not None and ctx.partial.text.startswith("Once upon ")
    assert texts(restarted)[0] == ("user", "Tell me a long story")
    assert texts(restarted)[-1] == ("assistant", " a dragon.")
    assert await restarted.store.list_turns() == []


async def test_a_turn_is_still_recovered_after_restart_churn() -> None:
    """chat-recovery.test.ts:513 "should still recover after repeated restart churn around an interrupted turn":
    the first restart dies again while its recovery streams; the second finishes the turn."""
    store = ta.MemoryStore()
    freezer = Freezer("chunk: there was")
    agent = Storyteller(model=ScriptedModel([STORY]), store=store, freezer=freezer)
    first = await killed_at(lambda: agent.chat("Tell me a long restart story").collect(), freezer, store)

    again = Freezer("chunk:more ")
    churned = Storyteller(model=ScriptedModel([step(text("more "), delay(3600))]), store=first, freezer=again)
    second = await killed_at(churned.load_messages, again, first)

    final = Storyteller(model=ScriptedModel([text("The end.")]), store=second)
    await final.load_messages()
    await settle_recovery(final)
    [first_ctx] = churned.recoveries
    assert first_ctx.partial is not None and first_ctx.partial.text.startswith("Once upon ")
    assert [ctx.attempt for ctx in final.recoveries] == [2]
    assert texts(final)[0] == ("user", "Tell me a long restart story")
    assert texts(final)[1][1].startswith("Once upon ")
    assert texts(final)[-1] == ("assistant", "The end.")
    assert await final.store.list_turns() == []


class FailsBeforeTurn(Recorder):
    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        await super().before_turn(ctx)
        raise RuntimeError("forced beforeTurn failure")


async def test_a_failure_after_the_input_is_stored_is_reported_on_the_wire_and_to_on_chat_error(
    gateway: Any,
) -> None:
    """chat-recovery.test.ts:544 "should expose the current post-persist chat request failure surface": the user
    message is stored, no reply is, the error frame carries the message, and ``on_chat_error`` saw it (the seed:
    every failed turn reaches ``on_chat_error``)."""
    client, agent_of = await gateway(FailsBeforeTurn, model=ScriptedModel())
    ws = await client.ws_connect("/agents/fails-before-turn/r1")
    await skip_greeting(ws)
    await ws.send_str(chat_request("req-1", wire_user("Persist this, then fail before the model turn", "u1")))
    frames = await until_done(ws, "req-1")
    [failed] = [f for f in frames if f["type"] == "cf_agent_use_chat_response" and f.get("error")]
    assert "forced beforeTurn failure" in failed["body"]
    agent = await agent_of("fails-before-turn", "r1")
    assert [m.role for m in agent.get_messages()] == ["user"]
    [(error, ctx)] = agent.seen("on_chat_error")
    assert (str(error), ctx.stage, ctx.messages_persisted) == ("forced beforeTurn failure", "turn", True)
    await ws.close()
