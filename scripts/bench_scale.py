"""Scale benchmarks (issue 9), measured side by side in one run on local Ray.

(a) Start rate: ``--start`` bare Ray actors (``num_cpus=0``, nothing imported) and as many agents started at once,
    in alternating rounds; an agent has started when ``ta.spawn`` returns (its actor up, its store open, its
    history loaded). Target: agents at >= 0.8x the bare actors' rate.
(b) Throughput (issue 22): for each N of ``--agents`` (default 100,200), N resident agents x ``--turns`` turns each,
    every agent's turns one after another and all agents at once, with a model that waits 200 ms per step as a
    provider would (then 20 chunks), side by side with N bare async Ray actors answering a streamed call of the
    same shape (200 ms, then the 20 chunks in one batch; all bare runs first, then all agent runs, one population on
    the node at a time): turns/s and p99 as ratios to the bare actors' (targets
    >= 0.9x and <= 1.3x), the CPU seconds per turn of the actors' processes, the driver and Ray's raylet + GCS, and
    the unique memory (USS) of a resident agent's process against a bare actor's (target within 5 MiB).
(c) Scale: ``--addressable`` agents provisioned (addressable, never started), then ``--wakes`` of them, picked at
    random, woken by a chat at a fixed pace slower than the node starts actors; each hibernates 2 s after its
    turn. Wake latency (the call to the first chunk) p50/p99 (targets 300 / 600 ms) and the most agents resident
    at once (a few at most; every other agent lives only in its store). ``--wake-ab`` runs it twice in one Ray,
    first with no warm worker processes (``ta.init(warm_workers=0)``, as (a) and (b) then run too), then with the
    default one per node. ``--warm N``: then ``--wakes`` more woken in a burst (one per ``--burst-gap``, 20 ms),
    twice in the same Ray: with no warm processes, then with a pool of N per node (``ta.init(warm_workers=N)``,
    once the pool reports N booted): p50/p99 of each, and which wakes took a warm process (by pid); the wakes past
    the pool's size are cold starts, reported apart.
(d) ``--cluster``: (b) on a cluster of three Ray nodes on this machine (``ray.cluster_utils.Cluster``: a head and
    two workers, their Ray CPUs adding up to the machine's cores; the driver attached to the head), the agents'
    stores in a throwaway PostgreSQL 15 server (tests/postgres_server.py) as a cluster's must be: N bare actors
    and then N agents spread over the nodes (SPREAD, as ``ta.spawn`` places agents), each N of ``--agents``
    (default 100) x ``--turns``. Turns/s, p50/p99, each node's actors, share of the rate and p50, turns/s per core
    (the nodes share this machine's cores, so more nodes cannot mean more throughput), and CPU per turn, side by
    side with the bare actors. The cluster and the PostgreSQL server are shut down at the end, whatever happens.

``--shared`` adds, to (b), as many agents again of a class with ``hosting = "shared"`` (the cluster's shared host
actors hold them, many to a process: ``think_actors/runtime/shared.py``), and to (c), ``--addressable`` more such
agents provisioned and ``--wakes`` of them woken at ``--pace``, then ``--wakes`` more in a burst (one per 20 ms),
beside a burst of as many wakes of (c)'s own agents, an actor each; with ``--cluster``, (d) runs them too.

The last lines are the issue's rows side by side with their targets, and the machine's 1-minute load average
(over 2 on this 2-core machine: other work shared it, and the absolute figures are slower than a quiet run's).
``--profile`` runs (b)'s agents under cProfile (their event loop's thread) and prints where their time went; its
figures are the profiler's, not the benchmark's.

Usage: python scripts/bench_scale.py [--start 16] [--agents 100,200] [--turns 5] [--addressable 10000]
       [--wakes 40] [--wake-ab] [--warm N] [--skip a,b,c] [--profile] [--held] [--shared]
       python scripts/bench_scale.py --cluster [--agents 100] [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))  # postgres_server, for --cluster
if "--cluster" in sys.argv:
    # Read by Ray at import: every node of the simulated cluster listens on 127.0.0.1 (tests/multinode/scenario.py).
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import psutil  # noqa: E402
from bench_agents import BareActor  # noqa: E402
from scale_agents import (  # noqa: E402
    PROFILE_ENV,
    PROFILE_TURNS_ENV,
    BareTurn,
    Napper,
    ProfiledWorker,
    SharedNapper,
    SharedWorker,
    Worker,
)

import think_actors as ta  # noqa: E402
from think_actors import _warm  # noqa: E402
from think_actors.runtime import _require_config, _spawn_path  # noqa: E402
from think_actors.store import agent_path  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def start_bare(n: int) -> float:
    began = time.perf_counter()
    actors = [BareActor.remote() for _ in range(n)]  # type: ignore[attr-defined]
    await asyncio.gather(*(a.pid.remote() for a in actors))
    elapsed = time.perf_counter() - began
    for actor in actors:
        ray_kill(actor)
    return n / elapsed


async def start_agents(n: int, tag: str) -> float:
    began = time.perf_counter()
    handles = await asyncio.gather(*(ta.spawn(Worker, f"start-{tag}-{i}") for i in range(n)))
    elapsed = time.perf_counter() - began
    for handle in handles:
        await handle.kill(restart=False)
    return n / elapsed


def ray_kill(actor: Any) -> None:
    import ray

    ray.kill(actor, no_restart=True)


async def bench_start(n: int, rounds: int) -> tuple[float, float]:
    bare, agents = [], []
    for r in range(rounds):
        bare.append(await start_bare(n))
        await asyncio.sleep(1)
        agents.append(await start_agents(n, f"{r}-{time.time_ns()}"))
        await asyncio.sleep(1)
    return statistics.median(bare), statistics.median(agents)


def system_pids() -> dict[str, list[int]]:
    """This driver, and the raylet and GCS server of the local Ray it started."""
    node: Any = __import__("ray")._private.worker._global_node
    found: dict[str, list[int]] = {"driver": [os.getpid()], "ray": []}
    for name in ("raylet", "gcs_server"):
        found["ray"] += [p.process.pid for p in node.all_processes.get(name, [])]
    return found


def thread_cpu(pids: list[int]) -> dict[str, float]:
    """CPU seconds of the processes' threads, summed by thread name (Linux ``/proc/<pid>/task/<tid>/stat``).

    A thread is named for the process's title when it started: an async actor's event-loop thread is
    ``ray::IDLE`` (it starts before the actor's title is set; measured with Ray 2.60), the threads started
    by the actor's calls are ``ray::<Class>``.
    """
    tick = os.sysconf("SC_CLK_TCK")
    by_name: dict[str, float] = {}
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            name = "main thread" if tid == str(pid) else name.rstrip("0123456789")
            fields = stat[stat.rindex(")") + 2 :].split()
            by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return by_name


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


async def start_in_waves(start: Any, count: int, wave: int = 20) -> list[Any]:
    """Start ``count`` actors ``wave`` at a time, so the start-up is not what is measured."""
    started: list[Any] = []
    for begin in range(0, count, wave):
        started += await asyncio.gather(*(start(i) for i in range(begin, min(count, begin + wave))))
    return started


async def bare_turn(actor: Any, message: str) -> None:
    async for ref in actor.turn.options(num_returns="streaming").remote(message):
        await ref


async def agent_turn(handle: Any, message: str) -> None:
    await handle.chat(message).collect()


async def converse_all(
    targets: list[Any], turn: Any, turns: int, pids: list[int], system: dict[str, list[int]] | None = None
) -> dict[str, Any]:
    """Every target's ``turns`` turns one after another, all targets at once: rate, latency and CPU per turn
    (``system``: the driver's and Ray's own processes, default the local Ray's); ``by_target``: each one's turns."""
    latencies: list[float] = []
    by_target: list[list[float]] = [[] for _ in targets]

    async def converse(i: int, target: Any) -> None:
        for t in range(turns):
            began = time.perf_counter()
            await turn(target, f"turn {t}")
            latencies.append(time.perf_counter() - began)
            by_target[i].append(latencies[-1])

    system = system or system_pids()
    threads_before = thread_cpu(pids)
    before = {"actors": cpu_seconds(pids), **{k: cpu_seconds(v) for k, v in system.items()}}
    began = time.perf_counter()
    await asyncio.gather(*(converse(i, t) for i, t in enumerate(targets)))
    elapsed = time.perf_counter() - began
    after = {"actors": cpu_seconds(pids), **{k: cpu_seconds(v) for k, v in system.items()}}
    threads_after = thread_cpu(pids)
    spent = {k: (v - threads_before.get(k, 0.0)) / len(latencies) * 1e3 for k, v in threads_after.items()}
    top = sorted(spent.items(), key=lambda kv: -kv[1])[:6]
    print("    actor CPU per turn by thread: " + ", ".join(f"{k} {v:.2f} ms" for k, v in top), flush=True)
    row: dict[str, Any] = {
        "by_target": by_target,
        "turns_per_s": len(latencies) / elapsed,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "turns": len(latencies),
    }
    row.update({f"cpu_ms_{k}": (after[k] - before[k]) / len(latencies) * 1e3 for k in before})
    return row


def uss_mib(pids: list[int]) -> float:
    return statistics.median(psutil.Process(pid).memory_full_info().uss / 2**20 for pid in pids)


async def bench_throughput(
    sizes: list[int], turns: int, profile: bool, held: bool = False, shared: bool = False
) -> list[dict[str, Any]]:
    """For each N of ``sizes``, the same turns through N bare actors and N agents. The largest N of each is
    started once and the smaller N run on a subset; the bare actors are gone before the agents start, so the
    node holds one population at a time (200 processes are ≈11 GiB). ``held``: then as many agents again whose
    actors hold a turn's opening chunks for its first content (``ta.init(first_chunk_at_once=False)``), keys
    ``held_*``. ``shared``: then as many agents again of a class with ``hosting = "shared"`` (many agents to each of
    the cluster's shared host processes), keys ``shared_*``; their USS per agent is their hosts' divided by the
    agents they hold."""
    most = max(sizes)
    bare = await start_in_waves(lambda i: _started_bare(), most)
    bare_pids = [await a.pid.remote() for a in bare]
    bare_rows = [await converse_all(bare[:n], bare_turn, turns, bare_pids[:n]) for n in sizes]
    sample = random.sample(range(most), min(10, most))
    bare_uss = uss_mib([bare_pids[i] for i in sample])
    for actor in bare:
        ray_kill(actor)
    await asyncio.sleep(2)
    agent_class = ProfiledWorker if profile else Worker
    handles = await start_in_waves(lambda i: ta.spawn(agent_class, f"tp-{i}"), most)
    agent_pids = [(await h.info())["pid"] for h in handles]
    rows = []
    for n, row_bare in zip(sizes, bare_rows, strict=True):
        row_agents = await converse_all(handles[:n], agent_turn, turns, agent_pids[:n])
        rows.append({"n": n, **{f"bare_{k}": v for k, v in row_bare.items()}, **row_agents})
    rows[-1]["uss_mib"] = uss_mib([agent_pids[i] for i in sample])
    rows[-1]["bare_uss_mib"] = bare_uss
    for handle in handles:
        await handle.kill(restart=False)
    if held:
        await asyncio.sleep(2)
        config = replace(_require_config(), first_chunk_at_once=False)
        spawn = lambda i: _spawn_path(agent_class, f"held-{i}", agent_path("worker", f"held-{i}"), {}, config)  # noqa: E731
        handles = await start_in_waves(spawn, most)
        agent_pids = [(await h.info())["pid"] for h in handles]
        for n, row in zip(sizes, rows, strict=True):
            row.update(
                {
                    f"held_{k}": v
                    for k, v in (await converse_all(handles[:n], agent_turn, turns, agent_pids[:n])).items()
                }
            )
        for handle in handles:
            await handle.kill(restart=False)
    if shared:
        await asyncio.sleep(2)
        handles = await start_in_waves(lambda i: ta.spawn(SharedWorker, f"shared-{i}"), most)
        infos = [await h.info() for h in handles]
        host_pids = sorted({info["pid"] for info in infos})
        for n, row in zip(sizes, rows, strict=True):
            pids = sorted({info["pid"] for info in infos[:n]})
            measured = await converse_all(handles[:n], agent_turn, turns, pids)
            row.update({f"shared_{k}": v for k, v in measured.items()})
        rows[-1]["shared_hosts"] = len(host_pids)
        rows[-1]["shared_uss_mib"] = sum(psutil.Process(pid).memory_full_info().uss / 2**20 for pid in host_pids) / len(
            handles
        )
        for handle in handles:
            await handle.kill(restart=False)
    return rows


async def _started_bare() -> Any:
    actor = BareTurn.remote()  # type: ignore[attr-defined]
    await actor.pid.remote()
    return actor


NODE_ARGS = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 * 2**20}


def cluster_cpus() -> list[int]:
    """Ray CPUs of the head and the two workers, adding up to the machine's cores (2 cores: 0, 1, 1)."""
    cores = os.cpu_count() or 2
    return [cores - 2 * (cores // 2), cores // 2, cores // 2]


def cluster_system_pids(cluster: Any, postgres: Any) -> dict[str, list[int]]:
    """This driver, every node's raylet and the head's GCS server, and the PostgreSQL server's processes (its
    postmaster and the backends of the connections open now)."""
    found: dict[str, list[int]] = {"driver": [os.getpid()], "ray": [], "postgres": []}
    for node in [cluster.head_node, *cluster.worker_nodes]:
        for name in ("raylet", "gcs_server"):
            found["ray"] += [p.process.pid for p in node.all_processes.get(name, [])]
    postmaster = int((postgres.data_dir / "postmaster.pid").read_text().split()[0])
    found["postgres"] = [postmaster, *(c.pid for c in psutil.Process(postmaster).children())]
    return found


def node_workers(cluster: Any) -> list[psutil.Process]:
    """The worker processes of every node of the cluster (its raylets' children)."""
    found = []
    for node in [cluster.head_node, *cluster.worker_nodes]:
        for raylet in node.all_processes.get("raylet", []):
            try:
                found += psutil.Process(raylet.process.pid).children()
            except psutil.NoSuchProcess:
                continue
    return found


async def _spread_bare() -> Any:
    actor = BareTurn.options(scheduling_strategy="SPREAD", memory=1).remote()  # type: ignore[attr-defined]
    await actor.pid.remote()
    return actor


async def bench_cluster(sizes: list[int], turns: int, data_dir: str, shared: bool = False) -> list[dict[str, Any]]:
    """(d): (b) on a head and two worker nodes on this machine (``ray.cluster_utils.Cluster``), the agents' stores
    in a throwaway PostgreSQL server; bare actors spread over the nodes as the agents are (SPREAD), then the
    agents. Each row also names every actor's node (``bare_nodes``, ``nodes``). ``shared``: then as many agents of
    a class with ``hosting = "shared"`` (keys ``shared_*``; ``shared_nodes`` the node of each agent's host)."""
    from postgres_server import _SETTINGS, PostgresServer
    from ray.cluster_utils import Cluster

    most = max(sizes)
    # One connection pool per agent process, one connection at least, a few while a turn writes.
    _SETTINGS["max_connections"] = str(max(200, 3 * most + 50))
    server = PostgresServer(prefix="think-actors-bench-pg-")
    cluster: Any = None
    cpus = cluster_cpus()
    try:
        server.start()
        # The nodes' raylets start their workers with this process's environment: they import the agents from here.
        os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])
        head = {**NODE_ARGS, "num_cpus": cpus[0], "include_dashboard": False}
        cluster = Cluster(initialize_head=True, head_node_args=head)
        workers = [cluster.add_node(**NODE_ARGS, num_cpus=c) for c in cpus[1:]]
        cluster.wait_for_nodes()
        namespace = f"bench-cluster-{time.time_ns()}"
        ta.init(address=cluster.address, store=server.dsn(), data_dir=data_dir, namespace=namespace, warm_workers=0)
        labels = {cluster.head_node.node_id: "head", **{w.node_id: f"w{i + 1}" for i, w in enumerate(workers)}}
        bare = await start_in_waves(lambda i: _spread_bare(), most)
        bare_pids = [await a.pid.remote() for a in bare]
        bare_nodes = [labels.get(await a.node.remote(), "?") for a in bare]
        system = cluster_system_pids(cluster, server)
        bare_rows = [await converse_all(bare[:n], bare_turn, turns, bare_pids[:n], system) for n in sizes]
        for actor in bare:
            ray_kill(actor)
        await asyncio.sleep(2)
        handles = await start_in_waves(lambda i: ta.spawn(Worker, f"cl-{i}"), most)
        infos = [await h.info() for h in handles]
        nodes = [labels.get(info["node_id"], "?") for info in infos]
        system = cluster_system_pids(cluster, server)  # the agents' connections are open now
        rows = []
        for n, row_bare in zip(sizes, bare_rows, strict=True):
            row = await converse_all(handles[:n], agent_turn, turns, [info["pid"] for info in infos[:n]], system)
            row.update({"n": n, "nodes": nodes[:n], "bare_nodes": bare_nodes[:n], "cpus": cpus})
            rows.append({**{f"bare_{k}": v for k, v in row_bare.items()}, **row})
        for handle in handles:
            await handle.kill(restart=False)
        if shared:
            await asyncio.sleep(2)
            handles = await start_in_waves(lambda i: ta.spawn(SharedWorker, f"cl-{i}"), most)
            infos = [await h.info() for h in handles]
            system = cluster_system_pids(cluster, server)
            for n, row in zip(sizes, rows, strict=True):
                pids = sorted({info["pid"] for info in infos[:n]})
                measured = await converse_all(handles[:n], agent_turn, turns, pids, system)
                row.update({f"shared_{k}": v for k, v in measured.items()})
                row["shared_nodes"] = [labels.get(info["node_id"], "?") for info in infos[:n]]
            for handle in handles:
                await handle.kill(restart=False)
        return rows
    finally:
        from think_actors.store.postgres import close_pools

        await close_pools()  # this process's own, before its server goes
        ta.shutdown()  # it closes the class-schedule writer's pool too (its own thread and loop)
        if cluster is not None:
            left = node_workers(cluster)
            cluster.shutdown()
            # Workers notice their raylet's end within seconds; the store's server goes once they have.
            _, alive = psutil.wait_procs(left, timeout=30)
            for process in alive:
                process.kill()
        server.stop()


def by_node(nodes: list[str], by_target: list[list[float]], turns_per_s: float) -> str:
    """Each node's actors, its share of the turn rate and its turns' p50."""
    total = sum(len(t) for t in by_target)
    parts = []
    for label in sorted(set(nodes)):
        mine = [x for node, t in zip(nodes, by_target, strict=True) if node == label for x in t]
        rate = turns_per_s * len(mine) / total
        parts.append(f"{label} {nodes.count(label)} ({rate:.1f} turns/s, p50 {percentile(mine, 50) * 1e3:.0f} ms)")
    return ", ".join(parts)


def cpu_line(row: dict[str, Any], prefix: str) -> str:
    parts = ("actors", "driver", "ray", "postgres")
    return " + ".join(f"{row[f'{prefix}cpu_ms_{k}']:.1f}" for k in parts) + " ms"


def cluster_summary(row: dict[str, Any], turns: int) -> list[tuple[str, str, str]]:
    """(d)'s printed line and its rows of the summary table."""
    cores = os.cpu_count() or 2
    n, rate, p99 = row["n"], row["turns_per_s"] / row["bare_turns_per_s"], row["p99"] / row["bare_p99"]
    nodes = "+".join(str(c) for c in row["cpus"])
    print(
        f"(d) cluster, head + 2 workers (Ray CPUs {nodes} = {cores} cores), PostgreSQL store, {n} x {turns} turns at "
        f"once: bare actors {row['bare_turns_per_s']:.1f} turns/s, p50 {row['bare_p50'] * 1e3:.0f} ms, "
        f"p99 {row['bare_p99'] * 1e3:.0f} ms; agents {row['turns_per_s']:.1f} turns/s, p50 {row['p50'] * 1e3:.0f} "
        f"ms, p99 {row['p99'] * 1e3:.0f} ms [load {load()}]\n"
        f"    CPU per turn, actors + driver + raylets/GCS + PostgreSQL: bare {cpu_line(row, 'bare_')}; agents "
        f"{cpu_line(row, '')}\n"
        f"    bare actors by node: {by_node(row['bare_nodes'], row['bare_by_target'], row['bare_turns_per_s'])}\n"
        f"    agents by node: {by_node(row['nodes'], row['by_target'], row['turns_per_s'])}",
        flush=True,
    )
    cpu = row["cpu_ms_actors"] + row["cpu_ms_driver"] + row["cpu_ms_ray"]
    bare_cpu = row["bare_cpu_ms_actors"] + row["bare_cpu_ms_driver"] + row["bare_cpu_ms_ray"]
    pg = f"{row['cpu_ms_postgres']:.1f} vs {row['bare_cpu_ms_postgres']:.1f}"
    per_node = ", ".join(
        f"{label} {row['nodes'].count(label)} ({row['bare_nodes'].count(label)})"
        for label in sorted(set(row["nodes"]) | set(row["bare_nodes"]))
    )
    measured = {
        "turns/s, agents vs bare actors": f"{row['turns_per_s']:.1f} vs {row['bare_turns_per_s']:.1f}, {rate:.2f}x",
        f"turns/s per core ({cores} cores)": f"{row['turns_per_s'] / cores:.1f} vs "
        f"{row['bare_turns_per_s'] / cores:.1f}",
        "turn p50 / p99, agents vs bare actors": f"{row['p50'] * 1e3:.0f} / {row['p99'] * 1e3:.0f} vs "
        f"{row['bare_p50'] * 1e3:.0f} / {row['bare_p99'] * 1e3:.0f} ms, p99 {p99:.2f}x",
        "agents (bare actors) per node": per_node,
        "CPU per turn (actors + driver + raylets/GCS; PostgreSQL beside it)": f"{cpu:.1f} vs {bare_cpu:.1f} ms, "
        f"{cpu / bare_cpu:.2f}x; PostgreSQL {pg} ms",
    }
    if "shared_turns_per_s" in row:
        print(
            f'    agents with hosting = "shared": {row["shared_turns_per_s"]:.1f} turns/s, p50 '
            f"{row['shared_p50'] * 1e3:.0f} ms, p99 {row['shared_p99'] * 1e3:.0f} ms; CPU per turn "
            f"{cpu_line(row, 'shared_')}; by node (of its host): "
            f"{by_node(row['shared_nodes'], row['shared_by_target'], row['shared_turns_per_s'])}",
            flush=True,
        )
        shared_cpu = row["shared_cpu_ms_actors"] + row["shared_cpu_ms_driver"] + row["shared_cpu_ms_ray"]
        measured['hosting = "shared": turns/s, per core, p99, CPU per turn vs bare actors'] = (
            f"{row['shared_turns_per_s']:.1f} turns/s, {row['shared_turns_per_s'] / row['bare_turns_per_s']:.2f}x; "
            f"{row['shared_turns_per_s'] / cores:.1f} per core; p99 {row['shared_p99'] / row['bare_p99']:.2f}x; "
            f"CPU {shared_cpu / bare_cpu:.2f}x; PostgreSQL {row['shared_cpu_ms_postgres']:.1f} ms"
        )
    return [(f"(d) 3-node cluster, N = {n}: {what}", figure, "(reported)") for what, figure in measured.items()]


def print_profile(directory: str, top: int = 30) -> None:
    files = [os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".prof")]
    if not files:
        print("(no profile was written)", flush=True)
        return
    stats = pstats.Stats(*files)
    print(f"profile of {len(files)} agent processes (their event loop's thread), by own time:", flush=True)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    # Who pays the hot spots seen on 2026-12-01: lazy pydantic builds, hand-offs to threads, metrics, SQLite.
    stats.sort_stats("tottime").print_callers(r"model_rebuild|SimpleQueue|thread.py.*submit|metrics.py.*_record")
    stats.print_callers(r"method 'execute' of 'sqlite3")


def provision(addressable: int, agent_class: type[ta.Think] = Napper) -> tuple[list[Any], float]:
    began = time.perf_counter()
    handles = [ta.provision(agent_class, f"scale-{i}") for i in range(addressable)]
    return handles, time.perf_counter() - began


async def bench_wakes(picked: list[Any], pace_s: float) -> dict[str, float]:
    """Wake each of ``picked`` (all hibernating or never started) by a chat, one every ``pace_s``."""
    latencies: list[float] = []
    most_resident = 0

    async def wake(handle: Any) -> None:
        began = time.perf_counter()
        stream = handle.chat("wake up")
        await stream.__anext__()
        latency = time.perf_counter() - began
        latencies.append(latency)
        async for _ in stream:
            pass
        if os.environ.get("BENCH_SCALE_VERBOSE"):
            print(f"    wake {latency * 1e3:.0f} ms, pid {(await handle.info())['pid']}", flush=True)

    tasks = []
    for handle in picked:
        tasks.append(asyncio.ensure_future(wake(handle)))
        await asyncio.sleep(pace_s)
        # In a thread: listing 10,000 records takes the driver seconds, which would hold up the wakes' streams.
        resident = await asyncio.to_thread(lambda: ta.list_agents().resident)
        most_resident = max(most_resident, resident)
    await asyncio.gather(*tasks)
    return {
        "addressable": ta.list_agents().addressable,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "most_resident": most_resident,
    }


async def burst(picked: list[Any], gap_s: float, warm: set[int]) -> dict[str, Any]:
    """Wake each of ``picked`` by a chat, one every ``gap_s``: each wake's latency (call to first chunk) and
    whether its agent's process was one of ``warm`` (the pool's booted processes before the burst)."""
    latencies: list[float] = []
    on_warm: list[bool] = []

    async def wake(handle: Any) -> None:
        began = time.perf_counter()
        stream = handle.chat("wake up")
        await stream.__anext__()
        latency = time.perf_counter() - began
        async for _ in stream:
            pass
        # After the turn (the agent hibernates 2 s later): its process, to tell a warm wake from a cold one.
        pid = (await handle.info())["pid"]
        latencies.append(latency)
        on_warm.append(pid in warm)

    tasks = []
    for handle in picked:
        tasks.append(asyncio.ensure_future(wake(handle)))
        await asyncio.sleep(gap_s)
    await asyncio.gather(*tasks)
    cold = [t for t, w in zip(latencies, on_warm, strict=True) if not w]
    warm_p99 = percentile([t for t, w in zip(latencies, on_warm, strict=True) if w] or [0.0], 99)
    return {
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "warm": sum(on_warm),
        "warm_p99": warm_p99,
        "cold": cold,
    }


async def wait_for_pool(namespace: str, size: int, within_s: float = 600.0) -> tuple[float, dict[str, Any]]:
    """Wait until this node's warm pool reports ``size`` booted processes: seconds waited, and its status."""
    began = time.perf_counter()
    while time.perf_counter() - began < within_s:
        statuses = await _warm.pool_statuses(namespace)
        if statuses and len(statuses[0]["ready"]) >= min(size, statuses[0]["cap"] or size):
            return time.perf_counter() - began, statuses[0]
        await asyncio.sleep(1)
    raise TimeoutError(f"the warm pool did not boot {size} processes in {within_s:.0f} s")


async def bench_burst_ab(
    init: dict[str, Any], handles: list[Any], wakes: int, gap_s: float, size: int, share: float
) -> list[tuple[str, str, str]]:
    """(c)'s burst, with no warm processes and then with a pool of ``size``: its lines and summary rows. The burst
    wakes hibernated agents (started once before, their stores written), as a real burst of returning users does."""
    picked = random.sample(handles, 2 * wakes)
    began = time.perf_counter()
    for first in range(0, len(picked), 8):  # eight at a time, not to measure the priming itself
        await asyncio.gather(*(h.chat("hello").collect() for h in picked[first : first + 8]))
    print(f"(c) {len(picked)} agents started once for the burst in {time.perf_counter() - began:.0f} s", flush=True)
    rows = []
    for label, pool in (("no warm pool", 0), (f"a pool of {size}", size)):
        ta.init(**init, warm_workers=pool, warm_memory_share=share)  # the same Ray; its pools follow
        status: dict[str, Any] = {"ready": []}
        filled = ""
        if pool:
            fill_s, status = await wait_for_pool(init["namespace"], pool)
            filled = f", booted in {fill_s:.0f} s, {status['process_mib']:.1f} MiB each"
        await asyncio.sleep(10)  # what was woken last has hibernated (2 s after its turn); the pool's last boot is over
        load_before = load()
        sc = await burst(picked[:wakes], gap_s, set(status["ready"]))
        picked = picked[wakes:]
        cold = sc["cold"]
        past = (
            f" (their p99 {sc['warm_p99'] * 1e3:.0f} ms); {len(cold)} cold (no warm process left): "
            f"p50 {percentile(cold, 50) * 1e3:.0f} ms, max {max(cold) * 1e3:.0f} ms"
            if cold and pool
            else ""
        )
        print(
            f"(c) a burst of {wakes} wakes, one per {gap_s * 1e3:.0f} ms, {label}{filled}: wake to first chunk "
            f"p50 {sc['p50'] * 1e3:.0f} ms, p99 {sc['p99'] * 1e3:.0f} ms, {sc['warm']} on a warm process{past} "
            f"[load {load_before} -> {load()}]",
            flush=True,
        )
        rows.append(
            (
                f"(c) a burst of {wakes} wakes, {label}",
                f"p50 {sc['p50'] * 1e3:.0f} ms, p99 {sc['p99'] * 1e3:.0f} ms ({sc['warm']} warm){past}",
                f"p99 <= 1000: {verdict(sc['p99'] <= 1.0)}" if pool else "(reported)",
            )
        )
    return rows


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", default=None, help="the N of (b) or (d), comma-separated (100,200; 100)")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--addressable", type=int, default=10_000)
    parser.add_argument("--wakes", type=int, default=40)
    parser.add_argument("--pace", type=float, default=1.0, help="seconds between wakes")
    parser.add_argument("--wake-ab", action="store_true", help="(c) without warm workers first, then with them")
    parser.add_argument(
        "--warm", type=int, default=0, help="(c) also a burst of --wakes, with no pool, then a pool of N"
    )
    parser.add_argument("--burst-gap", type=float, default=0.02, help="seconds between the burst's wakes")
    parser.add_argument("--warm-memory-share", type=float, default=0.2, help="ta.init's warm_memory_share for --warm")
    parser.add_argument("--skip", default="", help="parts to leave out, e.g. a,c")
    parser.add_argument("--profile", action="store_true", help="profile (b)'s agents (cProfile; slows them)")
    parser.add_argument("--held", action="store_true", help="(b) also with ta.init(first_chunk_at_once=False)")
    parser.add_argument(
        "--shared", action="store_true", help='(b) and (c) also with agents of a class with hosting = "shared"'
    )
    parser.add_argument("--cluster", action="store_true", help="only (d): (b) on a 3-node cluster, PostgreSQL store")
    args = parser.parse_args()
    skip = set(args.skip.split(",")) - {""}
    sizes = [int(n) for n in (args.agents or ("100" if args.cluster else "100,200")).split(",")]
    summary: list[tuple[str, str, str]] = []
    print(f"1-minute load average at the start: {load()} ({os.cpu_count()} cores)", flush=True)
    if args.cluster:
        with tempfile.TemporaryDirectory() as data_dir:
            for row in await bench_cluster(sizes, args.turns, data_dir, args.shared):
                summary += cluster_summary(row, args.turns)
        print_summary(summary)
        return
    with tempfile.TemporaryDirectory() as data_dir, tempfile.TemporaryDirectory() as profile_dir:
        if args.profile:
            os.environ[PROFILE_ENV] = profile_dir  # a local raylet and its workers inherit the driver's environment
            os.environ[PROFILE_TURNS_ENV] = str(args.turns * len(sizes))
        init = {"num_cpus": 2, "data_dir": data_dir, "namespace": f"bench-scale-{time.time_ns()}"}
        ta.init(**init, warm_workers=0 if args.wake_ab else 1)
        try:
            if "a" not in skip:
                bare_rate, agent_rate = await bench_start(args.start, args.rounds)
                print(
                    f"(a) start rate, {args.start} at once, median of {args.rounds} rounds: bare Ray actors "
                    f"{bare_rate:.2f}/s, agents {agent_rate:.2f}/s, ratio {agent_rate / bare_rate:.2f} "
                    f"(target >= 0.8) [load {load()}]",
                    flush=True,
                )
                summary.append(
                    (
                        f"(a) start rate, {args.start} at once: agents vs bare actors",
                        f"{agent_rate:.2f} vs {bare_rate:.2f}/s, {agent_rate / bare_rate:.2f}x",
                        f">= 0.8x: {verdict(agent_rate / bare_rate >= 0.8)}",
                    )
                )
            if "b" not in skip:
                for row in await bench_throughput(sizes, args.turns, args.profile, args.held, args.shared):
                    n, rate, p99 = row["n"], row["turns_per_s"] / row["bare_turns_per_s"], row["p99"] / row["bare_p99"]
                    print(
                        f"(b) {n:.0f} x {args.turns} turns at once, 200 ms per step: bare actors "
                        f"{row['bare_turns_per_s']:.1f} turns/s, p50 {row['bare_p50'] * 1e3:.0f} ms, "
                        f"p99 {row['bare_p99'] * 1e3:.0f} ms, CPU/turn actors {row['bare_cpu_ms_actors']:.1f} + "
                        f"driver {row['bare_cpu_ms_driver']:.1f} + raylet/GCS {row['bare_cpu_ms_ray']:.1f} ms; agents "
                        f"{row['turns_per_s']:.1f} turns/s, p50 {row['p50'] * 1e3:.0f} ms, "
                        f"p99 {row['p99'] * 1e3:.0f} ms, CPU/turn actors {row['cpu_ms_actors']:.1f} + "
                        f"driver {row['cpu_ms_driver']:.1f} + raylet/GCS "
                        f"{row['cpu_ms_ray']:.1f} ms [load {load()}]",
                        flush=True,
                    )
                    summary.append(
                        (
                            f"(b) N = {n:.0f}: turns/s, agents vs bare actors",
                            f"{row['turns_per_s']:.1f} vs {row['bare_turns_per_s']:.1f}, {rate:.2f}x",
                            f">= 0.9x: {verdict(rate >= 0.9)}",
                        )
                    )
                    summary.append(
                        (
                            f"(b) N = {n:.0f}: turn p99, agents vs bare actors",
                            f"{row['p99'] * 1e3:.0f} vs {row['bare_p99'] * 1e3:.0f} ms, {p99:.2f}x",
                            f"<= 1.3x: {verdict(p99 <= 1.3)}",
                        )
                    )
                    cpu = row["cpu_ms_actors"] + row["cpu_ms_driver"] + row["cpu_ms_ray"]
                    bare_cpu = row["bare_cpu_ms_actors"] + row["bare_cpu_ms_driver"] + row["bare_cpu_ms_ray"]
                    summary.append(
                        (
                            f"(b) N = {n:.0f}: CPU per turn (actors + driver + raylet/GCS)",
                            f"{cpu:.1f} vs {bare_cpu:.1f} ms, {cpu / bare_cpu:.2f}x",
                            "(reported)",
                        )
                    )
                    for key, label in (("held", "first_chunk_at_once=False"), ("shared", 'hosting = "shared"')):
                        if f"{key}_turns_per_s" in row:
                            summary.append(variant_row(row, key, label, args.turns, bare_cpu))
                    if "shared_uss_mib" in row:
                        summary.append(
                            (
                                '(b) hosting = "shared": USS per resident agent (its hosts\' USS / agents held)',
                                f"{row['shared_uss_mib']:.1f} MiB ({row['shared_hosts']} host processes)",
                                "(reported)",
                            )
                        )
                    if "uss_mib" in row:
                        extra = row["uss_mib"] - row["bare_uss_mib"]
                        summary.append(
                            (
                                "(b) USS per resident agent vs a bare actor",
                                f"{row['uss_mib']:.1f} vs {row['bare_uss_mib']:.1f} MiB, +{extra:.1f}",
                                f"within 5 MiB: {verdict(extra <= 5)}",
                            )
                        )
                if args.profile:
                    print_profile(profile_dir)
            if "c" not in skip:
                handles, provision_s = provision(args.addressable)
                picked = random.sample(handles, args.wakes * (2 if args.wake_ab else 1))
                passes = [("no warm workers", 0), ("1 warm worker per node", 1)] if args.wake_ab else [("", 1)]
                for i, (label, warm) in enumerate(passes):
                    if args.wake_ab:
                        ta.init(**init, warm_workers=warm)  # the same Ray; agents started from now on follow it
                        await asyncio.sleep(10)  # an idle node's warm worker has booted before the first wake
                    sc = await bench_wakes(picked[i * args.wakes : (i + 1) * args.wakes], args.pace)
                    print(
                        f"(c) {sc['addressable']:.0f} addressable agents (provisioned in {provision_s:.1f} s), "
                        f"{args.wakes} woken one per {args.pace:.1f} s{', ' + label if label else ''}: wake to first "
                        f"chunk p50 {sc['p50'] * 1e3:.0f} ms, p99 {sc['p99'] * 1e3:.0f} ms (targets 300 / 600), at "
                        f"most {sc['most_resident']:.0f} resident [load {load()}]",
                        flush=True,
                    )
                    name = f"(c) wake to first chunk, {args.wakes} of {sc['addressable']:.0f}" + (
                        f", {label}" if label else ""
                    )
                    summary.append(
                        (
                            name,
                            f"p50 {sc['p50'] * 1e3:.0f} ms, p99 {sc['p99'] * 1e3:.0f} ms",
                            f"p50 <= 300: {verdict(sc['p50'] <= 0.3)}, p99 <= 600: {verdict(sc['p99'] <= 0.6)}",
                        )
                    )
            if "c" not in skip and args.warm:
                summary += await bench_burst_ab(
                    init, handles, args.wakes, args.burst_gap, args.warm, args.warm_memory_share
                )
            if "c" not in skip and args.shared:
                # The same burst of wakes for agents with an actor each: every wake is a process starting.
                picked = random.sample([h for h in handles if h not in picked], args.wakes)
                sc = await bench_wakes(picked, 0.02)
                print(
                    f"(c) {args.wakes} more woken in a burst, one per 20 ms: wake to first chunk p50 "
                    f"{sc['p50'] * 1e3:.0f} ms, p99 {sc['p99'] * 1e3:.0f} ms [load {load()}]",
                    flush=True,
                )
                summary.append(
                    (
                        f"(c) wake to first chunk, {args.wakes} woken, a burst, one per 20 ms",
                        f"p50 {sc['p50'] * 1e3:.0f} ms, p99 {sc['p99'] * 1e3:.0f} ms",
                        f"p50 <= 300: {verdict(sc['p50'] <= 0.3)}, p99 <= 600: {verdict(sc['p99'] <= 0.6)}",
                    )
                )
                await asyncio.sleep(5)  # they hibernate 2 s after their turn
                # Shared agents: a wake loads the agent into a running host; one at the pace above, then a burst.
                handles, provision_s = provision(args.addressable, SharedNapper)
                picked = random.sample(handles, args.wakes * 2)
                for label, pace in ((f"one per {args.pace:.1f} s", args.pace), ("a burst, one per 20 ms", 0.02)):
                    sc = await bench_wakes(picked[: args.wakes], pace)
                    picked = picked[args.wakes :]
                    print(
                        f'(c) hosting = "shared", {args.addressable} more provisioned in {provision_s:.1f} s, '
                        f"{args.wakes} woken, {label}: wake to first chunk p50 {sc['p50'] * 1e3:.0f} ms, "
                        f"p99 {sc['p99'] * 1e3:.0f} ms [load {load()}]",
                        flush=True,
                    )
                    summary.append(
                        (
                            f'(c) hosting = "shared": wake to first chunk, {args.wakes} woken, {label}',
                            f"p50 {sc['p50'] * 1e3:.0f} ms, p99 {sc['p99'] * 1e3:.0f} ms",
                            f"p50 <= 300: {verdict(sc['p50'] <= 0.3)}, p99 <= 600: {verdict(sc['p99'] <= 0.6)}",
                        )
                    )
        finally:
            ta.shutdown()
    print_summary(summary)


def variant_row(row: dict[str, Any], key: str, label: str, turns: int, bare_cpu: float) -> tuple[str, str, str]:
    """Print (b)'s line for the agents of variant ``key`` (``held``, ``shared``); their row of the summary."""
    n, rate, p99 = row["n"], row[f"{key}_turns_per_s"], row[f"{key}_p99"]
    cpu = [row[f"{key}_cpu_ms_{part}"] for part in ("actors", "driver", "ray")]
    print(
        f"(b) {n:.0f} x {turns}, agents with {label}: {rate:.1f} turns/s, p50 {row[f'{key}_p50'] * 1e3:.0f} ms, "
        f"p99 {p99 * 1e3:.0f} ms, CPU/turn processes {cpu[0]:.1f} + driver {cpu[1]:.1f} + raylet/GCS {cpu[2]:.1f} ms "
        f"[load {load()}]",
        flush=True,
    )
    ratio, p99_ratio = rate / row["bare_turns_per_s"], p99 / row["bare_p99"]
    return (
        f"(b) N = {n:.0f}, {label}: turns/s, p99, CPU per turn vs bare",
        f"{rate:.1f} turns/s, {ratio:.2f}x; p99 {p99_ratio:.2f}x; CPU {sum(cpu) / bare_cpu:.2f}x",
        f">= 0.9x: {verdict(ratio >= 0.9)}, <= 1.3x: {verdict(p99_ratio <= 1.3)}",
    )


def print_summary(summary: list[tuple[str, str, str]]) -> None:
    print("\n| issue 22 | measured | target |\n|---|---|---|")
    for row in summary:
        print(f"| {row[0]} | {row[1]} | {row[2]} |")
    print(f"1-minute load average at the end: {load()} (over 2: other work shared the machine)", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
