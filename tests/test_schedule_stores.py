"""The schedule stores, memory, SQLite and a real PostgreSQL server alike: tasks, class sync, the unique claim of an
occurrence, and two schedulers racing on one occurrence (each with its own connection, as on two nodes)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import think_actors as ta
from think_actors.schedule import (
    AgentSchedules,
    ClassDeclaration,
    FireRecord,
    ManualClock,
    MemoryScheduleStore,
    Scheduler,
    ScheduleStore,
    open_schedule_store,
)
from think_actors.schedule.sqlite import SQLiteScheduleStore
from think_actors.store.postgres import close_pools

START = 1_796_000_000.0

Opener = Callable[[], ScheduleStore]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def opener(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Opener]:
    """Opens a store on one shared place; every call is a new connection (a new process) but memory's."""
    if request.param == "memory":
        shared = MemoryScheduleStore()
        yield lambda: shared
        return
    if request.param == "sqlite":
        yield lambda: SQLiteScheduleStore(os.path.join(tmp_path, "_schedules.db"))
        return
    url = request.getfixturevalue("postgres_url")
    yield lambda: open_schedule_store(url, None)
    await close_pools()


async def test_tasks_are_kept_listed_replaced_and_deleted(opener: Opener) -> None:
    store, clock = opener(), ManualClock(START)
    a = AgentSchedules(store, "inbox/a", "Inbox", clock=clock)
    b = AgentSchedules(store, "inbox/b", "Inbox", clock=clock)
    await a.schedule("every 2 hours", "two", task_id="t2", metadata={"k": [1, 2]})
    await a.schedule(60, "soon", task_id="t1")
    await b.schedule(30, "other agent", task_id="t1")
    assert [(t.task_id, t.next_at) for t in await a.list()] == [("t1", START + 60), ("t2", START + 7200)]
    assert (await a.list())[1].metadata == {"k": [1, 2]}
    await a.schedule(90, "bounded", task_id="t3", limits=ta.RunLimits(max_requests=3, timeout_s=60))
    assert [t.limits for t in await a.list() if t.task_id == "t3"] == [{"max_requests": 3, "timeout_s": 60.0}]
    assert await a.cancel("t3")
    await a.schedule(10, "replaced", task_id="t2")
    assert [(t.task_id, t.prompt) for t in await a.list()] == [("t2", "replaced"), ("t1", "soon")]
    assert await a.cancel("t2") and not await a.cancel("t2")
    assert [t.task_id for t in await a.list()] == ["t1"] and [t.prompt for t in await b.list()] == ["other agent"]
    await store.close()


async def test_class_sync_keeps_unchanged_tasks_and_removes_undeclared_ones(opener: Opener) -> None:
    store, clock = opener(), ManualClock(START)
    agent = AgentSchedules(store, "inbox/a", "Inbox", clock=clock)
    await agent.schedule(60, "run-time task", task_id="mine")
    hourly, daily = ta.every("1 hour", "hourly", id="h"), ta.every("day at 09:00", "daily", id="d")
    await agent.sync_class([hourly, daily])
    clock.advance(1800)
    await agent.sync_class([hourly, ta.every("day at 10:00", "daily", id="d")])  # a restart; d changed
    tasks = {t.task_id: t for t in await agent.list()}
    assert set(tasks) == {"mine", "h", "d"}
    assert tasks["h"].next_at == START + 3600  # unchanged: its place kept
    assert tasks["d"].schedule == "every day at 10:00 in UTC"
    await agent.sync_class([])
    assert [t.task_id for t in await agent.list()] == ["mine"]  # run-time tasks are not the class's
    with pytest.raises(ta.ConfigurationError, match="declares one task twice"):
        await agent.sync_class([hourly, ta.every("2 hours", "x", id="h")])
    await store.close()


async def test_two_schedulers_racing_on_one_occurrence_deliver_it_once(opener: Opener) -> None:
    clock = ManualClock(START)
    first, second = opener(), opener()
    await AgentSchedules(first, "inbox/a", "Inbox", clock=clock).schedule("every 1 minute", "tick", task_id="m")
    delivered: list[tuple[str, str]] = []

    def deliver_as(name: str) -> Any:
        async def deliver(fire: FireRecord) -> None:
            await asyncio.sleep(0)
            delivered.append((name, fire.key))

        return deliver

    schedulers = [
        Scheduler(first, deliver_as("one"), clock=clock, owner="one"),
        Scheduler(second, deliver_as("two"), clock=clock, owner="two"),
    ]
    for _ in range(5):
        clock.advance(60)
        await asyncio.gather(*(s.tick() for s in schedulers))
    assert sorted(key for _, key in delivered) == [f"m@2026-11-30T{h}.000Z" for h in _minutes(5)]
    fires = await first.list_fires("inbox/a")
    assert [f.status for f in fires] == ["delivered"] * 5
    assert {f.owner for f in fires} == {name for name, _ in delivered}
    await first.close()
    await second.close()


def _minutes(count: int) -> list[str]:
    import datetime as dt

    return [dt.datetime.fromtimestamp(START + 60 * (i + 1), dt.UTC).strftime("%H:%M:%S") for i in range(count)]


async def test_a_claim_whose_scheduler_died_is_taken_over_when_it_runs_out(opener: Opener) -> None:
    clock = ManualClock(START)
    store = opener()
    await AgentSchedules(store, "inbox/a", "Inbox", clock=clock).schedule(5, "once", task_id="o")
    dead = Scheduler(store, _never_returns, clock=clock, owner="dead", claim_s=30)
    clock.advance(5)
    [claimed] = await dead.claim_due()  # claimed, then its process dies before delivering
    seen: list[FireRecord] = []

    async def deliver(fire: FireRecord) -> None:
        seen.append(fire)

    alive = Scheduler(opener(), deliver, clock=clock, owner="alive", claim_s=30)
    assert await alive.tick() == []  # the claim still holds
    clock.advance(30)
    [taken] = await alive.tick()
    assert (taken.key, taken.attempts, taken.owner) == (claimed.key, 2, "alive") and seen == [taken]
    # The dead scheduler's late outcome cannot overwrite the new owner's.
    await store.finish_fire(claimed, "failed", error="late")
    [fire] = await store.list_fires("inbox/a")
    assert (fire.status, fire.owner, fire.error) == ("delivered", "alive", None)
    await store.close()


async def _never_returns(fire: FireRecord) -> None:
    raise AssertionError("never delivered")


async def test_cancelling_a_task_cancels_its_waiting_retry(opener: Opener) -> None:
    clock = ManualClock(START)
    store = opener()
    agent = AgentSchedules(store, "inbox/a", "Inbox", clock=clock)
    await agent.schedule("every 1 hour", "x", task_id="h")

    async def fail(fire: FireRecord) -> None:
        raise OSError("agent unreachable")

    scheduler = Scheduler(store, fail, clock=clock)
    clock.advance(3600)
    await scheduler.tick()
    assert [f.status for f in await store.list_fires("inbox/a")] == ["retry"]
    assert await agent.cancel("h")
    assert [f.status for f in await store.list_fires("inbox/a")] == ["cancelled"]
    assert await store.next_wake_at() is None
    await store.close()


def test_the_store_of_a_url_or_a_data_dir(tmp_path: Any) -> None:
    assert isinstance(open_schedule_store(None, str(tmp_path)), SQLiteScheduleStore)
    by_url = open_schedule_store(f"sqlite://{tmp_path}/agents", None)
    assert isinstance(by_url, SQLiteScheduleStore) and by_url.path == f"{tmp_path}/agents/_schedules.db"
    assert type(open_schedule_store("postgresql://u@db.example/agents", None)).__name__ == "PostgresScheduleStore"
    with pytest.raises(ta.ConfigurationError, match="unsupported store URL"):
        open_schedule_store("redis://x", None)


async def test_the_latest_class_declaration_is_kept_per_class(opener: Opener) -> None:
    store = opener()
    assert await store.class_declaration("Inbox") is None
    hourly = ta.every("1 hour", "hourly", id="h", metadata={"k": [1]}, retry=ta.RetryPolicy(max_attempts=2))
    first = ClassDeclaration.of("Inbox", [hourly, ta.cron("0 9 * * *", handler="report")], "Europe/Berlin")
    await store.declare_class(first)
    await store.declare_class(ClassDeclaration.of("Other", []))
    assert await opener().class_declaration("Inbox") == first  # another connection reads it
    await store.declare_class(ClassDeclaration.of("Inbox", []))  # a deployment that dropped them all
    assert await opener().class_declaration("Inbox") == ClassDeclaration.of("Inbox", [])
    assert await store.class_declaration("Other") == ClassDeclaration.of("Other", [])
    await store.close()
