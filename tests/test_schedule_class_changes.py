"""Class schedules that the class no longer declares (a new deployment dropped or changed them): when such a row
comes due, the scheduler checks it against the class's latest recorded declaration and, instead of firing it,
makes the agent's class rows the declaration's. Run-time tasks are never checked; rows with no declaration
recorded (written before declarations were) fire as before."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage
from think_actors.runtime import RuntimeConfig, class_schedules
from think_actors.schedule import ClassDeclaration, MemoryScheduleStore, TaskRecord, open_schedule_store
from think_actors.schedule.sqlite import SQLiteScheduleStore
from think_actors.store.postgres import close_pools

BERLIN = ZoneInfo("Europe/Berlin")
START = dt.datetime(2026, 12, 7, 8, 0, tzinfo=BERLIN).timestamp()  # a Monday


class Echo:
    model_id = "echo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        content = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        yield TextDelta(f"echo: {content}")
        yield FinishEvent("stop", Usage())


def deployment(schedules: tuple[ta.ScheduledTask, ...]) -> type[ta.Think]:
    """The class ``Mailbox`` as one deployment defines it (each deployment is a new class of the same name)."""
    return type("Mailbox", (ta.Think,), {"model": Echo(), "schedules": schedules, "__module__": __name__})


HOURLY = ta.every("1 hour", "check the mail", id="mail")


async def fired_prompts(scheduler: ta.LocalScheduler, agent: ta.Think) -> list[str]:
    """The prompts of ``agent`` that one pass fired, once their turns are done."""
    fires = [f for f in await scheduler.tick() if f.agent_path == agent.path]
    for submission in await agent.list_submissions():
        await agent.wait_for_submission(submission.submission_id, timeout_s=10)
    return sorted(f.task.prompt or "" for f in fires)


async def test_a_row_the_class_dropped_is_removed_when_due_and_run_time_tasks_still_fire() -> None:
    clock = ta.ManualClock(START)
    scheduler = ta.LocalScheduler(clock=clock)
    old = deployment((HOURLY,))("a", store=ta.MemoryStore())
    await scheduler.attach(old)
    await old.schedule("every 1 hour", "water the plants", task_id="plants")

    # The next deployment declares no schedule; registering any agent of it records that, and "a" never restarts.
    await scheduler.attach(deployment(())("b", store=ta.MemoryStore()))
    clock.advance(3600)
    assert await fired_prompts(scheduler, old) == ["water the plants"]
    assert [t.task_id for t in await old.list_schedules()] == ["plants"]
    assert [m.text for m in old.get_messages()] == ["water the plants", "echo: water the plants"]
    clock.advance(3600)
    assert await fired_prompts(scheduler, old) == ["water the plants"]


async def test_a_changed_declaration_replaces_the_row_instead_of_firing_the_old_one() -> None:
    clock = ta.ManualClock(START)
    scheduler = ta.LocalScheduler(clock=clock)
    old = deployment((HOURLY,))("a", store=ta.MemoryStore())
    await scheduler.attach(old)
    clock.advance(1800)
    new_mail = ta.every("2 hours", "check the mail twice as rarely", id="mail")
    await scheduler.attach(deployment((new_mail,))("b", store=ta.MemoryStore()))

    clock.advance(1800)  # the old hourly occurrence of "a" is due
    assert await fired_prompts(scheduler, old) == []
    [task] = await old.list_schedules()
    assert (task.schedule, task.prompt, task.next_at) == ("every 2 hours", new_mail.prompt, START + 3600 + 7200)
    clock.advance(7200)
    assert await fired_prompts(scheduler, old) == [new_mail.prompt]


async def test_rows_of_a_class_with_no_recorded_declaration_fire_as_before() -> None:
    clock = ta.ManualClock(START)
    store = MemoryScheduleStore()
    scheduler = ta.LocalScheduler(store, clock=clock)
    agent = deployment((HOURLY,))("a", store=ta.MemoryStore())
    await scheduler.attach(agent)
    store._classes.clear()  # rows written before declarations were recorded
    clock.advance(3600)
    assert await fired_prompts(scheduler, agent) == ["check the mail"]


async def test_a_declaration_that_cannot_be_read_leaves_its_rows_firing(tmp_path: Any) -> None:
    clock = ta.ManualClock(START)
    store = SQLiteScheduleStore(str(tmp_path / "_schedules.db"))
    scheduler = ta.LocalScheduler(store, clock=clock)
    agent = deployment((HOURLY,))("a", store=ta.MemoryStore())
    await scheduler.attach(agent)
    for damaged in ('{"tasks": []}', '{"default_timezone": "UTC", "tasks": [{"schedule": "every fortnight"}]}'):
        with store._write() as conn:  # a damaged row, and one of a version that spoke another schedule language
            conn.execute("UPDATE schedule_classes SET body = ? WHERE agent_class = 'Mailbox'", (damaged,))
        clock.advance(3600)
        assert await fired_prompts(scheduler, agent) == ["check the mail"]
    await store.close()


async def test_a_class_declaration_round_trips_and_matches_only_its_own_rows() -> None:
    declaration = ClassDeclaration.of(
        "Mailbox",
        [
            HOURLY,
            ta.cron("30 9 * * mon-fri", handler="standup", metadata={"k": 1}, retry=ta.RetryPolicy(max_attempts=5)),
        ],
        "Europe/Berlin",
    )
    again = ClassDeclaration.from_body("Mailbox", declaration.body())
    assert again == declaration
    declares = again.matcher()
    rows = declaration.records("mailbox/a", START)
    assert [declares(r) for r in rows] == [True, True]
    in_utc = ClassDeclaration.of("Mailbox", declaration.tasks).records("mailbox/a", START)
    assert [declares(r) for r in in_utc] == [False, False]  # the class's zone is part of its declaration
    assert not declares(replace(rows[0], prompt="another prompt"))
    with pytest.raises(ta.ConfigurationError, match="declares one task twice"):
        ClassDeclaration.of("Mailbox", [HOURLY, ta.every("2 hours", "x", id="mail")])
    with pytest.raises(ta.ConfigurationError, match=r"use ta\.every"):
        ClassDeclaration.of("Mailbox", ["every hour"])


class Nightly(ta.Think):
    schedules = (ta.every("day at 03:00", "nightly report", id="nightly"), ta.every("1 hour", "tick", id="tick"))


def test_the_driver_registers_a_provisioned_agents_class_rows_as_the_agents_own_start_would(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``ta.provision`` writes (runtime/class_schedules.py), without Ray: the rows of each agent, built once
    per declaration and rebuilt when a wall-clock occurrence passed, equal a fresh registration's."""
    now = [START]
    monkeypatch.setattr(class_schedules.time, "time", lambda: now[0])
    config = RuntimeConfig(data_dir=str(tmp_path))

    def register(name: str) -> dict[str, TaskRecord]:
        class_schedules.register_agent(Nightly, f"nightly/{name}", {}, config)
        store = SQLiteScheduleStore(str(tmp_path / "_schedules.db"))
        return {t.task_id: t for t in asyncio.run(store.list_tasks(f"nightly/{name}"))}

    def fresh(name: str) -> dict[str, TaskRecord]:
        declaration = ClassDeclaration.of("Nightly", Nightly.schedules)
        return {t.task_id: t for t in declaration.records(f"nightly/{name}", now[0])}

    a = register("a")
    assert a == fresh("a")
    now[0] = START + 10
    assert register("b") == fresh("b")
    assert register("a") == a  # registered again: unchanged
    now[0] = dt.datetime(2026, 12, 8, 3, 0, 1, tzinfo=dt.UTC).timestamp()  # the nightly occurrence passed
    c = register("c")
    assert c == fresh("c") and c["nightly"].next_at == dt.datetime(2026, 12, 9, 3, 0, tzinfo=dt.UTC).timestamp()
    store = SQLiteScheduleStore(str(tmp_path / "_schedules.db"))
    assert asyncio.run(store.class_declaration("Nightly")) == ClassDeclaration.of("Nightly", Nightly.schedules)


def test_shutdown_closes_the_drivers_schedule_writer_and_the_next_registration_opens_another(tmp_path: Any) -> None:
    config = RuntimeConfig(data_dir=str(tmp_path))
    class_schedules.register_agent(Nightly, "nightly/a", {}, config)
    writer = class_schedules._registrar
    assert writer is not None and writer._thread.is_alive()
    ta.shutdown()
    assert class_schedules._registrar is None and not writer._thread.is_alive() and writer._loop.is_closed()
    class_schedules.register_agent(Nightly, "nightly/b", {}, config)
    assert class_schedules._registrar is not None and class_schedules._registrar is not writer
    class_schedules.close()


async def test_provisioning_registers_class_rows_in_postgres_and_shutdown_closes_that_pool(postgres_url: str) -> None:
    config = RuntimeConfig(store_url=postgres_url)
    await asyncio.to_thread(class_schedules.register_agent, Nightly, "nightly/a", {}, config)
    store = open_schedule_store(postgres_url, None)
    try:
        assert sorted(t.task_id for t in await store.list_tasks("nightly/a")) == ["nightly", "tick"]
        assert await store.class_declaration("Nightly") == ClassDeclaration.of("Nightly", Nightly.schedules)
    finally:
        await close_pools()
    writer = class_schedules._registrar
    assert writer is not None
    await asyncio.to_thread(ta.shutdown)  # closes the writer's pool on its own loop, then the loop
    assert writer._loop.is_closed()
