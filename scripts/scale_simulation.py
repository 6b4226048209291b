"""A control-plane simulation: agents hibernated and woken at a set rate on a cluster of several Ray nodes on this
machine, to check how the scale model's per-operation counts (docs/scaling.md) and the wakes' latency grow with the
number of nodes and of agents.

    python scripts/scale_simulation.py --quick                 # a head and 1 worker, 100 agents, 5 wakes/s
    python scripts/scale_simulation.py --json sim.json         # 1, 2 and 4 workers x 100 and 1,000 agents x 5 and
                                                               # 20 wakes/s, then scheduled prompts on each cluster

Each cluster is a ``ray.cluster_utils.Cluster``: a head and K worker nodes, each a raylet of its own with one CPU,
everything on 127.0.0.1 (as tests/multinode/scenario.py starts one). The nodes share this machine's cores, so the
absolute latencies say little; how the counts and latencies change from one configuration to the next is the point.

- Agents: ``SimAgent``, ``hosting = "shared"`` (a wake loads the agent into one of the cluster's shared hosts, one
  per node, instead of starting a process), a model that answers 20 tokens at once, SQLite stores under a temporary
  directory (the nodes share the machine's disk, so every node reaches every file).
- For each number of agents N, N agents are provisioned (``ta.provision``: addressable, never started), then wakes
  are sent at R a second for the set duration, open loop, round robin over the agents in a shuffled order. A wake
  is what a new caller does: ``ta.get`` (the agent is found hibernated and loaded into its host), a turn through
  ``handle.chat`` read to its end, then ``handle.kill(restart=False)``, which lets the agent go from its host (its
  hibernation). A wake whose agent is still busy with its last one is skipped (and counted).
- Then, on the same cluster, ``--schedules`` agents of ``SimScheduled`` (shared, ``idle_timeout_s = 1``, a prompt
  every ``--schedule-period`` seconds) fire through the cluster's scheduler (``ta.start_scheduler``) for the set
  duration: every fire wakes a hibernated agent, and the agent hibernates itself a second after its turn.

Counts come from scripts/scale_counting.py's wrappers, installed in every process of the cluster (the driver sets
``$SCALE_COUNTS_DIR`` before the nodes start; their workers inherit it and install the counters when they import
this module to unpickle an agent's class): registry calls and their GCS key-value reads and writes, ``ray.get_actor``
lookups, actor creations and actor calls, store calls (the agents' stores are wrapped). A window's counts are the
difference between two settled reads of every process's counts; a few warm-up wakes run before each window, so the
counters are installed everywhere. Latency is from the ``ta.get`` call to the turn's first chunk (wake to first
chunk) and to the turn's end; throughput is the wakes completed per second of the window.

The cluster is shut down in a ``finally``; every process of the run carries ``THINK_ACTORS_SCALE_SIM_RUN`` in its
environment, and those still alive 30 s after the shutdown are killed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Ray replaces a loopback address by the machine's own unless told the machine is no cluster host (read at import).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# A raylet waits this long for its node's agent processes to boot; with several nodes booting on a busy machine the
# default (30 s) is not always enough.
os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
# The nodes' raylets start their workers with this process's environment: they import the agents' classes from here.
os.environ["PYTHONPATH"] = os.pathsep.join(
    dict.fromkeys([str(HERE), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
)
sys.path[:0] = [str(HERE), str(ROOT)]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

import scale_counting as sc  # noqa: E402
from scale_model import summarize  # noqa: E402

import think_actors as ta  # noqa: E402

MARKER = "THINK_ACTORS_SCALE_SIM_RUN"
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}
HEAD = {**NODE, "include_dashboard": False, "no_monitor": True}
WORKER = {**NODE, "include_log_monitor": False}
WARM_UP_WAKES = 6
SCHEDULE_PERIOD_S = 10.0  # SimScheduled's


class SimAgent(sc.CountedAgent):
    """A counted agent (its store wrapped, a steady instant model) in the cluster's shared hosts."""

    hosting = "shared"


class SimScheduled(sc.CountedAgent):
    """A shared counted agent with a prompt every 10 s, hibernating a second after its last work."""

    hosting = "shared"
    idle_timeout_s = 1.0
    schedules = [ta.every("every 10 seconds", "tick")]


# -- counting ---------------------------------------------------------------------------------------------------


async def settle(directory: str, limit_s: float = 15.0) -> Counter[str]:
    """Every process's counts once they stop moving (a turn's last writes may land after its stream ended)."""
    last = sc.read_all(directory)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = sc.read_all(directory)
        if now == last:
            break
        last = now
    return last


def delta(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in sorted(after) if after[k] - before[k] and not k.startswith("agent_built")}


def per_operation(counts: dict[str, int], operations: int) -> dict[str, float]:
    """The window's counts per operation: scale_model's summary, plus registry calls by function."""
    if not operations:
        return {}
    figures: dict[str, float] = dict(summarize(counts))
    figures["actor_creates"] = sum(v for k, v in counts.items() if k.startswith("actor_create:"))
    figures["gcs_requests"] = sum(
        figures[k] for k in ("registry_reads", "registry_writes", "named_actor_lookups", "actor_creates")
    )
    figures = {k: v / operations for k, v in figures.items()}
    for key, value in counts.items():
        if key.startswith(("registry:", "actor_call:", "actor_create:")):
            figures[key] = value / operations
    return {k: round(v, 2) for k, v in figures.items()}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the drive ----------------------------------------------------------------------------------------------------


async def wake(name: str) -> tuple[float, float]:
    """One wake of a hibernated agent as a new caller sends it: ``ta.get``, a turn, then its hibernation. Returns
    the seconds to the first chunk and to the turn's end."""
    began = time.perf_counter()
    handle = await ta.get(SimAgent, name)
    first: float | None = None
    async for _chunk in handle.chat("hello"):
        if first is None:
            first = time.perf_counter() - began
    ended = time.perf_counter() - began
    await handle.kill(restart=False)
    return first if first is not None else ended, ended


async def drive(names: list[str], rate: float, duration_s: float, started: set[str]) -> dict[str, Any]:
    """Wakes at ``rate`` a second for ``duration_s``, open loop, round robin over ``names`` (``started``: the
    agents that ran before, so the others' wakes are their first start, a new SQLite file)."""
    busy: set[str] = set()
    first_starts = 0
    firsts: list[float] = []
    turns: list[float] = []
    errors: Counter[str] = Counter()
    skipped = 0

    async def one(name: str) -> None:
        busy.add(name)
        try:
            first, ended = await wake(name)
            firsts.append(first)
            turns.append(ended)
        except Exception as err:
            errors[type(err).__name__] += 1
        finally:
            busy.discard(name)

    tasks = []
    began = time.monotonic()
    for k in range(round(rate * duration_s)):
        await asyncio.sleep(max(0.0, began + k / rate - time.monotonic()))
        name = names[k % len(names)]
        if name in busy:
            skipped += 1
            continue
        if name not in started:
            started.add(name)
            first_starts += 1
        tasks.append(asyncio.create_task(one(name)))
    sent_s = time.monotonic() - began
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - began
    return {
        "sent": len(tasks),
        "completed": len(firsts),
        "skipped_busy": skipped,
        "first_starts": first_starts,
        "errors": dict(errors),
        "send_seconds": round(sent_s, 2),
        "seconds": round(elapsed, 2),
        "throughput_per_s": round(len(firsts) / elapsed, 2) if elapsed else 0.0,
        "first_chunk_ms": {
            "p50": _ms(percentile(firsts, 0.5)),
            "p99": _ms(percentile(firsts, 0.99)),
            "max": _ms(max(firsts, default=None)),
        },
        "turn_end_ms": {"p50": _ms(percentile(turns, 0.5)), "p99": _ms(percentile(turns, 0.99))},
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


async def run_wakes(counts_dir: str, agents: int, rate: float, duration_s: float, tag: str) -> dict[str, Any]:
    """Provision ``agents`` agents, warm the counters up, then drive wakes at ``rate`` and count the window."""
    names = [f"{tag}-{i}" for i in range(agents)]
    began = time.monotonic()
    for name in names:
        ta.provision(SimAgent, name)
    provision_s = time.monotonic() - began
    random.Random(agents * 1000 + int(rate)).shuffle(names)
    for name in names[-WARM_UP_WAKES:]:  # the counters get installed in every host; these are not counted
        await wake(name)
    before = await settle(counts_dir)
    result = await drive(names, rate, duration_s, set(names[-WARM_UP_WAKES:]))
    counts = delta(before, await settle(counts_dir))
    result.update(
        agents=agents,
        rate=rate,
        provision_s=round(provision_s, 2),
        counts=counts,
        per_wake=per_operation(counts, result["completed"]),
    )
    return result


async def run_schedules(counts_dir: str, schedules: int, duration_s: float) -> dict[str, Any]:
    """``schedules`` hibernating agents firing every ``SimScheduled``'s period through the cluster's scheduler."""
    scheduler = await ta.start_scheduler(poll_s=1.0, runners=0)  # shared agents never go to burst runners
    # An agent's occurrences are its provisioning time + k x 10 s: provisioned evenly over 10 s, the agents fire at
    # a steady rate, not in one burst every 10 s.
    began = time.monotonic()
    for i in range(schedules):
        await asyncio.sleep(max(0.0, began + i * SCHEDULE_PERIOD_S / schedules - time.monotonic()))
        ta.provision(SimScheduled, f"s-{i}")
    await asyncio.sleep(2.0)  # the first occurrences have begun
    before = await settle(counts_dir, limit_s=1.0)
    delivered_before = (await scheduler.status.remote())["delivered"]
    began = time.monotonic()
    await asyncio.sleep(duration_s)
    delivered = (await scheduler.status.remote())["delivered"] - delivered_before
    elapsed = time.monotonic() - began
    counts = delta(before, sc.read_all(counts_dir))  # fires go on: the window's edges cut a few of them
    counts.pop("actor_call:status", None)  # this driver's own calls
    return {
        "schedules": schedules,
        "expected_fires_per_s": round(schedules / SCHEDULE_PERIOD_S, 2),
        "fires": delivered,
        "fires_per_s": round(delivered / elapsed, 2),
        "counts": counts,
        "per_fire": per_operation(counts, delivered),
    }


# -- the cluster --------------------------------------------------------------------------------------------------


def marked_processes(run: str) -> list[int]:
    """Processes (other than this one) whose environment carries ``MARKER=run``: the nodes and their workers."""
    needle = f"{MARKER}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def reap(run: str, grace_s: float = 30.0) -> list[int]:
    """Wait for the run's processes to exit, then kill the rest; returns the ones that had to be killed."""
    deadline = time.monotonic() + grace_s
    while (left := marked_processes(run)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


async def configurations(nodes: int, args: argparse.Namespace, counts_dir: str, result: dict[str, Any]) -> None:
    """Every wake configuration, then the schedules, on one cluster (one event loop: handles' channels live on it)."""
    for agents in args.agents:
        for rate in args.rates:
            tag = f"n{agents}-r{rate:g}"
            row = await run_wakes(counts_dir, agents, rate, args.duration, tag)
            row["nodes"] = nodes
            result["wakes"].append(row)
            print(f"[{nodes} nodes] {tag}: {brief(row)}", file=sys.stderr, flush=True)
    if args.schedules:
        result["schedules"] = {**await run_schedules(counts_dir, args.schedules, args.duration), "nodes": nodes}
        s = result["schedules"]
        print(
            f"[{nodes} nodes] schedules: {s['fires']} fires, {s['fires_per_s']}/s, per fire {s['per_fire']}",
            file=sys.stderr,
            flush=True,
        )


def on_cluster(workers: int, args: argparse.Namespace, counts_dir: str, run: str) -> dict[str, Any]:
    """Every wake configuration, then the schedules, on a head and ``workers`` worker nodes."""
    from ray.cluster_utils import Cluster

    from think_actors.runtime import handles

    data_dir = tempfile.mkdtemp(prefix="scale-sim-")
    result: dict[str, Any] = {"nodes": workers + 1, "workers": workers, "wakes": [], "schedules": None}
    began = time.monotonic()
    handles._hosts_started.clear()  # provision starts each host once per process: these are a new cluster's
    cluster: Any = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args=HEAD)
        for _ in range(workers):
            cluster.add_node(**WORKER)
        cluster.wait_for_nodes()
        ta.init(address=cluster.address, data_dir=data_dir, warm_workers=0, quiet=True)
        result["start_seconds"] = round(time.monotonic() - began, 1)
        print(f"[{workers + 1} nodes] up in {result['start_seconds']} s", file=sys.stderr, flush=True)
        asyncio.run(configurations(workers + 1, args, counts_dir, result))
        records = ta.list_agents().agents
        result["registry_records"] = len(records)
        # A hibernated agent's record keeps the node it last ran on: which node each shared host is on.
        hosts = {r.host: r.node_id for r in records if r.host}
        result["shared_hosts_per_node"] = sorted(Counter(hosts.values()).values(), reverse=True)
    finally:
        ta.shutdown()
        if cluster is not None:
            cluster.shutdown()
        result["left_behind"] = reap(run)
        shutil.rmtree(data_dir, ignore_errors=True)
        result["seconds"] = round(time.monotonic() - began, 1)
    return result


def brief(row: dict[str, Any]) -> str:
    w = row["per_wake"]
    return (
        f"{row['completed']} wakes, {row['throughput_per_s']}/s, first chunk p50 {row['first_chunk_ms']['p50']} ms "
        f"p99 {row['first_chunk_ms']['p99']} ms, registry {w.get('registry_reads')}/{w.get('registry_writes')}, "
        f"get_actor {w.get('named_actor_lookups')}, store calls {w.get('store_calls')}, "
        f"skipped {row['skipped_busy']}, errors {row['errors']}"
    )


# -- output -------------------------------------------------------------------------------------------------------

COLUMNS = (
    ("registry_reads", "registry reads"),
    ("registry_writes", "registry writes"),
    ("named_actor_lookups", "`get_actor`"),
    ("actor_creates", "host get-or-create"),
    ("gcs_requests", "GCS requests"),
    ("actor_calls", "actor calls"),
    ("store_calls", "store calls"),
    ("sql_statements", "SQLite statements"),
)


def table(clusters: list[dict[str, Any]]) -> str:
    head = ["nodes", "agents", "wakes/s asked", "wakes done (first starts)", "done/s", "first chunk p50 / p99 ms"]
    head += [label + " / wake" for _, label in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for c in clusters:
        for r in c["wakes"]:
            w = r["per_wake"]
            cells = [
                str(r["nodes"]),
                f"{r['agents']:,}",
                f"{r['rate']:g}",
                f"{r['completed']} ({r['first_starts']} first)"
                + (f" ({sum(r['errors'].values())} failed)" if r["errors"] else ""),
                f"{r['throughput_per_s']:g}",
                f"{r['first_chunk_ms']['p50']:.0f} / {r['first_chunk_ms']['p99']:.0f}" if r["completed"] else "—",
            ]
            cells += [f"{w.get(key, 0):g}" for key, _ in COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def schedule_table(clusters: list[dict[str, Any]]) -> str:
    head = ["nodes", "schedules", "fires/s expected", "fires/s delivered"] + [label + " / fire" for _, label in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for c in clusters:
        s = c["schedules"]
        if not s:
            continue
        f = s["per_fire"]
        cells = [str(s["nodes"]), str(s["schedules"]), f"{s['expected_fires_per_s']:g}", f"{s['fires_per_s']:g}"]
        cells += [f"{f.get(key, 0):g}" for key, _ in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="worker nodes besides the head")
    parser.add_argument("--agents", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rates", type=float, nargs="+", default=[5, 20], help="wakes a second")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of wakes per configuration")
    parser.add_argument("--schedules", type=int, default=100, help="agents with a prompt every 10 s (0: none)")
    parser.add_argument("--quick", action="store_true", help="the smallest configuration only: 1 worker, 100 agents")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.agents, args.rates, args.duration, args.schedules = [1], [100], [5.0], 10.0, 20
    import scale_simulation  # the agents' classes by module name, so the workers import them (not __main__'s)

    globals().update(SimAgent=scale_simulation.SimAgent, SimScheduled=scale_simulation.SimScheduled)
    run = uuid.uuid4().hex
    os.environ[MARKER] = run  # before any node starts: every process of the run inherits it
    counts_dir = tempfile.mkdtemp(prefix="scale-sim-counts-")
    os.environ[sc.COUNTS_ENV] = counts_dir
    sc.install_process_counters()
    started = time.monotonic()
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count()}
    result["settings"] = {k: v for k, v in vars(args).items() if k != "json"}
    clusters: list[dict[str, Any]] = []
    try:
        for workers in args.workers:
            clusters.append(on_cluster(workers, args, counts_dir, run))
    finally:
        shutil.rmtree(counts_dir, ignore_errors=True)
        result["clusters"] = clusters
        result["seconds"] = round(time.monotonic() - started, 1)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
    print(table(clusters))
    if any(c["schedules"] for c in clusters):
        print()
        print(schedule_table(clusters))
    for c in clusters:
        print(f"{c['nodes']} nodes: shared hosts per node {c.get('shared_hosts_per_node')}, {c['seconds']} s")
    left = [pid for c in clusters for pid in c["left_behind"]]
    print(f"\n{result['seconds']} s in all; processes killed after the shutdowns: {left or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
