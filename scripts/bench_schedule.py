"""Scheduled prompts at scale (issue 21): many agents, one occurrence each within a window, fire lateness.

Two measurements, each printed as one JSON line:

(a) ``--mode scheduler``: ``--tasks`` one-shot tasks of as many agents in a real schedule store (SQLite under a
    temporary directory, or ``--store postgresql://...``), due at random times within ``--window-s``; the real
    ``Scheduler`` on the real clock delivers each to a recorder instead of an agent. Lateness is the delivery's
    time minus the occurrence's: what the scheduler itself adds (store queries, claims, records).
(b) ``--mode agents``: ``--agents`` agents provisioned on local Ray (addressable, never started; each hibernates
    ``--idle-s`` after its turn), each given one scheduled prompt within the window from the driver (no agent is
    woken to schedule), and the cluster's scheduler actor. Lateness is the time the agent accepted the submission
    (its ``on_submission_status`` hook, reported to one recorder actor) minus the occurrence's. Waking an agent is
    starting a Ray actor (about 2-4 per second on 2 cores, stack-notes), so with more agents due per second than
    the node can start, lateness grows with the queue: the figure says so rather than hiding it. Also printed:
    how many agents are resident at the end (after ``--settle-s``) and how many actor processes are alive.
    This is the old wake (``start_scheduler(runners=0)``): each due prompt starts its agent's actor.
(c) ``--mode runners``: ``--agents`` agents provisioned on local Ray (never started), one scheduled prompt each
    within the window, delivered through the burst runners (``runtime/runner.py``: a few long-lived actors per node
    that host many agents each for a moment). The agents answer at once (a model with no provider wait). Lateness
    is measured twice, in the agent's hooks: the occurrence's time to its turn's start (``before_turn``) and to its
    submission's completion (after the reply was persisted). Also: how many runs completed and whether each agent
    ran once, how many processes are resident at the end, and the runners' memory (USS, from ``/proc``).

Usage: python scripts/bench_schedule.py [--mode scheduler|agents|runners|both|all] [--tasks 10000]
       [--agents 10000] [--runner-agents 10000] [--window-s 60] [--store URL] [--json PATH]
       (--json: the summary rows, scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ray
from bench_summary import summary_row, write_rows

import think_actors as ta
from think_actors.runtime.scheduler_actor import schedules_of
from think_actors.schedule import AgentSchedules, FireRecord, Scheduler, open_schedule_store

SOURCE = "bench_schedule"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summary(lateness: list[float], expected: int) -> dict[str, Any]:
    return {
        "fired": len(lateness),
        "expected": expected,
        "lateness_p50_ms": round(percentile(lateness, 0.50) * 1000, 1),
        "lateness_p99_ms": round(percentile(lateness, 0.99) * 1000, 1),
        "lateness_max_ms": round(max(lateness, default=float("nan")) * 1000, 1),
        "lateness_mean_ms": round(statistics.fmean(lateness) * 1000, 1) if lateness else None,
    }


async def bench_scheduler(tasks: int, window_s: float, store_url: str | None) -> dict[str, Any]:
    data_dir = tempfile.mkdtemp(prefix="bench-schedule-")
    store = open_schedule_store(store_url, data_dir)
    lead_s = max(5.0, tasks / 500)  # writing the tasks takes a moment: the window starts after it
    start = time.time() + lead_s
    for i in range(tasks):
        agent = AgentSchedules(store, f"bench/a{i}", "Bench")
        await agent.schedule(start + random.uniform(0, window_s) - time.time(), "wake up", task_id="t")
    written_s = time.time() - (start - lead_s)
    lateness: list[float] = []
    all_fired = asyncio.Event()

    async def record(fire: FireRecord) -> None:
        lateness.append(time.time() - fire.scheduled_for)
        if len(lateness) >= tasks:
            all_fired.set()

    scheduler = Scheduler(store, record, poll_s=1.0, batch=1000)
    loop = asyncio.ensure_future(scheduler.run())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_fired.wait(), start + window_s + 30 - time.time())
    loop.cancel()
    await asyncio.gather(loop, return_exceptions=True)
    await store.close()
    return {
        "mode": "scheduler",
        "store": type(store).__name__,
        "write_s": round(written_s, 1),
        **summary(lateness, tasks),
    }


@ray.remote(num_cpus=0)
class Accepted:
    """When each agent accepted its scheduled prompt."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[float, float]] = {}

    def record(self, path: str, scheduled_for: float, at: float) -> None:
        self.seen.setdefault(path, (scheduled_for, at))

    def all(self) -> dict[str, tuple[float, float]]:
        return self.seen


class Sleeper(ta.Think):
    """Answers at once and hibernates ``idle_timeout_s`` after its turn; reports when it accepted its prompt."""

    idle_timeout_s = 2.0

    async def on_submission_status(self, submission: Any) -> None:
        facts = (submission.metadata or {}).get("schedule")
        if submission.status == "pending" and facts:
            recorder = ray.get_actor("bench-schedule-accepted", namespace="think_actors")
            await recorder.record.remote(self.path, facts["scheduled_for"], time.time())


def actor_processes() -> int:
    """Alive actors of this Ray (each is a process): the agents, the scheduler, the recorder, model servers."""
    return sum(1 for actor in ray._private.state.actors().values() if actor["State"] == "ALIVE")


async def bench_agents(agents: int, window_s: float, idle_s: float, settle_s: float) -> dict[str, Any]:
    from think_actors.testing import ScriptedModel, text

    ta.init(data_dir=tempfile.mkdtemp(prefix="bench-schedule-ray-"), idle_timeout_s=idle_s)
    recorder = Accepted.options(name="bench-schedule-accepted", namespace="think_actors").remote()  # type: ignore[attr-defined]
    scheduler = await ta.start_scheduler(poll_s=0.5, runners=0)  # the old wake: each agent its actor
    lead_s = max(10.0, agents / 100)  # provisioning and scheduling come first: the window starts after them
    start = time.time() + lead_s
    handles = []
    for i in range(agents):
        handle = ta.provision(Sleeper, f"s{i}", model=ScriptedModel([text("awake")]))
        await schedules_of(handle).schedule(start + random.uniform(0, window_s) - time.time(), "wake up", task_id="t")
        handles.append(handle)
    write_s = time.time() - (start - lead_s)
    processes_before = actor_processes()
    deadline = start + window_s + max(600.0, agents / 2.0)
    seen: dict[str, tuple[float, float]] = {}
    while time.time() < deadline:
        seen = await recorder.all.remote()
        if len(seen) >= agents:
            break
        await asyncio.sleep(2.0)
    await asyncio.sleep(settle_s)
    listing = ta.list_agents()
    result = {
        "mode": "agents",
        "agents": agents,
        "write_s": round(write_s, 1),
        **summary([at - due for due, at in seen.values()], agents),
        "resident_at_end": listing.resident,
        "addressable": listing.addressable,
        "actor_processes_after_scheduling": processes_before,
        "actor_processes_at_end": actor_processes(),
    }
    ray.kill(scheduler, no_restart=True)
    ta.shutdown()
    return result


@ray.remote(num_cpus=0)
class Runs:
    """Each agent's scheduled run: when it was due, when its turn started, when its submission completed."""

    def __init__(self) -> None:
        self.runs: dict[str, list[tuple[float, float, float]]] = {}

    def record(self, path: str, due: float, started: float, done: float) -> None:
        self.runs.setdefault(path, []).append((due, started, done))

    def count(self) -> int:
        return len(self.runs)

    def all(self) -> dict[str, list[tuple[float, float, float]]]:
        return self.runs


_RECORDER: dict[str, Any] = {}


class InstantModel:
    """Answers at once: no provider wait, so the figure is the runners' own."""

    model_id = "instant"

    async def stream(self, request: Any) -> Any:
        from think_actors.models import FinishEvent, TextDelta, Usage

        yield TextDelta("awake")
        yield FinishEvent("stop", Usage())


class Riser(ta.Think):
    """Reports its scheduled run once its submission has completed (the reply is persisted before that)."""

    model = InstantModel()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._started = 0.0

    async def before_turn(self, ctx: Any) -> None:
        self._started = time.time()

    async def on_submission_status(self, submission: Any) -> None:
        facts = (submission.metadata or {}).get("schedule")
        if submission.status == "completed" and facts:
            recorder = _RECORDER.get("runs")
            if recorder is None:  # one name lookup per runner process, not one per agent
                recorder = _RECORDER["runs"] = ray.get_actor("bench-schedule-runs", namespace="think_actors")
            recorder.record.remote(self.path, facts["scheduled_for"], self._started, time.time())


def uss_mib(pid: int) -> float:
    """A process's unique memory (private pages), from /proc (the runners run on this machine)."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return round(total / 1024, 1)


async def bench_runners(agents: int, window_s: float, settle_s: float) -> dict[str, Any]:
    from think_actors.runtime import _require_config
    from think_actors.runtime.runner import RunnerPool

    ta.init(data_dir=tempfile.mkdtemp(prefix="bench-schedule-runners-"))
    config = _require_config()
    recorder = Runs.options(name="bench-schedule-runs", namespace="think_actors").remote()  # type: ignore[attr-defined]
    scheduler = await ta.start_scheduler(poll_s=0.5)
    pool = RunnerPool(config)
    runner_pids = [(await r.status.remote())["pid"] for r in pool.runners()]  # started before the window
    began = time.time()
    handles = [ta.provision(Riser, f"r{i}") for i in range(agents)]
    provision_s = time.time() - began
    store = open_schedule_store(config.store_url, config.data_dir)
    start = time.time() + 10.0 + agents / 400  # writing the tasks comes first: the window starts after it
    for handle in handles:
        when = start + random.uniform(0, window_s) - time.time()
        await AgentSchedules(store, handle.path, handle.class_name).schedule(when, "wake up", task_id="t")
    write_s = time.time() - began
    assert time.time() < start, "writing the tasks took longer than the lead: raise it"
    deadline = start + window_s + max(300.0, agents / 10)
    while time.time() < deadline:
        if await recorder.count.remote() >= agents:
            break
        await asyncio.sleep(2.0)
    await asyncio.sleep(settle_s)
    runs = await recorder.all.remote()
    listing = await asyncio.to_thread(ta.list_agents)
    first = [r[0] for r in runs.values()]
    statuses = [await r.status.remote() for r in pool.runners()]
    result = {
        "mode": "runners",
        "agents": agents,
        "runners": len(runner_pids),
        "provision_s": round(provision_s, 1),
        "write_s": round(write_s, 1),
        "completed": len(runs),
        "ran_once": sum(1 for r in runs.values() if len(r) == 1),
        "ran_more_than_once": sum(1 for r in runs.values() if len(r) > 1),
        "to_turn_start": summary([started - due for due, started, _ in first], agents),
        "to_reply_persisted": summary([done - due for due, _, done in first], agents),
        "runner_stats": [{k: s[k] for k in ("ran", "handed_over", "hosted_at_once")} for s in statuses],
        "runner_uss_mib": [uss_mib(pid) for pid in runner_pids],
        "resident_at_end": listing.resident,
        "addressable": listing.addressable,
        "actor_processes_at_end": actor_processes(),
    }
    await store.close()
    ray.kill(scheduler, no_restart=True)
    ta.shutdown()
    return result


def lateness_rows(figure: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    """The lateness p99 and how many fired, of a mode's result."""
    expected = result["expected"]
    return [
        summary_row(f"{figure}: lateness p99", result["lateness_p99_ms"], unit="ms", source=SOURCE),
        summary_row(f"{figure}: fired", result["fired"], unit=f"of {expected:,}", source=SOURCE),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["scheduler", "agents", "runners", "both", "all"], default="all")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=10_000, help="--mode agents: woken in their own actors")
    parser.add_argument("--runner-agents", type=int, default=10_000, help="--mode runners (smaller: a quick run)")
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--idle-s", type=float, default=2.0)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--store", default=None, help="schedule store URL for --mode scheduler (default SQLite)")
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    window = f"due within {args.window_s:.0f} s"
    rows = []
    if args.mode in ("scheduler", "both", "all"):
        result = asyncio.run(bench_scheduler(args.tasks, args.window_s, args.store))
        print(json.dumps(result), flush=True)
        rows += lateness_rows(f"schedule: the scheduler alone, {args.tasks:,} tasks {window}", result)
    if args.mode in ("agents", "both", "all"):
        result = asyncio.run(bench_agents(args.agents, args.window_s, args.idle_s, args.settle_s))
        print(json.dumps(result), flush=True)
        rows += lateness_rows(f"schedule: {args.agents:,} agents {window}, each woken in its own actor", result)
    if args.mode in ("runners", "all"):
        result = asyncio.run(bench_runners(args.runner_agents, args.window_s, args.settle_s))
        print(json.dumps(result), flush=True)
        figure = f"schedule: {args.runner_agents:,} agents {window}, through the runners"
        rows += lateness_rows(f"{figure}, to the turn's start", {**result, **result["to_turn_start"]})
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
