"""The scheduler's node is lost: a head and one worker (``ray.cluster_utils.Cluster``), every store in PostgreSQL.

    python tests/multinode/schedule_scenario.py postgresql://postgres@127.0.0.1:5432/db

The cluster's scheduler actor is placed on the worker (softly), a second scheduler actor races it from the head,
and an agent on the head has a task every 3 seconds. Once a few occurrences have run, the worker is killed
(``remove_node(allow_graceful=False)``); Ray restarts the scheduler on the head, and the test reads back, with
plain SQL, that every occurrence was claimed once and delivered, and that the agent ran one turn per occurrence,
before and after the loss. It prints ``SCENARIO-RESULT {json}`` for tests/test_schedule_cluster.py; it runs in a
process of its own (the test session has its own local Ray), shuts its cluster down in a ``finally``, and the
test kills whatever of the run is left.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ["PYTHONPATH"] = os.pathsep.join([HERE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
sys.path.insert(0, HERE)

import asyncio  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

import asyncpg  # noqa: E402
import ray  # noqa: E402
from multinode_agents import Echo  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import think_actors as ta  # noqa: E402

HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}
PERIOD_S = 3
STARTED = time.monotonic()


def progress(what: str) -> None:
    print(f"[schedule scenario {time.monotonic() - STARTED:6.2f}s] {what}", file=sys.stderr, flush=True)


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


async def scenario(cluster: Cluster, worker: Any, store_url: str) -> dict[str, Any]:
    head_id, worker_id = cluster.head_node.node_id, worker.node_id
    label = {head_id: "head", worker_id: "w1"}
    from think_actors.runtime.scheduler_actor import start_scheduler

    main = await start_scheduler(poll_s=0.3, node_id=worker_id)
    rival = await start_scheduler(poll_s=0.3, node_id=head_id, name="think_actors.scheduler.rival")
    before = await status_of("think_actors.scheduler")
    agent = await ta.spawn(Echo, "scheduled", node_id=head_id)
    await agent.schedule(f"every {PERIOD_S} seconds", "tick", task_id="tick")
    progress("waiting for three occurrences")
    await until_delivered(store_url, agent.path, 3, 60)
    racing = [await main.status.remote(), await rival.status.remote()]  # both were polling the same rows
    progress("removing w1, the scheduler's node")
    removed_at = time.time()
    await asyncio.to_thread(cluster.remove_node, worker, allow_graceful=False)
    ray.kill(rival, no_restart=True)  # from here only the restarted scheduler can fire
    after = await status_of("think_actors.scheduler", off_node=worker_id)
    restarted_s = time.time() - removed_at
    count = await delivered(store_url, agent.path)
    progress(f"{count} delivered at the loss; waiting for two more")
    await until_delivered(store_url, agent.path, count + 2, 60)
    await agent.cancel_schedule("tick")
    await asyncio.sleep(1.0)  # a delivery in flight settles
    history = [m.text for m in await agent.get_messages()]
    rows = await fires(store_url, agent.path)
    ray.kill(main, no_restart=True)
    return {
        "scheduler_before": label.get(before["node_id"], "?"),
        "scheduler_after": label.get(after["node_id"], "?"),
        "pid_changed": before["pid"] != after["pid"],
        "fires": [r for r in rows if "key" in r],
        "submissions": [r for r in rows if "submission" in r],
        "history": history,
        "restarted_s": round(restarted_s, 2),
        "racing": [{"running": r["running"], "owner": r["owner"], "delivered": r["delivered"]} for r in racing],
    }


def main(store_url: str) -> int:
    results: dict[str, Any] = {}
    data_dir = tempfile.mkdtemp(prefix="think-actors-mn-schedule-")
    progress("starting the head")
    cluster = Cluster(
        initialize_head=True, head_node_args={**NODE, "include_dashboard": False, "_system_config": HEALTH_CHECKS}
    )
    try:
        worker = cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        ta.init(address=cluster.address, store=store_url, data_dir=data_dir, model_pool_size=1)
        results["run"] = asyncio.run(asyncio.wait_for(scenario(cluster, worker, store_url), 200))
    except Exception:
        results["error"] = traceback.format_exc()
    finally:
        progress("shutting down")
        ta.shutdown()
        cluster.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
        print("SCENARIO-RESULT " + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
