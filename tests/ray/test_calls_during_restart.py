"""Calls made while Ray restarts an agent's actor, on a machine loaded with two CPU burners.

A read (``get_messages``, ``inspect_submission``, ``list_submissions``, ...), a submission sent with its key and
an ``attach`` with a position (what ``stream.resume()`` sends) wait for the restarted actor (``restart_wait_s``)
instead of failing; a call that may have run before the crash (``save_messages``) fails at once and says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from cpu_load import burning_cpus

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, step, text


class Slow(ta.Think):
    """Answers every request slowly (a restarted actor's model starts its script again)."""

    model = ScriptedModel([step(text("first part "), delay(1.5), text("of a long answer"))] * 6)


@pytest.fixture
def loaded_machine() -> Iterator[list[int]]:
    with burning_cpus(2) as pids:
        yield pids


async def test_reads_and_keyed_submissions_wait_for_the_restarted_actor(
    ray_runtime: Any, unique: str, loaded_machine: list[int]
) -> None:
    agent = await ta.spawn(Slow, unique)
    await agent.submit_messages("first", submission_id="s1")
    await agent.wait_for_submission("s1", timeout_s=60)
    before = [m.text for m in await agent.get_messages()]

    await agent.kill(restart=True)  # Ray restarts the actor; these calls come while it does
    messages, submission, listed, again = await asyncio.gather(
        agent.get_messages(),
        agent.inspect_submission("s1"),
        agent.list_submissions(),
        agent.submit_messages("first", submission_id="s1"),  # the same submission: safe to send twice
    )
    assert [m.text for m in messages] == before
    assert submission is not None and submission.status == "completed"
    assert [s.submission_id for s in listed] == ["s1"]
    assert again.submission_id == "s1" and again.status == "completed"


async def test_a_resumed_stream_waits_for_the_restart_and_a_call_that_may_have_run_says_so(
    ray_runtime: Any, unique: str, loaded_machine: list[int]
) -> None:
    agent = await ta.spawn(Slow, unique)
    stream = agent.chat("tell me")
    seen: list[Any] = []
    with pytest.raises(ta.AgentUnavailableError, match=r"stream\.resume"):
        async for chunk in stream:
            seen.append(chunk)
            if getattr(chunk, "delta", None) == "first part ":
                await agent.kill(restart=True)  # mid-turn
    # At once, while the actor restarts: the resumed stream waits for it, then follows the recovered turn.
    rest = await asyncio.wait_for(stream.resume().collect(), 120)
    assert rest and rest[-1].type == "finish"

    turn = asyncio.ensure_future(agent.save_messages("and now?"))
    await asyncio.sleep(0.3)
    await agent.kill(restart=True)  # the turn was running: it may or may not have been answered
    with pytest.raises(ta.AgentUnavailableError, match="may or may not have run") as caught:
        await turn
    assert caught.value.retryable
    assert "and now?" in [m.text for m in await agent.get_messages()]  # a read after it waits, finds the input
