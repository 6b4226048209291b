"""Burst runners on Ray: the due prompt of an agent without an actor runs in a runner (hooks, reply persisted, no
agent actor started), 50 at once each run once, the agent's actor woken mid-turn fences the runner and finishes
the prompt once, a runner killed mid-turn leaves the occurrence to complete once, and a handler task runs there.
The agent classes live at module level so that Ray's workers import them by this module's name."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import ray
from helpers import until
from ray_agents import EchoModel

import think_actors as ta
from think_actors import registry
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage
from think_actors.runtime import _require_config
from think_actors.runtime.runner import RunnerPool
from think_actors.runtime.scheduler_actor import SCHEDULER_NAME, schedules_of
from think_actors.schedule import open_schedule_store
from think_actors.store import SQLiteStore

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(300)]

RECORDER = "burst-runner-recorder"


@ray.remote(num_cpus=0)
class Recorder:
    """What each agent's hooks saw, and in which process."""

    def __init__(self) -> None:
        self.seen: dict[str, list[tuple[str, int]]] = {}

    def record(self, path: str, what: str, pid: int) -> None:
        self.seen.setdefault(path, []).append((what, pid))

    def of(self, path: str) -> list[tuple[str, int]]:
        return self.seen.get(path, [])

    def count(self, what: str) -> int:
        return sum(1 for events in self.seen.values() for w, _ in events if w == what)


async def note(path: str, what: str) -> None:
    await ray.get_actor(RECORDER, namespace="think_actors").record.remote(path, what, os.getpid())


class SlowEcho:
    """Answers ``echo: <last user text>`` in two parts, ``delay_s`` apart."""

    model_id = "slow-echo"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        content = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content)
        yield TextDelta("echo: ")
        await asyncio.sleep(self.delay_s)
        yield TextDelta(content)
        yield FinishEvent("stop", Usage())


class Noted(ta.Think):
    """Reports its hooks; hibernates after half a second without work."""

    model = EchoModel()
    idle_timeout_s = 0.5

    async def before_turn(self, ctx: ta.TurnContext) -> None:
        await note(self.path, "before_turn")

    async def on_chat_response(self, ctx: Any) -> None:
        await note(self.path, "on_chat_response")

    async def on_submission_status(self, submission: Any) -> None:
        await note(self.path, f"submission:{submission.status}")

    async def jot(self, ctx: ta.ScheduledTaskContext) -> None:
        await note(self.path, f"jot {ctx.occurrence_key}")
        await self.add_messages(f"jotted {ctx.task_id}")


class SharedNoted(Noted):
    """``Noted`` hosted many to a process: its due prompt goes to its shared host, never to a runner."""

    hosting = "shared"


class SlowNoted(Noted):
    model = SlowEcho(3.0)


class SlowerNoted(Noted):
    """Its turn outlasts a woken actor's start even on a loaded machine."""

    model = SlowEcho(15.0)


@pytest.fixture
async def scheduler() -> AsyncIterator[Any]:
    recorder = Recorder.options(name=RECORDER, namespace="think_actors", get_if_exists=True).remote()  # type: ignore[attr-defined]
    actor = await ta.start_scheduler(poll_s=0.2)
    try:
        yield actor
    finally:
        ray.kill(actor, no_restart=True)  # detached: it would outlive the test
        for _ in range(200):  # the next test's get-or-create would get the dying actor while its name is taken
            try:
                ray.get_actor(SCHEDULER_NAME, namespace="think_actors")
            except ValueError:
                break
            await asyncio.sleep(0.05)
        ray.kill(recorder)


def has_actor(path: str) -> bool:
    try:
        ray.get_actor(path, namespace="think_actors")
    except ValueError:
        return False
    return True


async def stored(path: str) -> tuple[list[str], list[tuple[str | None, str]]]:
    """The agent's transcript and its submissions (key, status), read from its store in this process."""
    store = SQLiteStore.for_agent(_require_config().data_dir, path)
    try:
        texts = [m.text for m in await store.load_messages()]
        submissions = [(s.idempotency_key, s.status) for s in await store.list_submissions()]
    finally:
        await store.close()
    return texts, submissions


async def runner_pids() -> set[int]:
    pool = RunnerPool(_require_config())
    return {(await r.status.remote())["pid"] for r in pool.runners()}


async def test_a_hibernated_agents_due_prompt_runs_on_a_runner_with_its_hooks(scheduler: Any, unique: str) -> None:
    agent = await ta.spawn(Noted, unique)
    await agent.save_messages("before the nap")
    agent_pid = (await agent.info())["pid"]
    task = await schedules_of(agent).schedule(4.0, "wake up", task_id="alarm")
    recorder = ray.get_actor(RECORDER, namespace="think_actors")

    async def hibernated() -> bool:
        record = registry.lookup("think_actors", agent.path)
        return record is not None and not record.resident and not has_actor(agent.path)

    await until(hibernated, timeout_s=30, what="the agent to hibernate")
    assert task.next_at is not None and time.time() < task.next_at, "hibernated too late for this test to mean much"

    async def answered() -> bool:
        events = await recorder.of.remote(agent.path)
        return any(w == "submission:completed" and pid != agent_pid for w, pid in events)

    await until(answered, timeout_s=90, what="the scheduled prompt to run")
    await asyncio.sleep(1.0)  # the runner closes the agent (reading its store here claims its lease)
    events = await recorder.of.remote(agent.path)
    scheduled = [(w, pid) for w, pid in events if pid != agent_pid]
    runners = await runner_pids()
    assert {pid for _, pid in scheduled} <= runners and len({pid for _, pid in scheduled}) == 1
    assert [w for w, _ in scheduled] == [
        "submission:pending",
        "submission:running",
        "before_turn",
        "on_chat_response",
        "submission:completed",
    ]
    # No agent actor was started for it: not resident, no actor of its name, its record unchanged.
    record = registry.lookup("think_actors", agent.path)
    assert record is not None and not record.resident and not has_actor(agent.path)
    assert ta.list_agents().resident_by_node().get(record.node_id, 0) >= 0
    texts, submissions = await stored(agent.path)
    assert texts == ["before the nap", "echo: before the nap", "wake up", "echo: wake up"]
    assert [status for _, status in submissions] == ["completed"]


async def test_a_hibernated_shared_agents_due_prompt_runs_in_its_host_not_on_a_runner(
    scheduler: Any, unique: str
) -> None:
    agent = await ta.spawn(SharedNoted, unique)
    await agent.save_messages("before the nap")
    host_pid = (await agent.info())["pid"]
    await schedules_of(agent).schedule(3.0, "wake up", task_id="alarm")
    recorder = ray.get_actor(RECORDER, namespace="think_actors")

    async def hibernated() -> bool:
        record = registry.lookup("think_actors", agent.path)
        return record is not None and not record.resident

    await until(hibernated, timeout_s=30, what="the agent to hibernate")

    async def answered() -> bool:
        return "submission:completed" in [w for w, _ in await recorder.of.remote(agent.path)]

    await until(answered, timeout_s=90, what="the scheduled prompt to run")
    events = await recorder.of.remote(agent.path)
    assert [w for w, _ in events if w.startswith("submission")] == [
        "submission:pending",
        "submission:running",
        "submission:completed",
    ]
    assert {pid for _, pid in events} == {host_pid}  # loaded again into its host, which never stopped
    assert host_pid not in await runner_pids()
    assert [m.text for m in await agent.get_messages()] == [
        "before the nap",
        "echo: before the nap",
        "wake up",
        "echo: wake up",
    ]
    await agent.kill(restart=False)


async def test_fifty_agents_prompts_due_at_once_all_run_exactly_once(scheduler: Any, unique: str) -> None:
    handles = [ta.provision(Noted, f"{unique}-{i}") for i in range(50)]
    due = time.time() + 4.0
    for handle in handles:
        await schedules_of(handle).schedule(due - time.time(), "wake up", task_id="t")
    recorder = ray.get_actor(RECORDER, namespace="think_actors")

    async def all_completed() -> bool:
        return int(await recorder.count.remote("submission:completed")) >= 50

    await until(all_completed, timeout_s=180, what="50 scheduled prompts to complete")
    await asyncio.sleep(1.5)  # anything run twice would have reported by now, and the runners closed the agents
    assert await recorder.count.remote("before_turn") == 50
    assert await recorder.count.remote("submission:completed") == 50
    runners = await runner_pids()
    for handle in handles:
        assert {pid for _, pid in await recorder.of.remote(handle.path)} <= runners
        texts, submissions = await stored(handle.path)
        assert texts == ["wake up", "echo: wake up"]
        assert [status for _, status in submissions] == ["completed"]
        assert not has_actor(handle.path)
    assert ta.list_agents().resident == sum(1 for a in ta.list_agents().agents if has_actor(a.path))


async def test_the_agents_actor_woken_mid_turn_fences_the_runner_and_the_prompt_still_runs_once(
    scheduler: Any, unique: str
) -> None:
    handle = ta.provision(SlowerNoted, unique)
    await schedules_of(handle).schedule(2.0, "wake up", task_id="t")
    recorder = ray.get_actor(RECORDER, namespace="think_actors")

    async def turn_started() -> bool:
        return any(w == "before_turn" for w, _ in await recorder.of.remote(handle.path))

    await until(turn_started, timeout_s=60, what="the runner to start the scheduled turn")
    [(_, runner_pid)] = [(w, p) for w, p in await recorder.of.remote(handle.path) if w == "before_turn"]
    assert runner_pid in await runner_pids()
    # A user's call wakes the agent's own actor while the runner's model is still streaming: its start fences the
    # runner and recovers the submission.
    woken = await ta.get(SlowerNoted, unique)
    actor_pid = (await woken.info())["pid"]
    assert actor_pid != runner_pid

    async def completed() -> bool:
        return [s.status for s in await woken.list_submissions()] == ["completed"]

    await until(completed, timeout_s=60, what="the submission to complete in the agent's actor")
    await asyncio.sleep(2.0)  # the runner's own turn has met the fence and left by now
    [submission] = await woken.list_submissions()
    assert submission.status == "completed" and submission.idempotency_key.startswith("schedule:t@")  # type: ignore[union-attr]
    assert [m.text for m in await woken.get_messages()] == ["wake up", "echo: wake up"]
    events = await recorder.of.remote(handle.path)
    # The runner settled nothing: every final status came from the agent's actor.
    assert [p for w, p in events if w.startswith("submission:") and w != "submission:pending"][-1] == actor_pid
    assert ("submission:error", runner_pid) not in events
    assert [w for w, p in events if p == actor_pid and w.startswith("submission:")][-1] == "submission:completed"
    store = open_schedule_store(_require_config().store_url, _require_config().data_dir)
    try:
        [fire] = await store.list_fires(handle.path)
        assert fire.status == "delivered" and fire.attempts == 1
    finally:
        await store.close()


async def test_a_runner_killed_mid_turn_leaves_the_occurrence_to_complete_once(scheduler: Any, unique: str) -> None:
    handle = ta.provision(SlowNoted, unique)
    await schedules_of(handle).schedule(2.0, "wake up", task_id="t")
    recorder = ray.get_actor(RECORDER, namespace="think_actors")

    async def turn_started() -> bool:
        return any(w == "before_turn" for w, _ in await recorder.of.remote(handle.path))

    await until(turn_started, timeout_s=60, what="the runner to start the scheduled turn")
    runner = RunnerPool(_require_config()).runner_for(handle.path)
    killed_pid = (await runner.status.remote())["pid"]
    ray.kill(runner, no_restart=False)  # Ray restarts it; the scheduler's call fails and the fire is retried

    async def completed() -> bool:
        return any(w == "submission:completed" for w, _ in await recorder.of.remote(handle.path))

    await until(completed, timeout_s=120, what="the occurrence to complete after the runner's death")
    await asyncio.sleep(1.0)  # the runner closes the agent (reading its store here claims its lease)
    texts, submissions = await stored(handle.path)
    assert texts == ["wake up", "echo: wake up"]
    assert len(submissions) == 1
    assert (await runner.status.remote())["pid"] != killed_pid
    assert not has_actor(handle.path)


async def test_a_handler_task_runs_on_a_runner(scheduler: Any, unique: str) -> None:
    handle = ta.provision(Noted, unique)
    await schedules_of(handle).schedule(2.0, handler="jot", task_id="jot")
    recorder = ray.get_actor(RECORDER, namespace="think_actors")

    async def jotted() -> bool:
        return any(w.startswith("jot jot@") for w, _ in await recorder.of.remote(handle.path))

    await until(jotted, timeout_s=60, what="the handler to run")
    [(_, pid)] = await recorder.of.remote(handle.path)
    assert pid in await runner_pids()
    await asyncio.sleep(1.0)  # the runner closes the agent (reading its store here claims its lease)
    texts, _ = await stored(handle.path)
    assert texts == ["jotted jot"]
    assert not has_actor(handle.path)
