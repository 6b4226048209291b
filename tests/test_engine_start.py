"""Starting an agent: a call that arrives while another call is starting it waits for the whole start-up.

Recovery's set-up is part of the start: a caller let in before it finished would not find the turn being
recovered (``attach`` right after a restart failed with "no recovered turn"). A crash is simulated as in
test_recovery.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from test_reattach import crash_mid_text, delivered_text, reply_text
from test_recovery import WAIT_S, Crashable, Effects

import think_actors as ta
from think_actors._turn.journal import units
from think_actors.testing import ScriptedModel, text


class HeldListing:
    """Holds ``list_turns`` (the start-up's look for interrupted turns) until released, as slow storage would."""

    def __init__(self, store: ta.MemoryStore) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        original = store.list_turns

        async def list_turns(**kwargs: Any) -> Any:
            self.entered.set()
            await self.release.wait()
            return await original(**kwargs)

        store.list_turns = list_turns  # type: ignore[method-assign]


async def test_attach_during_the_start_up_waits_for_the_recovered_turn() -> None:
    effects = Effects()
    store, request_id, received = await crash_mid_text("delta:150", effects)
    held = HeldListing(store)
    agent = Crashable(model=ScriptedModel([text(" and the rest.")]), store=store, effects=effects)

    starting = asyncio.create_task(agent.load_messages())
    await asyncio.wait_for(held.entered.wait(), WAIT_S)  # the start-up is looking for interrupted turns
    position = sum(units(c) for c in received)

    async def follow() -> list[Any]:
        return [c async for c in agent.attach(request_id, position=position)]

    attached = asyncio.create_task(follow())
    await asyncio.sleep(0.05)
    assert not attached.done()  # it waits for the start-up, rather than finding no recovered turn
    held.release.set()
    await asyncio.wait_for(starting, WAIT_S)
    rest = await asyncio.wait_for(attached, WAIT_S)
    assert delivered_text(received) + delivered_text(rest) == reply_text(agent) == "x" * 149 + " and the rest."


async def test_calls_made_by_the_start_up_itself_are_not_held() -> None:
    # configure_session runs inside the start-up: what it calls on the agent must not wait for the start-up.
    class Reads(ta.Think):
        async def configure_session(self, session: ta.Session) -> ta.Session:
            self.seen = await self.load_messages()
            return session

    agent = Reads(model=ScriptedModel(), store=ta.MemoryStore())
    assert await asyncio.wait_for(agent.load_messages(), WAIT_S) == []
