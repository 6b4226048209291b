"""The scheduler's part of the multi-node scenario (tests/multinode/scenario.py): the scheduler's node is lost.

The cluster's scheduler actor is placed on w2 (softly), a second scheduler actor races it from the head, and an
agent on the head has a task every PERIOD_S seconds. Once a few occurrences have run, w2 is killed (the scenario's
node loss, ``remove_node(allow_graceful=False)``, which also takes the agents of its own check away); Ray restarts
the scheduler on another node, and the facts read back, with plain SQL, that every occurrence was claimed once and
delivered, and that the agent ran one turn per occurrence, before and after the loss. tests/test_schedule_cluster.py
asserts them.

It used to run in a cluster of its own; it shares the scenario's because most of it is waiting for the clock,
which goes on beside the scenario's other checks, and the scenario's node loss serves both.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import ray
from multinode_agents import Echo

import think_actors as ta
from think_actors.runtime.scheduler_actor import SCHEDULER_NAME, start_scheduler

PERIOD_S = 2
RIVAL_NAME = "think_actors.scheduler.rival"


async def fires(url: str, path: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT key, status, attempts, owner FROM think_actors.schedule_fires WHERE agent = $1 ORDER BY key", path
        )
        turns = await conn.fetch(
            "SELECT idempotency_key, status FROM think_actors.submissions WHERE agent = $1 ORDER BY seq", path
        )
    finally:
        await conn.close()
    return [dict(r) for r in rows] + [{"submission": r[0], "status": r[1]} for r in turns]


async def status_of(name: str, off_node: str | None = None) -> dict[str, Any]:
    """The scheduler actor's status; with ``off_node``, once it answers from another node (its old process may
    still answer for a moment after its raylet was killed)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            actor = ray.get_actor(name, namespace="think_actors")
            facts: dict[str, Any] = await asyncio.wait_for(actor.status.remote(), 10)
            if off_node is None or facts["node_id"] != off_node:
                return facts
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"the scheduler still answers from {off_node} after 60 s")
        await asyncio.sleep(0.3)


async def delivered(url: str, path: str) -> int:
    return sum(1 for f in await fires(url, path) if f.get("status") == "delivered" and "key" in f)


async def until_delivered(url: str, path: str, count: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while (n := await delivered(url, path)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} of {count} occurrences delivered after {timeout_s} s")
        await asyncio.sleep(0.2)
    return n


async def before_the_loss(ids: dict[str, str], store_url: str) -> dict[str, Any]:
    """Start both schedulers and the scheduled agent; return once three occurrences were delivered."""
    main = await start_scheduler(poll_s=0.3, node_id=ids["w2"])
    rival = await start_scheduler(poll_s=0.3, node_id=ids["head"], name=RIVAL_NAME)
    before = await status_of(SCHEDULER_NAME)
    agent = await ta.spawn(Echo, "scheduled", node_id=ids["head"])
    await agent.schedule(f"every {PERIOD_S} seconds", "tick", task_id="tick")
    await until_delivered(store_url, agent.path, 3, 90)
    racing = [await main.status.remote(), await rival.status.remote()]  # both were polling the same rows
    return {"main": main, "rival": rival, "agent": agent, "before": before, "racing": racing}


async def after_the_loss(
    ids: dict[str, str], store_url: str, started: dict[str, Any], removed_at: float
) -> dict[str, Any]:
    """From the moment w2 was removed: the scheduler's restart elsewhere and two more occurrences."""
    label = {node_id: name for name, node_id in ids.items()}
    ray.kill(started["rival"], no_restart=True)  # from here only the restarted scheduler can fire
    after = await status_of(SCHEDULER_NAME, off_node=ids["w2"])
    restarted_s = time.time() - removed_at
    agent = started["agent"]
    count = await delivered(store_url, agent.path)
    await until_delivered(store_url, agent.path, count + 2, 60)
    await agent.cancel_schedule("tick")
    await asyncio.sleep(1.0)  # a delivery in flight settles
    history = [m.text for m in await agent.get_messages()]
    rows = await fires(store_url, agent.path)
    ray.kill(started["main"], no_restart=True)
    before = started["before"]
    return {
        "scheduler_before": label.get(before["node_id"], "?"),
        "scheduler_after": label.get(after["node_id"], "?"),
        "pid_changed": before["pid"] != after["pid"],
        "fires": [r for r in rows if "key" in r],
        "submissions": [r for r in rows if "submission" in r],
        "history": history,
        "restarted_s": round(restarted_s, 2),
        "racing": [
            {"running": r["running"], "owner": r["owner"], "delivered": r["delivered"]} for r in started["racing"]
        ],
    }
