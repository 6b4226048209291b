"""Scheduled tasks on Ray, in real time: the cluster's one scheduler actor fires class and run-time tasks of agent
actors, runs a handler in the agent's process, and wakes a hibernated agent for its prompt. The agent classes
live at module level so that Ray's workers import them by this module's name."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import ray
from ray_agents import EchoModel

import think_actors as ta
from think_actors import registry
from think_actors.runtime.scheduler_actor import SCHEDULER_NAME, schedules_of

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(240)]


class Ticking(ta.Think):
    """A class task every 2 s, and a handler that leaves a note in the history."""

    model = EchoModel()
    schedules = (ta.every("2 seconds", "tick", id="tick"),)

    async def note(self, ctx: ta.ScheduledTaskContext) -> None:
        await self.add_messages(f"noted {ctx.occurrence_key} attempt {ctx.attempt} {ctx.metadata}")


class Dozy(ta.Think):
    """Hibernates after half a second without work."""

    model = EchoModel()
    idle_timeout_s = 0.5


@pytest.fixture
async def scheduler() -> AsyncIterator[Any]:
    actor = await ta.start_scheduler(poll_s=0.2)
    try:
        yield actor
    finally:
        ray.kill(actor, no_restart=True)  # detached: it would outlive the test


async def until(check: Any, timeout_s: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what or check}")


async def test_class_and_run_time_tasks_fire_in_real_time_through_the_one_scheduler(
    scheduler: Any, unique: str
) -> None:
    agent = await ta.spawn(Ticking, unique)
    assert [t.task_id for t in await agent.list_schedules()] == ["tick"]
    once = await agent.schedule(1.0, handler="note", metadata={"via": "handle"}, task_id="note")
    assert once.kind == "once" and once.handler == "note"
    again = await ta.start_scheduler(poll_s=0.2)  # get-or-create: the same actor
    assert (await again.status.remote())["pid"] == (await scheduler.status.remote())["pid"]

    async def two_ticks_and_the_note() -> bool:
        texts = [m.text for m in await agent.get_messages()]
        return texts.count("echo: tick") >= 2 and any(t.startswith("noted note@") for t in texts)

    await until(two_ticks_and_the_note, what="two ticks and the handler's note")
    texts = [m.text for m in await agent.get_messages()]
    [note] = [t for t in texts if t.startswith("noted")]
    assert note.endswith("attempt 1 {'via': 'handle'}")
    submissions = [s for s in await agent.list_submissions() if s.idempotency_key]
    keys = [s.idempotency_key or "" for s in submissions]
    assert len(keys) == len(set(keys)) >= 2 and all(k.startswith("schedule:tick@") for k in keys)
    assert [t.task_id for t in await agent.list_schedules()] == ["tick"]  # the one-shot is gone
    assert await agent.cancel_schedule("tick")
    assert await agent.list_schedules() == []


async def test_a_hibernated_agent_is_woken_by_its_scheduled_prompt(scheduler: Any, unique: str) -> None:
    agent = await ta.spawn(Dozy, unique)
    await agent.save_messages("before the nap")
    first_pid = (await agent.info())["pid"]
    # Scheduled from the driver without waking the agent; it fires once the agent has hibernated.
    task = await schedules_of(agent).schedule(6.0, "wake up", task_id="alarm")
    assert task.next_at is not None

    async def hibernated() -> bool:
        record = registry.lookup("think_actors", agent.path)
        return record is not None and not record.resident

    await until(hibernated, timeout_s=30, what="the agent to hibernate")
    assert time.time() < task.next_at, "the agent hibernated too late for this test to mean anything"

    async def woken_and_answered() -> bool:
        record = registry.lookup("think_actors", agent.path)
        if record is None or not record.resident:
            return False
        # A fresh handle: the old one points at the actor that hibernated, and another caller (the scheduler)
        # woke the agent since, which that handle does not follow (the registry says resident).
        woken = await ta.get(Dozy, unique)
        return "echo: wake up" in [m.text for m in await woken.get_messages()]

    await until(woken_and_answered, timeout_s=90, what="the scheduled prompt to wake the agent")
    woken = await ta.get(Dozy, unique)
    assert (await woken.info())["pid"] != first_pid
    assert [m.text for m in await woken.get_messages()] == [
        "before the nap",
        "echo: before the nap",
        "wake up",
        "echo: wake up",
    ]
    status = await scheduler.status.remote()
    assert status["running"] and status["delivered"] >= 1
    assert ray.get_actor(SCHEDULER_NAME, namespace="think_actors") is not None
