"""Scheduled tasks of in-process agents on a clock the test moves: class and run-time tasks, prompts that become
idempotent submissions, handler tasks with their facts and retries, no backfill, cancel, list, DST."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage
from think_actors.schedule import SystemClock, deliver_to
from think_actors.testing import ScriptedModel, text, tool_call

BERLIN = ZoneInfo("Europe/Berlin")
START = dt.datetime(2026, 12, 7, 8, 0, tzinfo=BERLIN).timestamp()  # a Monday


class Echo:
    """Answers ``echo: <last user text>``."""

    model_id = "echo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        content = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content)
        yield TextDelta(f"echo: {content}")
        yield FinishEvent("stop", Usage())


class Inbox(ta.Think):
    model = Echo()
    default_timezone = "Europe/Berlin"
    schedules = (
        ta.every("1 hour", "check the inbox", id="inbox", metadata={"folder": "INBOX"}),
        ta.cron("30 9 * * mon-fri", handler="standup", id="standup"),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ran: list[ta.ScheduledTaskContext] = []
        self.failures_left = 0

    async def standup(self, ctx: ta.ScheduledTaskContext) -> None:
        self.ran.append(ctx)
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError(f"standup failed ({self.failures_left} more)")


async def attached(clock: ta.ManualClock, name: str = "a") -> tuple[ta.LocalScheduler, Inbox]:
    scheduler = ta.LocalScheduler(clock=clock)
    agent = Inbox(name, store=ta.MemoryStore())
    await scheduler.attach(agent)
    return scheduler, agent


def texts(agent: ta.Think) -> list[str]:
    return [m.text for m in agent.get_messages()]


async def test_class_schedules_are_listed_with_their_next_occurrence() -> None:
    scheduler, agent = await attached(ta.ManualClock(START))
    listing = {t.task_id: t for t in await agent.list_schedules()}
    assert set(listing) == {"inbox", "standup"}
    assert listing["inbox"].next_at == START + 3600 and listing["inbox"].source == "class"
    assert listing["inbox"].metadata == {"folder": "INBOX"} and listing["inbox"].prompt == "check the inbox"
    assert listing["standup"].next_at == dt.datetime(2026, 12, 7, 9, 30, tzinfo=BERLIN).timestamp()
    assert (
        listing["standup"].schedule == "30 9 * * mon-fri in Europe/Berlin" and listing["standup"].handler == "standup"
    )
    # Attaching again (a restart) keeps each unchanged task where it was.
    scheduler.clock.advance(600)  # type: ignore[attr-defined]
    await scheduler.attach(agent)
    assert {t.task_id: t.next_at for t in await agent.list_schedules()} == {t: i.next_at for t, i in listing.items()}


async def test_a_due_prompt_becomes_a_submission_with_the_occurrence_key_and_facts() -> None:
    clock = ta.ManualClock(START)
    scheduler, agent = await attached(clock)
    assert await scheduler.tick() == []  # nothing due yet
    clock.advance(3600)
    [fire] = await scheduler.tick()
    assert fire.key == "inbox@2026-12-07T08:00:00.000Z" and fire.scheduled_for == START + 3600
    [submission] = await agent.list_submissions()
    assert submission.idempotency_key == "schedule:inbox@2026-12-07T08:00:00.000Z"
    assert submission.metadata is not None
    facts = submission.metadata["schedule"]
    assert facts["task_id"] == "inbox" and facts["schedule_kind"] == "interval"
    assert facts["metadata"] == {"folder": "INBOX"} and facts["scheduled_for"] == START + 3600
    await agent.wait_for_submission(submission.submission_id, timeout_s=10)
    assert texts(agent) == ["check the inbox", "echo: check the inbox"]
    # The same fire delivered again (a scheduler that died before it recorded the delivery): accepted once.
    await deliver_to(agent, fire)
    assert len(await agent.list_submissions()) == 1
    assert [t.next_at for t in await agent.list_schedules() if t.task_id == "inbox"] == [START + 7200]


async def test_missed_occurrences_are_not_backfilled_the_latest_runs_once() -> None:
    clock = ta.ManualClock(START)
    scheduler, agent = await attached(clock)
    await agent.cancel_schedule("standup")
    clock.advance(5 * 3600 + 120)  # five hourly occurrences passed while nothing ran
    [fire] = await scheduler.tick()
    assert fire.scheduled_for == START + 5 * 3600
    assert await scheduler.tick() == []
    [task] = await agent.list_schedules()
    assert task.next_at == START + 6 * 3600
    [submission] = await agent.list_submissions()
    await agent.wait_for_submission(submission.submission_id, timeout_s=10)
    assert texts(agent) == ["check the inbox", "echo: check the inbox"]


async def test_a_handler_gets_the_occurrence_facts_and_runs_once_to_the_end() -> None:
    clock = ta.ManualClock(START)
    scheduler, agent = await attached(clock)
    await agent.cancel_schedule("inbox")
    clock.set(dt.datetime(2026, 12, 7, 9, 30, 5, tzinfo=BERLIN).timestamp())
    [fire] = await scheduler.tick()
    [ctx] = agent.ran
    assert ctx.task_id == "standup" and ctx.occurrence_key == "standup@2026-12-07T08:30:00.000Z"
    assert ctx.idempotency_key == "schedule:standup@2026-12-07T08:30:00.000Z" and ctx.attempt == 1
    assert ctx.scheduled_for_date == dt.datetime(2026, 12, 7, 9, 30, tzinfo=BERLIN)
    assert ctx.scheduled_for_date.tzinfo == BERLIN and ctx.timezone == "Europe/Berlin"
    assert (ctx.schedule, ctx.schedule_kind, ctx.metadata) == ("30 9 * * mon-fri in Europe/Berlin", "cron", {})
    assert [f.status for f in await scheduler.store.list_fires(agent.path)] == ["delivered"]
    # Delivered again after it finished: the agent remembers the occurrence and does not run it twice.
    assert await agent.run_scheduled_task("standup", fire.facts()) is False
    assert len(agent.ran) == 1


async def test_a_failing_handler_is_retried_by_its_policy_then_marked_failed() -> None:
    clock = ta.ManualClock(START)
    scheduler, agent = await attached(clock)
    await agent.cancel_schedule("inbox")
    await agent.cancel_schedule("standup")
    retry = ta.RetryPolicy(max_attempts=3, base_delay_s=10, max_delay_s=15)
    await agent.schedule(60, handler="standup", task_id="once", retry=retry, metadata={"n": 1})
    agent.failures_left = 5
    clock.advance(60)
    await scheduler.tick()
    [fire] = await scheduler.store.list_fires(agent.path)
    assert (fire.status, fire.attempts, fire.wake_at) == ("retry", 1, START + 70)
    assert fire.error == "RuntimeError: standup failed (4 more)"
    clock.advance(9)
    assert await scheduler.tick() == []  # the retry is not due yet
    clock.advance(1)
    await scheduler.tick()
    [fire] = await scheduler.store.list_fires(agent.path)
    assert (fire.status, fire.attempts, fire.wake_at) == ("retry", 2, START + 85)  # 20 s capped to 15
    clock.advance(15)
    await scheduler.tick()
    [fire] = await scheduler.store.list_fires(agent.path)
    assert (fire.status, fire.attempts, fire.error) == ("failed", 3, "RuntimeError: standup failed (2 more)")
    assert [c.attempt for c in agent.ran] == [1, 2, 3] and {c.metadata["n"] for c in agent.ran} == {1}
    assert await agent.list_schedules() == []  # a one-shot leaves no task behind


async def test_a_handler_that_fails_once_succeeds_on_its_retry() -> None:
    clock = ta.ManualClock(START)
    scheduler, agent = await attached(clock)
    await agent.cancel_schedule("inbox")
    agent.failures_left = 1
    clock.set(dt.datetime(2026, 12, 7, 9, 30, tzinfo=BERLIN).timestamp())
    await scheduler.tick()
    clock.advance(1)
    await scheduler.tick()
    [fire] = await scheduler.store.list_fires(agent.path)
    assert (fire.status, fire.attempts) == ("delivered", 2)
    assert [c.attempt for c in agent.ran] == [1, 2]


async def test_run_time_tasks_one_shot_by_delay_and_datetime_recurring_by_spec_list_and_cancel() -> None:
    clock = ta.ManualClock(START)
    scheduler, agent = await attached(clock)
    for task_id in ("inbox", "standup"):
        assert await agent.cancel_schedule(task_id)
    assert not await agent.cancel_schedule("inbox")
    soon = await agent.schedule(30, "remind me", metadata={"who": "ana"})
    later = await agent.schedule(dt.datetime(2026, 12, 7, 12, 0, tzinfo=BERLIN), "lunch", task_id="lunch")
    weekly = await agent.schedule("every week on fri at 17:00", "weekly review", task_id="review")
    await agent.schedule("every 10 minutes", "never", task_id="gone")
    assert soon.kind == "once" and soon.next_at == START + 30 and soon.metadata == {"who": "ana"}
    assert later.next_at == dt.datetime(2026, 12, 7, 12, 0, tzinfo=BERLIN).timestamp()
    assert weekly.schedule == "every week on fri at 17:00 in Europe/Berlin"  # the agent's zone
    assert [t.task_id for t in await agent.list_schedules()] == [soon.task_id, "gone", "lunch", "review"]
    assert await agent.cancel_schedule("gone")
    clock.advance(4 * 3600 + 1)  # 12:00:01
    fires = await scheduler.tick()
    assert sorted(f.task.task_id for f in fires) == sorted([soon.task_id, "lunch"])
    assert [t.task_id for t in await agent.list_schedules()] == ["review"]
    for submission in await agent.list_submissions():
        await agent.wait_for_submission(submission.submission_id, timeout_s=10)
    assert sorted(t for t in texts(agent) if not t.startswith("echo")) == ["lunch", "remind me"]
    with pytest.raises(ta.ConfigurationError, match="seconds from now, a datetime, or a schedule spec"):
        await agent.schedule([1], "x")
    with pytest.raises(ta.ConfigurationError, match="a delay is 0 or more seconds"):
        await agent.schedule(-5, "x")
    with pytest.raises(ta.ConfigurationError, match="exactly one of a prompt"):
        await agent.schedule(5)


async def test_a_bound_method_is_a_handler_and_a_missing_one_fails_the_fire() -> None:
    clock = ta.ManualClock(START)
    scheduler, agent = await attached(clock)
    info = await agent.schedule(5, agent.standup)
    assert info.handler == "standup" and info.prompt is None
    await agent.schedule(5, handler="no_such_method", task_id="broken", retry=ta.RetryPolicy(max_attempts=1))
    clock.advance(5)
    await scheduler.tick()
    fires = {f.task.task_id: f for f in await scheduler.store.list_fires(agent.path)}
    assert fires[info.task_id].status == "delivered" and len(agent.ran) == 1
    assert fires["broken"].status == "failed" and "has no handler method 'no_such_method'" in (
        fires["broken"].error or ""
    )


async def test_a_daily_time_skipped_by_spring_forward_fires_once_through_the_scheduler() -> None:
    clock = ta.ManualClock(dt.datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN).timestamp())
    scheduler, agent = await attached(clock)
    for task_id in ("inbox", "standup"):
        await agent.cancel_schedule(task_id)
    await agent.schedule("every day at 02:30", "night job", task_id="night")
    fired: list[str] = []
    for _ in range(24 * 4):  # the whole transition day, a quarter of an hour at a time
        clock.advance(900)
        fired += [
            dt.datetime.fromtimestamp(f.scheduled_for, BERLIN).strftime("%d %H:%M %Z") for f in await scheduler.tick()
        ]
    assert fired == ["29 03:30 CEST"]


async def test_the_background_loop_fires_when_the_clock_reaches_the_occurrence() -> None:
    clock = ta.ManualClock(START)
    scheduler, agent = await attached(clock)
    await agent.cancel_schedule("standup")
    scheduler.start()
    try:
        clock.advance(3600)
        for _ in range(200):
            if await agent.list_submissions():
                break
            await asyncio.sleep(0.01)
        [submission] = await agent.list_submissions()
        assert (await agent.wait_for_submission(submission.submission_id, timeout_s=10)).status == "completed"
    finally:
        await scheduler.stop()


async def test_an_in_process_agent_without_a_scheduler_is_told_how_to_get_one() -> None:
    agent = Inbox("lonely", store=ta.MemoryStore())
    with pytest.raises(ta.ConfigurationError, match=r"ta\.LocalScheduler\(\)\.attach\(agent\)"):
        await agent.schedule(5, "x")


async def test_a_fire_for_an_agent_that_is_not_attached_fails_after_its_attempts() -> None:
    clock = ta.ManualClock(START)
    scheduler = ta.LocalScheduler(clock=clock)
    from think_actors.schedule import AgentSchedules

    stranger = AgentSchedules(scheduler.store, "inbox/ghost", "Inbox", clock=clock)
    await stranger.schedule(1, "boo", retry=ta.RetryPolicy(max_attempts=1))
    clock.advance(1)
    await scheduler.tick()
    [fire] = await scheduler.store.list_fires("inbox/ghost")
    assert fire.status == "failed" and "no agent 'inbox/ghost' is attached" in (fire.error or "")
    assert isinstance(SystemClock().now(), float)


class Busy(ta.Think):
    """Notes something down, then answers: two model requests a turn."""

    default_timezone = "Europe/Berlin"

    @ta.tool
    async def note(self) -> str:
        """Note it."""
        return "noted"


async def test_a_scheduled_prompt_runs_its_turn_with_the_tasks_limits() -> None:
    clock = ta.ManualClock(START)
    scheduler = ta.LocalScheduler(clock=clock)
    model = ScriptedModel([tool_call("note", {}), text("done"), tool_call("note", {}), text("done")])
    agent = Busy("busy", model=model, store=ta.MemoryStore())
    await scheduler.attach(agent)
    tight = await agent.schedule(30, "note it", task_id="tight", limits={"max_requests": 1})
    await agent.schedule(60, "note it again", task_id="free")  # no limits: the class's (none)
    assert tight.limits == {"max_requests": 1}
    clock.advance(61)
    assert len(await scheduler.tick()) == 2
    ended = {}
    for submission in await agent.list_submissions():
        done = await agent.wait_for_submission(submission.submission_id, timeout_s=10)
        ended[done.metadata["schedule"]["task_id"]] = (done.status, done.error or "")
    assert ended["free"] == ("completed", "")
    status, error = ended["tight"]
    assert status == "error" and "max_requests limit (1)" in error  # its second request was refused
    with pytest.raises(ta.ConfigurationError, match="The fields are max_input_tokens"):
        await agent.schedule(30, "x", limits={"max_tokens": 5})
    with pytest.raises(ta.ConfigurationError, match="a handler task has none"):
        await agent.schedule(30, handler="note", limits={"max_requests": 1})


class Declared(Busy):
    """Declares a prompt with its own limits and one without."""

    schedules = [
        ta.every("30 seconds", "note it", id="tight", limits=ta.RunLimits(max_requests=1)),
        ta.every("1 minute", "note it again", id="free"),
    ]


async def test_a_class_declared_prompt_carries_its_limits_to_its_turns() -> None:
    clock = ta.ManualClock(START)
    scheduler = ta.LocalScheduler(clock=clock)
    model = ScriptedModel([tool_call("note", {}), text("done"), tool_call("note", {}), text("done")])
    agent = Declared("declared", model=model, store=ta.MemoryStore())
    await scheduler.attach(agent)
    listed = {t.task_id: t.limits for t in await agent.list_schedules()}
    assert listed == {"tight": {"max_requests": 1}, "free": None}
    clock.advance(61)
    await scheduler.tick()
    ended = {}
    for submission in await agent.list_submissions():
        done = await agent.wait_for_submission(submission.submission_id, timeout_s=10)
        ended[done.metadata["schedule"]["task_id"]] = (done.status, done.error or "")
    assert ended["free"] == ("completed", "")
    assert ended["tight"][0] == "error" and "max_requests limit (1)" in ended["tight"][1]
    with pytest.raises(ta.ConfigurationError, match="a handler task has none"):
        ta.every("1 hour", handler="note", limits={"max_requests": 1})
    with pytest.raises(ta.ConfigurationError, match="The fields are max_input_tokens"):
        ta.every("1 hour", "x", limits={"max_tokens": 5})
