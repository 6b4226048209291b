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
from helpers import until
from ray_agents import EchoModel

import think_actors as ta
from think_actors import registry
from think_actors.runtime import _require_config
from think_actors.runtime.scheduler_actor import SCHEDULER_NAME, schedules_of
from think_actors.schedule import ClassDeclaration, open_schedule_store

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
    # runners=0: these tests follow the wake of an agent's own actor (burst runners: test_burst_runner.py).
    actor = await ta.start_scheduler(poll_s=0.2, runners=0)
    try:
        yield actor
    finally:
        ray.kill(actor, no_restart=True)  # detached: it would outlive the test
        # The next test's get-or-create would get the dying actor while its name is still taken.
        for _ in range(200):
            try:
                ray.get_actor(SCHEDULER_NAME, namespace="think_actors")
            except ValueError:
                break
            await asyncio.sleep(0.05)


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


class Chime(ta.Think):
    """A class task every 2 s, declared on the class and never registered by an agent's own start in these tests;
    hibernates after half a second without work."""

    model = EchoModel()
    idle_timeout_s = 0.5
    schedules = (ta.every("2 seconds", "chime", id="chime"),)


async def test_provisioned_agents_fire_their_class_schedule_without_ever_having_been_started(
    scheduler: Any, unique: str
) -> None:
    handles = [ta.provision(Chime, f"{unique}-{i}") for i in range(3)]
    for handle in handles:
        [task] = await schedules_of(handle).list()
        assert (task.task_id, task.source, task.prompt) == ("chime", "class", "chime")
        record = registry.lookup("think_actors", handle.path)
        assert record is not None and not record.resident
    again = ta.provision(Chime, f"{unique}-0")  # provisioning again keeps the row where it was
    assert [t.next_at for t in await schedules_of(again).list()] == [
        t.next_at for t in await schedules_of(handles[0]).list()
    ]

    async def each_chimed() -> bool:
        for handle in handles:
            record = registry.lookup("think_actors", handle.path)
            if record is None or not record.resident:
                return False
            woken = await ta.get(Chime, handle.path.split("/")[-1])
            if "echo: chime" not in [m.text for m in await woken.get_messages()]:
                return False
        return True

    try:
        await until(each_chimed, timeout_s=120, what="every provisioned agent to chime")
    finally:
        for handle in handles:
            await schedules_of(handle).cancel("chime")


class Quiet(ta.Think):
    """This deployment of the class declares no schedule; an earlier one declared a chime every 2 s."""

    model = EchoModel()
    idle_timeout_s = 0.5


async def test_a_class_row_the_latest_deployment_no_longer_declares_is_dropped_not_fired(
    scheduler: Any, unique: str
) -> None:
    config = _require_config()
    store = open_schedule_store(config.store_url, config.data_dir)
    path = f"quiet/{unique}"
    earlier = ClassDeclaration.of("Quiet", [ta.every("2 seconds", "chime", id="chime")])
    await store.sync_class_tasks(path, earlier.records(path, time.time()))  # the earlier deployment's row
    try:
        handle = ta.provision(Quiet, unique)  # this deployment: it records that Quiet declares nothing now
        assert await store.class_declaration("Quiet") == ClassDeclaration.of("Quiet", [])
        assert [t.task_id for t in await schedules_of(handle).list()] == ["chime"]  # still there, not yet due

        async def dropped() -> bool:
            return await schedules_of(handle).list() == []

        await until(dropped, timeout_s=30, what="the undeclared class row to be dropped when due")
        record = registry.lookup("think_actors", handle.path)
        assert record is not None and not record.resident  # nothing was delivered: the agent never started
        assert await store.list_fires(path) == []

        await schedules_of(handle).schedule(0.5, "ping", task_id="ping")  # a run-time task is never checked

        async def pinged() -> bool:
            record = registry.lookup("think_actors", handle.path)
            if record is None or not record.resident:
                return False
            woken = await ta.get(Quiet, unique)
            return "echo: ping" in [m.text for m in await woken.get_messages()]

        await until(pinged, timeout_s=90, what="the run-time task to wake the agent")
        woken = await ta.get(Quiet, unique)
        assert [m.text for m in await woken.get_messages()] == ["ping", "echo: ping"]
        assert [f.task.task_id for f in await store.list_fires(path)] == ["ping"]
    finally:
        await store.close()
