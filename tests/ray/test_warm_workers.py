"""Warm worker pools (``think_actors/_warm.py``): a wake takes a booted process of its node's pool, the pool boots
the successors, and the node's memory caps it. Checked by pid and by the pool's own status, never by timing."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

import pytest
import ray
from ray_agents import EntryAgent

import think_actors as ta
from think_actors import _warm

pytestmark = [
    pytest.mark.usefixtures("ray_runtime"),
    pytest.mark.timeout(300),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="warm processes are counted in /proc"),
]

SHARE = 0.2  # ta.init's default warm_memory_share


async def _pool(namespace: str, until: Any, within_s: float = 240.0) -> dict[str, Any]:
    """This node's pool status once ``until(status)`` holds (a process boots in seconds on a busy machine)."""
    deadline = time.monotonic() + within_s
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        statuses = await _warm.pool_statuses(namespace)
        if statuses and until(status := statuses[0]):
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"the warm pool never got there in {within_s:.0f} s; last status {status}")


@pytest.fixture
def namespace(ray_runtime: Any) -> Any:
    """The session's namespace; the node's pool is back to the session's size (one) after the test."""
    yield ray_runtime.namespace
    _warm.start_pools(1, SHARE, ray_runtime.namespace)


async def test_wakes_take_booted_processes_and_the_pool_boots_their_successors(namespace: str, unique: str) -> None:
    # Idle workers that earlier tests' Ray tasks left count as the pool's, though Ray gives them to tasks only: a
    # size two past what is idle now leaves at least two processes no task ever ran in.
    size = len(_warm.idle_workers() or []) + 2
    _warm.start_pools(size, SHARE, namespace)
    before = await _pool(namespace, lambda s: len(s["ready"]) == size and not s["booting"])
    taken = before["taken"]
    first = await ta.spawn(EntryAgent, f"{unique}-a")
    second = await ta.spawn(EntryAgent, f"{unique}-b")
    pids = {(await first.info())["pid"], (await second.info())["pid"]}
    assert len(pids) == 2  # an actor each, a process each
    assert pids <= set(before["ready"])  # both took a process the pool had booted
    # Once the pool has seen both go (earlier tests' idle task workers that Ray ends count as taken too) and has
    # booted their successors, new processes:
    after = await _pool(namespace, lambda s: s["taken"] - taken >= 2 and len(s["ready"]) == size and not s["booting"])
    assert not pids & set(after["ready"])
    assert len(set(after["ready"]) - set(before["ready"])) >= 2
    for handle in (first, second):
        await handle.kill(restart=False)


async def test_the_memory_cap_empties_a_pool_that_may_take_no_memory(
    namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _pool(namespace, lambda s: len(s["ready"]) >= 1)
    with caplog.at_level(logging.WARNING, logger="think_actors._warm"):
        _warm.start_pools(3, 0.0, namespace)
    assert "warm_workers=3: this node keeps 0 warm processes" in caplog.text
    stopped = (await _warm.pool_statuses(namespace))[0]["stopped"]
    status = await _pool(namespace, lambda s: s["cap"] == 0 and not s["booting"] and s["stopped"] > stopped)
    assert status["size"] == 3  # the process it held was stopped, not left idle ...
    await _asks_nothing(namespace)  # ... and it boots none
    _warm.start_pools(1, SHARE, namespace)  # room again: the pool holds one (boots one unless one is idle)
    await _pool(namespace, lambda s: s["cap"] is None and len(s["ready"]) >= 1)


async def test_warm_workers_zero_leaves_no_process_idle(namespace: str) -> None:
    _warm.start_pools(0, SHARE, namespace)
    status = await _pool(namespace, lambda s: s["size"] == 0 and not s["booting"])
    assert status["size"] == 0
    await _asks_nothing(namespace)


async def _asks_nothing(namespace: str, for_s: float = 2.0) -> None:
    """The pool asks the raylet for no process for ``for_s``. (Its "ready" list may still hold idle workers that
    earlier tests' Ray tasks left: they count as warm, only Ray's idle-worker reaper ends them, and the suite's
    order decides whether there are any.)"""
    asked = (await _warm.pool_statuses(namespace))[0]["asked"]
    await asyncio.sleep(for_s)
    assert (await _warm.pool_statuses(namespace))[0]["asked"] == asked


@ray.remote(num_cpus=0)
def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


async def test_workers_that_ran_ray_tasks_are_not_counted_and_the_pool_refills(namespace: str) -> None:
    # Task tools run in the job's worker processes, warm ones included. Done, such a process is idle again, but
    # Ray gives it to tasks only: it is no warm process for a wake, nor one still starting (counted so, it held the
    # node's boot slots and the pool never refilled).
    await _pool(namespace, lambda s: len(s["ready"]) >= 1 and not s["booting"])
    # Short tasks: the pool, full and quiet, looks once a second and sees none of them run.
    await asyncio.sleep(3 * _warm.QUIET_S)
    pids = set(await asyncio.gather(*(_pid_after.remote(0.1) for _ in range(3))))
    # (The tasks may or may not have taken the pool's process: Ray may start workers of its own for them.)
    status = await _pool(
        namespace,
        lambda s: len(s["ready"]) >= 1 and not s["booting"] and not pids & set(s["ready"]),
        within_s=90.0,
    )
    assert not pids & set(status["ready"])
    assert not pids & set(status["booting"])


@ray.remote(num_cpus=0)
def _runtime_loaded_before_the_task() -> bool:
    return "think_actors.runtime" in sys.modules


async def test_every_worker_imports_the_runtime_before_its_first_task() -> None:
    # This module does not import the runtime (the package loads it lazily): only the set-up hook can have.
    assert await _runtime_loaded_before_the_task.remote() is True
