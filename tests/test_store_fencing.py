"""Fencing two writers of one agent (an old actor still draining while its restart begins), for SQLite and
PostgreSQL: opening a store claims the next generation, and a superseded store's turn writes are refused."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import think_actors as ta
from think_actors.errors import StoreFencedError
from think_actors.messages import TextPart, UIMessage, user_message
from think_actors.store import EffectRecord, SubmissionRecord, TurnRecord
from think_actors.store.postgres import close_pools
from think_actors.testing import ScriptedModel, delay, step, text, tool_call

Opener = Callable[..., ta.Store]


@pytest.fixture(params=["sqlite", "postgres"])
def open_agent_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """``open_agent_store(agent="lead/a")``: a new store for that agent at one shared location."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else f"sqlite://{tmp_path}"
    yield lambda agent="lead/a": ta.open_store(url, agent)


@pytest.fixture(autouse=True)
async def _close_pools() -> Any:
    yield
    await close_pools()


def turn(request_id: str, **fields: Any) -> TurnRecord:
    return TurnRecord(request_id=request_id, trigger="chat", status="running", started_at=1.0, updated_at=1.0, **fields)


def effect(call: str) -> EffectRecord:
    return EffectRecord(
        key=f"lead/a/r1/{call}",
        request_id="r1",
        tool_call_id=call,
        tool_name="search",
        status="started",
        started_at=2.0,
    )


def reply(text_: str, id: str) -> UIMessage:
    return UIMessage(id=id, role="assistant", parts=(TextPart(text=text_),))


FENCED_WRITES: dict[str, Callable[[ta.Store], Awaitable[Any]]] = {
    "append_message": lambda s: s.append_message(user_message("late", id="late")),
    "append_message_as_root": lambda s: s.append_message(user_message("late", id="late"), parent_id=None),
    "upsert_message_new": lambda s: s.upsert_message(reply("late", id="late")),
    "upsert_message_existing": lambda s: s.upsert_message(reply("rewritten", id="a1")),
    "update_message": lambda s: s.update_message(reply("rewritten", id="a1")),
    "clear_messages": lambda s: s.clear_messages(),
    "set_kv": lambda s: s.set_kv("k", 2),
    "delete_kv": lambda s: s.set_kv("k", None),
    "put_turn": lambda s: s.put_turn(turn("r1", attempts=5)),
    "delete_turn": lambda s: s.delete_turn("r1"),
    "append_chunks": lambda s: s.append_chunks("r1", [{"type": "finish"}]),
    "start_effect": lambda s: s.start_effect(effect("c2")),
    "finish_effect": lambda s: s.finish_effect("lead/a/r1/c1", output="late"),
    "start_effect_with_chunks": lambda s: s.start_effect(effect("c2"), chunks=[{"type": "start-step"}]),
    "finish_effect_with_chunks": lambda s: s.finish_effect(
        "lead/a/r1/c1", output="late", chunks=[{"type": "tool-output-available", "toolCallId": "c1"}]
    ),
    "clear_turn_state": lambda s: s.clear_turn_state(),
    "begin_turn": lambda s: s.begin_turn(turn("r2"), [user_message("late", id="late")]),
    "end_turn": lambda s: s.end_turn("r1", reply("late reply", id="late")),
    "end_turn_without_reply": lambda s: s.end_turn("r1"),
}


async def snapshot(store: ta.Store) -> dict[str, Any]:
    return {
        "messages": [(m.id, m.text) for m in await store.list_messages()],
        "transcript": [m.id for m in await store.load_messages()],
        "kv": await store.get_kv("k"),
        "turns": await store.list_turns(),
        "chunks": await store.load_chunks("r1"),
        "effects": await store.list_effects("r1"),
    }


@pytest.mark.parametrize("write", FENCED_WRITES.values(), ids=FENCED_WRITES.keys())
async def test_the_old_generations_turn_writes_are_refused_and_change_nothing(
    open_agent_store: Opener, write: Callable[[ta.Store], Awaitable[Any]]
) -> None:
    old = open_agent_store()
    await old.append_message(user_message("hi", id="u1"))
    await old.append_message(reply("hello", id="a1"))
    await old.set_kv("k", 1)
    await old.put_turn(turn("r1"))
    await old.append_chunks("r1", [{"type": "start"}])
    await old.start_effect(effect("c1"))
    new = open_agent_store()
    before = await snapshot(new)  # the new store's first call claims generation 2
    assert (old.generation, new.generation) == (1, 2)  # type: ignore[attr-defined]

    with pytest.raises(StoreFencedError) as raised:
        await write(old)

    error = raised.value
    assert (error.agent, error.generation, error.owner_generation, error.retryable) == ("lead/a", 1, 2, False)
    assert "owned by another writer" in error.message and "Stop using this store" in error.message
    assert isinstance(error, ta.StoreError)
    assert await snapshot(new) == before
    # Reads of the old store still answer; the new owner writes on.
    assert await snapshot(old) == before
    await write(new)


async def test_the_new_generation_proceeds_and_a_third_open_fences_it_in_turn(open_agent_store: Opener) -> None:
    first, second = open_agent_store(), open_agent_store()
    await first.append_message(user_message("one", id="u1"))
    await second.append_message(reply("two", id="a1"))  # claims generation 2
    with pytest.raises(StoreFencedError):
        await first.append_message(user_message("three", id="u2"))
    await second.put_turn(turn("r1"))
    await second.append_chunks("r1", [{"type": "start"}])
    third = open_agent_store()
    assert [m.id for m in await third.load_messages()] == ["u1", "a1"]
    with pytest.raises(StoreFencedError) as raised:
        await second.append_chunks("r1", [{"type": "finish"}])
    assert (raised.value.generation, raised.value.owner_generation) == (2, 3)
    await third.append_chunks("r1", [{"type": "finish"}])
    assert await third.load_chunks("r1") == [{"type": "start"}, {"type": "finish"}]
    for store in (first, second, third):
        await store.close()


async def test_submissions_are_not_fenced(open_agent_store: Opener) -> None:
    old = open_agent_store()
    new = open_agent_store()
    await new.load_messages()
    record = SubmissionRecord(submission_id="s1", request_id="s1", status="pending", messages=[], created_at=1.0)
    # Any process may accept a submission: the id and key decide, and status changes are compare-and-set.
    assert (await old.insert_submission(record))[1] is True
    assert await old.update_submission("s1", expect_status=["pending"], status="running") is True
    assert (await new.get_submission("s1")) == dataclasses.replace(record, status="running", seq=1)


async def test_a_writer_fenced_mid_stream_lands_nothing_after_the_new_owner_opened(open_agent_store: Opener) -> None:
    old = open_agent_store()
    await old.put_turn(turn("r1"))
    written: list[int] = []
    going = asyncio.Event()

    async def keep_writing() -> None:
        for i in range(100_000):
            await old.append_chunks("r1", [{"type": "text-delta", "id": "t", "delta": str(i)}])
            if i % 2:
                await old.append_message(user_message(str(i), id=f"m{i}"))
            written.append(i)
            if i == 20:
                going.set()
            await asyncio.sleep(0)  # SQLite's calls never suspend: let the new owner in

    writer = asyncio.create_task(keep_writing())
    await going.wait()
    new = open_agent_store()
    seen_chunks = await new.load_chunks("r1")  # the claim, then the read
    seen_messages = [m.id for m in await new.list_messages()]
    with pytest.raises(StoreFencedError):
        await writer
    # Nothing the old writer did after the claim landed: the new owner's first view is still the whole log.
    assert await new.load_chunks("r1") == seen_chunks
    assert [m.id for m in await new.list_messages()] == seen_messages
    assert [c["delta"] for c in seen_chunks] == [str(i) for i in range(len(seen_chunks))]
    assert len(written) - 1 <= len(seen_chunks) <= len(written) + 1


async def test_fencing_is_per_agent(open_agent_store: Opener) -> None:
    a, b = open_agent_store("lead/a"), open_agent_store("lead/b")
    await a.append_message(user_message("a", id="u1"))
    await b.append_message(user_message("b", id="u1"))
    again_b = open_agent_store("lead/b")
    await again_b.load_messages()
    await a.append_message(reply("still mine", id="a1"))  # opening lead/b claimed nothing of lead/a
    with pytest.raises(StoreFencedError):
        await b.append_message(reply("superseded", id="a1"))
    assert [m.id for m in await a.load_messages()] == ["u1", "a1"]
    assert [m.id for m in await again_b.load_messages()] == ["u1"]


class Slow(ta.Think):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streaming = asyncio.Event()

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type == "text-delta":
            self.streaming.set()


async def test_an_agent_whose_store_was_taken_over_mid_turn_stops_and_the_new_one_carries_on(
    open_agent_store: Opener,
) -> None:
    location = open_agent_store("slow/one")
    old = Slow("one", model=ScriptedModel([step(text("partial "), delay(0.3), text("never stored"))]), store=location)
    turn_task = asyncio.create_task(old.save_messages("question"))
    await old.streaming.wait()
    # The restart begins while the old turn still streams.
    new = Slow(
        "one", model=ScriptedModel([text("recovered answer"), text("second")]), store=open_agent_store("slow/one")
    )
    # Its recovery of the interrupted turn starts with it, and may already have answered; the old writer's partial
    # reply is never there.
    assert [m.text for m in await new.load_messages()] in (["question"], ["question", "recovered answer"])
    with pytest.raises(StoreFencedError):
        await turn_task
    # The new owner found the interrupted turn and recovered it; the old writer's partial reply never landed.
    await new.wait_idle()
    assert [m.text for m in await new.store.load_messages()] == ["question", "recovered answer"]
    assert await new.store.list_turns() == []
    assert (await new.save_messages("again")).status == "completed"
    assert [m.text for m in await new.store.load_messages()] == ["question", "recovered answer", "again", "second"]
    await old.close()
    await new.close()


class Charging(ta.Think):
    """Records which of its hooks ran; its tool waits until the test lets it finish."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_tool = asyncio.Event()
        self.release = asyncio.Event()
        self.hooks: list[str] = []

    @ta.tool
    async def charge(self, amount: int) -> str:
        """Charge the card."""
        self.in_tool.set()
        await self.release.wait()
        return f"charged {amount}"

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self.hooks.append(f"after_tool_call {ctx.tool_name}")

    async def on_step_finish(self, result: ta.StepResult) -> None:
        self.hooks.append("on_step_finish")

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.hooks.append(f"on_chat_response {result.status}")

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        self.hooks.append("on_chat_error")
        return None


async def test_a_process_that_lost_its_lease_mid_tool_runs_no_more_hooks(
    open_agent_store: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    # A node froze while its agent ran a tool; the agent's restart elsewhere took it over (a newer store) and
    # finishes the turn. When the frozen process runs again, its turn stops at the next store write or hook:
    # neither after_tool_call nor on_chat_response (nor on_chat_error) runs there for a turn the new owner completes.
    old = Charging(
        "one",
        model=ScriptedModel([tool_call("charge", {"amount": 7}, id="c1"), text("done")]),
        store=open_agent_store("charging/one"),
    )
    turn_task = asyncio.create_task(old.save_messages("charge 7"))
    await old.in_tool.wait()
    newer = open_agent_store("charging/one")
    await newer.load_messages()  # the takeover: the newer store claims the agent
    with caplog.at_level(logging.INFO, logger="think_actors"):
        old.release.set()
        with pytest.raises(StoreFencedError):
            await turn_task
    assert old.hooks == []
    assert "ends without" in caplog.text and "a newer process owns the agent" in caplog.text
    await old.close()
    await newer.close()


async def test_a_superseded_process_starts_no_tool_and_no_step(open_agent_store: Opener) -> None:
    old = Charging(
        "two",
        model=ScriptedModel([tool_call("charge", {"amount": 7}, id="c1"), text("done")]),
        store=open_agent_store("charging/two"),
    )
    await old.load_messages()
    newer = open_agent_store("charging/two")
    await newer.load_messages()
    with pytest.raises(StoreFencedError):
        await old.save_messages("charge 7")  # its first write is refused: no hook, no tool ran
    assert old.hooks == [] and not old.in_tool.is_set()
    await old.close()
    await newer.close()
