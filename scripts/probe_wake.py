"""Where a wake's time goes (issue 22): Ray's worker start, imports, the agent's start, the first turn.

Each run starts its own local Ray (two CPUs, as the project machine) with the options given, then wakes
``--wakes`` provisioned agents one after another (``ta.provision`` then a chat: the path a hibernated agent's
wake takes), and as many bare Ray actors with the agents' actor options, and prints per part p50/p90:

- ``lease``: the call until Ray started (or handed over) the process: a negative figure is a process that was
  already running (a pre-started idle worker);
- ``boot``: the process's start until this probe's module was imported (Python, ``import ray``, the core
  worker's connection to the raylet, the set-up hook if any, the actor class's import);
- ``hook``: the set-up hook's own import of the package, when ``--hook`` runs one;
- ``construct``: the agent's constructor; ``to_turn``: its end until ``before_turn`` (the actor's start of the
  agent, the ``ready`` round trip, the chat call); ``first``: ``before_turn`` until the caller has the first chunk.

Usage: python scripts/probe_wake.py [--wakes 12] [--pace 1.5] [--hook] [--system-config '{"key": value}']
       [--warm N]  (a warm pool of N per node, booted before the first wake: see think_actors/_warm.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
import ray
from probe_agents import ProbeNapper
from probe_facts import process_facts

import think_actors as ta
from think_actors import _warm


@ray.remote
class BareProbe:
    """A bare actor: it imports ray and this script's probe module, nothing of think_actors' runtime."""

    def __init__(self) -> None:
        self.constructed = time.time()

    async def facts(self) -> dict[str, Any]:
        return {**process_facts(), "init": self.constructed, "turn": time.time()}


def import_paths() -> list[str]:
    """The driver's import path, for the workers (as ``ta.init`` gives them)."""
    return [os.path.abspath(p or ".") for p in sys.path if os.path.isdir(p or ".")]


def idle_workers() -> dict[int, float]:
    """This Ray's idle worker processes (children of its raylet) and their unique memory (MiB)."""
    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    found = {}
    for proc in psutil.Process(raylet).children():
        try:
            if proc.name() == "ray::IDLE" or (proc.cmdline() or [""])[0] == "ray::IDLE":
                found[proc.pid] = proc.memory_full_info().uss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


async def wait_for_pool(namespace: str, size: int) -> float:
    """Seconds until this node's warm pool reports ``size`` booted processes."""
    began = time.perf_counter()
    while True:
        if any(len(s["ready"]) >= size for s in await _warm.pool_statuses(namespace)):
            return time.perf_counter() - began
        await asyncio.sleep(0.5)


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"p50 {p50 * 1e3:7.0f} ms  p90 {p90 * 1e3:7.0f} ms"


def parts(t0: float, first: float, facts: dict[str, Any]) -> dict[str, float]:
    """A start split at the times its process recorded (see the module docstring)."""
    since = max(facts["created"], t0)
    out = {
        "total": first - t0,
        "lease": facts["created"] - t0,
        "boot": facts["module"] - since if facts["module"] > t0 else 0.0,
        "to_init": facts["init"] - max(facts["module"], t0),
        "construct": facts.get("init_end", facts["init"]) - facts["init"],
        "to_turn": facts["turn"] - facts.get("init_end", facts["init"]),
        "first": first - facts["turn"],
    }
    if facts["hook_began"] and facts["hook_ended"]:
        out["hook"] = facts["hook_ended"] - facts["hook_began"]
    return out


@ray.remote(num_cpus=0)
def _noop(hold_s: float) -> int:
    time.sleep(hold_s)
    return os.getpid()


async def warm_by_tasks(n: int) -> None:
    """Run ``n`` no-op tasks at once (each on its own worker), leaving their workers idle in Ray's pool."""
    await asyncio.gather(*(_noop.remote(0.3) for _ in range(n)))
    await asyncio.sleep(0.5)


async def wake_agent(i: int) -> tuple[dict[str, float], dict[str, Any]]:
    handle = ta.provision(ProbeNapper, f"probe-{i}-{time.time_ns()}")
    t0 = time.time()
    stream = handle.chat("wake up")
    first_chunk = await stream.__anext__()
    first = time.time()
    facts: dict[str, Any] = {}
    for chunk in [first_chunk, *[c async for c in stream]]:
        if getattr(chunk, "type", "") == "data-probe":
            facts = chunk.data
    return parts(t0, first, facts), facts


async def start_bare(options: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    t0 = time.time()
    actor = BareProbe.options(**options).remote()  # type: ignore[attr-defined]
    facts = await actor.facts.remote()
    first = time.time()
    ray.kill(actor, no_restart=True)
    return parts(t0, first, facts), facts


def report(label: str, rows: list[dict[str, float]], facts: list[dict[str, Any]], idle: set[int]) -> None:
    print(f"{label}: {len(rows)} starts, {sum(f['pid'] in idle for f in facts)} on a worker idle before the run")
    for row, fact in zip(rows, facts, strict=True):
        warm = "idle before" if fact["pid"] in idle else "new process"
        print("   ", warm, "  ".join(f"{k} {v * 1e3:.0f}" for k, v in row.items()))
    for key in rows[0]:
        print(f"  {key:13s} {quantiles([r[key] for r in rows])}")
    uss = statistics.median(f["uss_mib"] for f in facts)
    modules = statistics.median(f["modules"] for f in facts)
    litellm, openai = sum(f["litellm"] for f in facts), sum(f["openai"] for f in facts)
    print(f"  USS {uss:.1f} MiB, modules {modules:.0f}, litellm loaded in {litellm}, openai in {openai}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wakes", type=int, default=12)
    parser.add_argument("--pace", type=float, default=1.5)
    parser.add_argument("--hook", action="store_true", help="import think_actors.runtime in every worker at its start")
    parser.add_argument("--system-config", default="{}")
    parser.add_argument("--warm", type=int, default=0, help="keep this many warm idle workers (think_actors._warm)")
    parser.add_argument("--skip-bare", action="store_true")
    parser.add_argument("--ta-init", action="store_true", help="let ta.init start Ray (its runtime env and hook)")
    parser.add_argument("--no-env", action="store_true", help="pass the workers' variables without a runtime env")
    parser.add_argument("--skip-agents", action="store_true")
    parser.add_argument(
        "--task-warm", type=int, default=0, help="before each start, run this many no-op tasks (idle task workers)"
    )
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    paths = import_paths()
    with tempfile.TemporaryDirectory() as data_dir:
        env = {
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "THINK_ACTORS_DATA_DIR": data_dir,
        }
        runtime_env: dict[str, Any] | None = {"env_vars": env}
        if args.no_env:
            # The raylet of a local Ray inherits the driver's environment, and its workers the raylet's: the same
            # variables without a job runtime env, whose hash a pre-started worker (started with none) must match.
            os.environ.update(env)
            runtime_env = None
        if args.hook:
            runtime_env = runtime_env or {}
            runtime_env["worker_process_setup_hook"] = "probe_facts.setup_hook"
        began = time.perf_counter()
        namespace = f"probe-{time.time_ns()}"
        if args.ta_init:
            ta.init(num_cpus=2, data_dir=data_dir, namespace=namespace, warm_workers=args.warm)
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env=runtime_env,
            _system_config=json.loads(args.system_config) or None,
            ignore_reinit_error=True,
        )
        if not args.ta_init:
            ta.init(data_dir=data_dir, namespace=namespace, warm_workers=args.warm)
        print(f"ray.init {time.perf_counter() - began:.1f} s", flush=True)
        if args.warm:
            print(f"warm pool booted in {await wait_for_pool(namespace, args.warm):.1f} s", flush=True)
        await asyncio.sleep(5)
        idle = idle_workers()
        print(f"idle workers 5 s after init: {len(idle)}, USS {sorted(round(v, 1) for v in idle.values())} MiB")
        try:
            rows, facts = [], []
            for i in range(0 if args.skip_agents else args.wakes):
                if args.task_warm:
                    await warm_by_tasks(args.task_warm)
                row, fact = await wake_agent(i)
                rows.append(row)
                facts.append(fact)
                await asyncio.sleep(args.pace)
            if rows:
                report("agents (provision, then chat: a wake)", rows, facts, set(idle))
            if not args.skip_bare:
                options = {"num_cpus": 0, "memory": 1, "scheduling_strategy": "SPREAD", "max_concurrency": 1000}
                idle = idle_workers()
                rows, facts = [], []
                for _ in range(args.wakes):
                    if args.task_warm:
                        await warm_by_tasks(args.task_warm)
                    row, fact = await start_bare(options)
                    rows.append(row)
                    facts.append(fact)
                    await asyncio.sleep(args.pace)
                report("bare actors (the agents' options, nothing of think_actors)", rows, facts, set(idle))
            print(f"idle workers at the end: {len(idle_workers())}; load average {os.getloadavg()[0]:.1f}")
        finally:
            ta.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
