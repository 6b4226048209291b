"""Warm worker processes (issue 22): an agent's start leaves a warm idle worker, and the next agent takes it."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
import ray
from ray_agents import EntryAgent

import think_actors as ta
from think_actors import _warm

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(300)]


def _registered(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0] == b"ray::IDLE"
    except OSError:
        return False


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return -1
    return int(fields[11]) + int(fields[12])


async def _warm_worker(within_s: float = 120.0, *, new_since: frozenset[int] = frozenset()) -> set[int]:
    """The node's idle workers of this job once one has booted: titled ``ray::IDLE`` (it names itself before it
    has registered with the raylet) and done computing (its set-up hook, which runs after the registration, has
    ended: no CPU over half a second). A worker takes seconds to boot on a busy machine."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        titled = {pid: _cpu_ticks(pid) for pid in _warm.idle_workers() or [] if _registered(pid)}
        await asyncio.sleep(0.5)
        booted = {pid for pid, ticks in titled.items() if ticks >= 0 and _cpu_ticks(pid) == ticks}
        if booted - new_since:
            return booted
    raise AssertionError(f"no warm worker of this job on the node after {within_s:.0f} s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="warm workers are counted in /proc")
async def test_an_agent_starts_on_the_warm_worker_the_last_start_left(unique: str) -> None:
    first = await ta.spawn(EntryAgent, f"{unique}-a")  # its start tops the node's warm workers up
    # Earlier tests' Ray tasks can leave idle workers of this job that Ray gives to tasks only, and they count as
    # warm (the _warm docstring says so): ask for one more than are idle, so one an actor may take is there.
    idle = frozenset(_warm.idle_workers() or [])
    _warm.top_up(len(idle) + 1)
    warm = await _warm_worker(new_since=idle)
    second = await ta.spawn(EntryAgent, f"{unique}-b")
    assert (await second.info())["pid"] in warm
    assert (await first.info())["pid"] not in warm
    # The start that took the warm worker left a successor, another process.
    assert not (await _warm_worker()) & {(await second.info())["pid"]}
    for handle in (first, second):
        await handle.kill(restart=False)


@ray.remote(num_cpus=0)
def _runtime_loaded_before_the_task() -> bool:
    return "think_actors.runtime" in sys.modules


async def test_every_worker_imports_the_runtime_before_its_first_task() -> None:
    # This module does not import the runtime (the package loads it lazily): only the set-up hook can have.
    assert await _runtime_loaded_before_the_task.remote() is True


async def test_no_warm_workers_when_turned_off() -> None:
    assert _warm.top_up(0) == 0
