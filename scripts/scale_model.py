"""A scale model of think_actors: what one turn, wake and scheduled fire asks of each component, counted, and the load
a workload puts on each component of a cluster, against capacities measured on the project's machine.

    python scripts/scale_model.py                      # count in process (SQLite, PostgreSQL if a server starts)
                                                       # and on local Ray, then print the model of the example
    python scripts/scale_model.py --skip-ray --json counts.json
    python scripts/scale_model.py --model-only --agents 1000000 --conversations 10000 --nodes 20 --cores 16

Counting (``scale_counting.py``) wraps the package from outside: a store wrapper counts store calls and the bytes
written, a SQLite trace callback and asyncpg's client calls count SQL statements (each asyncpg call is a round trip),
and patches in each process count registry calls and their GCS key-value operations, ``ray.get_actor`` lookups, actor
creations, actor method calls, and a turn's stream items and channel frames. Counts are exact whatever the load;
times are not measured here (``CAPACITIES`` cites where each rate was measured).

The model (``model``) is documented in docs/scaling.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import msgpack  # noqa: E402
import scale_counting as sc  # noqa: E402

import think_actors as ta  # noqa: E402

PACED_S = 0.02  # a provider's pace: 50 tokens a second


def _delta(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in sorted(after) if after[k] - before[k] and not k.startswith("agent_built")}


def summarize(counts: dict[str, int]) -> dict[str, int]:
    """The per-operation figures docs/scaling.md tabulates, from one operation's raw counts."""

    def total(prefix: str) -> int:
        return sum(v for k, v in counts.items() if k.startswith(prefix))

    writes = sum(v for k, v in counts.items() if k.startswith("store:") and k[6:] in sc.WRITES)
    return {
        "store_calls": total("store:"),
        "store_writes": writes,
        "store_reads": total("store:") - writes,
        "store_bytes_written": total("store_bytes:"),
        "sql_statements": total("sql:"),
        "registry_reads": counts.get("gcs_kv:get", 0) + counts.get("gcs_kv:exists", 0) + counts.get("gcs_kv:list", 0),
        "registry_writes": counts.get("gcs_kv:put", 0),
        "registry_bytes_written": counts.get("gcs_kv_bytes:put", 0),
        "named_actor_lookups": counts.get("ray:get_actor", 0),
        "actor_remote_calls": total("actor_create:AgentHost"),
        "actor_calls": total("actor_call:"),
        "ray_items": counts.get("stream:ray_item", 0),
        "channel_frames": counts.get("stream:channel_frame", 0),
        "schedule_store_calls": total("schedule_store:"),
        "processes_started": counts.get("processes_started", 0),
    }


# -- counting in process --


async def _measure(op: Callable[[], Awaitable[Any]]) -> dict[str, int]:
    before = sc.snapshot()
    await op()
    return _delta(before, sc.snapshot())


async def count_in_process(store: str | None, data_dir: str) -> dict[str, dict[str, int]]:
    """One agent in this process: its start, a warm turn (instant and at a provider's pace) and a scheduled prompt's
    fire. ``store`` is a PostgreSQL URL, or None for SQLite files under ``data_dir``."""
    sc.install_postgres_counter()
    options: dict[str, Any] = {"store": store} if store else {"data_dir": data_dir}
    if store:  # the process's pool and the schema exist before anything is counted, as in a running node
        warm = sc.CountedAgent("warm-up", **options)
        await warm.load_messages()
        await warm.close()
    ops: dict[str, dict[str, int]] = {}
    agent = sc.CountedAgent("a1", **options)
    ops["start"] = await _measure(agent.load_messages)
    await agent.chat("first").collect()  # the first turn of a process builds what later turns reuse
    ops["turn"] = await _measure(lambda: agent.chat("hi").collect())
    paced = sc.CountedAgent("a2", paced_s=PACED_S, **options)
    await paced.load_messages()
    await paced.chat("first").collect()
    ops["turn_paced"] = await _measure(lambda: paced.chat("hi").collect())
    ops.update(await _count_fire(options))
    for a in (agent, paced):
        await a.close()
    return ops


async def _count_fire(options: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A class schedule's prompt fired by the scheduler, in three parts: the scheduler's claim (its schedule store),
    the delivery (the prompt becomes a submission and its turn runs, until the agent is idle), and the fire's end.
    The schedule store is the agents' PostgreSQL database when they use one, else a SQLite file."""
    from think_actors.schedule.scheduler import deliver_to
    from think_actors.schedule.store import open_schedule_store

    url = options.get("store")
    inner = open_schedule_store(url, tempfile.mkdtemp(prefix="scale-schedules-"))
    store: Any = sc.CountingStore(inner, prefix="schedule_store")
    clock = ta.ManualClock(1_800_000_000.0)
    scheduler = ta.LocalScheduler(store, clock=clock)
    agent = sc.ScheduledAgent("s1", **options)
    await agent.load_messages()
    await scheduler.attach(agent)
    clock.advance(3600)
    fires: list[Any] = []

    async def claim() -> None:
        fires.extend(await scheduler.scheduler.claim_due())
        assert len(fires) == 1, fires

    async def deliver() -> None:
        await deliver_to(agent, fires[0])
        # The submission's turn, to its end; the engine has no event for it, and asking costs no store call.
        while agent._engine.resident_reason() is not None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    parts = {
        "fire_claim": await _measure(claim),
        "fire_deliver": await _measure(deliver),
        "fire_finish": await _measure(lambda: store.finish_fire(fires[0], "delivered")),
    }
    await agent.close()
    await store.close()
    return parts


# -- counting on local Ray ---------------------------------------------------------------------------------------------


async def count_on_ray(data_dir: str) -> dict[str, dict[str, int]]:
    """An agent with an actor of its own on local Ray (SQLite): get-or-create, a warm turn through ``handle.chat``
    (instant and paced), finding it from a new handle, its hibernation, and its wake."""
    counts_dir = tempfile.mkdtemp(prefix="scale-counts-")
    os.environ[sc.COUNTS_ENV] = counts_dir  # before Ray starts: its workers inherit it
    sc.install_process_counters()
    registry: Any = importlib.import_module("think_actors.registry")

    ta.init(data_dir=data_dir, warm_workers=0, quiet=True)

    async def settle() -> Counter[str]:
        # Wait until the counts stop moving: an agent's last writes of a turn may land just after its stream ended.
        last = sc.read_all(counts_dir)
        while True:
            await asyncio.sleep(0.5)
            now = sc.read_all(counts_dir)
            if now == last:
                return now
            last = now

    async def measure(op: Callable[[], Awaitable[Any]]) -> dict[str, int]:
        before = await settle()
        await op()
        after = await settle()
        counted = _delta(before, after)
        started = {k for k in after if k.startswith("agent_built:")} - {
            k for k in before if k.startswith("agent_built")
        }
        counted["processes_started"] = len(started)
        return counted

    ops: dict[str, dict[str, int]] = {}
    try:
        handle: Any = None

        async def spawn() -> None:
            nonlocal handle
            handle = await ta.spawn(sc.CountedAgent, "r1")

        ops["ray_spawn"] = await measure(spawn)
        await handle.chat("first").collect()
        ops["ray_turn"] = await measure(lambda: handle.chat("hi").collect())
        paced = await ta.spawn(sc.CountedAgent, "r2", paced_s=PACED_S)
        await paced.chat("first").collect()
        ops["ray_turn_paced"] = await measure(lambda: paced.chat("hi").collect())

        async def find() -> None:
            found = await ta.get(sc.CountedAgent, "r1")
            await found.chat("hi again").collect()

        ops["ray_get_and_turn"] = await measure(find)
        ops["ray_spawn_existing"] = await measure(lambda: ta.spawn(sc.CountedAgent, "r1"))

        napper: Any = None

        async def provision() -> None:
            nonlocal napper
            napper = ta.provision(sc.NappingAgent, "n1")

        ops["ray_provision"] = await measure(provision)
        ops["ray_first_start_and_turn"] = await measure(lambda: napper.chat("hi").collect())
        real_kv = registry.internal_kv._real  # the uncounted one: these reads are not the agent's
        key = f"agents/think_actors/{napper.path}".encode()

        async def hibernate() -> None:
            deadline = time.monotonic() + 60
            while msgpack.unpackb(real_kv._internal_kv_get(key, namespace="think_actors"))["resident"]:
                if time.monotonic() > deadline:
                    raise TimeoutError("the agent did not hibernate within 60 s")
                await asyncio.sleep(0.2)

        ops["ray_hibernate"] = await measure(hibernate)
        ops["ray_wake_and_turn"] = await measure(lambda: napper.chat("back").collect())
    finally:
        ta.shutdown()
        os.environ.pop(sc.COUNTS_ENV, None)
    return ops


def time_gcs_calls(rounds: int = 300) -> dict[str, float]:
    """Per-call wall time of a named-actor lookup and a GCS key-value get, one caller, serial (load-dependent)."""
    import ray
    from ray.experimental import internal_kv

    ta.init(data_dir=tempfile.mkdtemp(), warm_workers=0, quiet=True)
    try:

        @ray.remote(num_cpus=0)
        class Named:
            def ping(self) -> int:
                return 1

        actor = Named.options(name="scale-named", lifetime="detached").remote()  # type: ignore[attr-defined]
        ray.get(actor.ping.remote())
        began = time.perf_counter()
        for _ in range(rounds):
            ray.get_actor("scale-named")
        lookup_ms = (time.perf_counter() - began) / rounds * 1000
        internal_kv._internal_kv_put(b"scale-key", b"x" * 600, namespace="scale")
        began = time.perf_counter()
        for _ in range(rounds):
            internal_kv._internal_kv_get(b"scale-key", namespace="scale")
        kv_ms = (time.perf_counter() - began) / rounds * 1000
        ray.kill(actor)
    finally:
        ta.shutdown()
    return {"get_actor_ms": round(lookup_ms, 3), "kv_get_ms": round(kv_ms, 3)}


# -- the model --


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capacity:
    """A measured rate or cost, and where it was measured."""

    value: float
    unit: str
    source: str


# Figures measured earlier on the project's 2-core machine; none is re-measured by this script.
CAPACITIES: dict[str, Capacity] = {
    "node_cpu_per_turn_shared_ms": Capacity(
        value=43.4,
        unit="ms of CPU per 60-token turn, every process of a node",
        source="docs/performance.md, live chats: hosting='shared', 50 tokens/s (0.70 ms per token)",
    ),
    "node_cpu_per_turn_actor_ms": Capacity(
        value=95.7,
        unit="ms of CPU per 60-token turn, every process of a node",
        source="docs/performance.md, live chats: an actor per agent, 50 tokens/s (1.6 ms per token)",
    ),
    "gateway_cpu_per_token_ms": Capacity(
        value=0.36,
        unit="ms of the gateway actor's CPU per token",
        source="docs/performance.md, stream_latency_ms table: gateway actor, stream_latency_ms=0 (0.25 ms at 40)",
    ),
    "pg_server_cpu_per_turn_ms": Capacity(
        value=0.25,
        unit="ms of PostgreSQL server CPU per 4-round-trip turn",
        source="scripts/README-perf-notes.md "
        "section 14: in process, 50 agents x 200 turns, loopback server (0.7 ms per turn in the 3-node shared row)",
    ),
    "process_start_cpu_s": Capacity(
        value=1.5,
        unit="s of a core per agent process started",
        source="docs/performance.md, waking many agents: "
        "1.5-2 s of a core (stack-notes: about 2.2 actor starts/s on 2 cores)",
    ),
    "agent_memory_actor_mib": Capacity(
        value=56.3,
        unit="MiB USS per resident agent with its own actor",
        source="scripts/README-perf-notes.md section 14",
    ),
    "agent_memory_shared_mib": Capacity(
        value=1.0,
        unit="MiB per resident agent, hosting='shared'",
        source="scripts/README-perf-notes.md section 14 "
        "(1.8 MiB marginal per live conversation in docs/performance.md)",
    ),
    "runner_fires_per_core_s": Capacity(
        value=44.0,
        unit="scheduled prompts of hibernated agents per second per core (burst runners)",
        source="scripts/README-perf-notes.md section 10: 10,000 due in 60 s done in about 114 s on 2 cores",
    ),
    "scheduler_fires_s": Capacity(
        value=167.0,
        unit="fires per second claimed by the one scheduler (a lower bound: not saturated)",
        source="scripts/README-perf-notes.md: bench_schedule --mode scheduler, 10,000 in 60 s, p99 lateness 8.6 ms",
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    """What users do: ``agents`` addressable, ``conversations`` live at once, ``turns_per_s`` across the cluster,
    ``schedules`` each firing once per ``schedule_period_s`` (their agents hibernated); a turn streams
    ``tokens_per_turn`` tokens; a conversation lasts ``turns_per_conversation`` turns and its first wakes its agent;
    every turn opens a gateway socket when ``socket_per_turn``."""

    agents: int
    conversations: int
    turns_per_s: float
    schedules: int = 0
    schedule_period_s: float = 3600.0
    tokens_per_turn: int = 60
    turns_per_conversation: int = 10
    hosting: str = "shared"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cluster:
    """The machines: ``nodes`` of ``cores`` and ``memory_gib`` each (one gateway process per node), a PostgreSQL
    server of ``db_cores`` accepting ``db_connections``, and the head node's memory for Ray's GCS."""

    nodes: int
    cores: int
    memory_gib: float = 64.0
    db_cores: int = 16
    db_connections: int = 1000
    head_memory_gib: float = 64.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerOperation:
    """What one operation costs, from the counts (docs/scaling.md's table)."""

    sql_per_turn: float = 2  # PostgreSQL round trips of a warm turn (begin_turn, end_turn), its chunk log aside
    sql_per_batch: float = 1  # a chunk-log write per batch that leaves an agent's process
    batches_per_token: float = 0.95  # at a provider's pace each token leaves alone (19 batches for 20 tokens)
    sql_per_wake: float = 9  # the store's open and the agent's loads
    gcs_per_wake: float = 7  # registry reads and writes, named-actor lookups, actor creations
    gcs_per_hibernation: float = 2  # the registry record read and written back
    registry_record_bytes: float = 258
    sql_per_fire: float = 8  # the scheduler's claim and the fire's end, the submission's own turn aside
    sql_per_fire_turn: float = 29  # the submission and its turn in the agent's store
    gcs_per_fire: float = 4  # the scheduler's lookup; a runner's two lookups and its registry read (from the code)

    @classmethod
    def from_counts(cls, ops: dict[str, dict[str, int]]) -> PerOperation:
        """The figures of ``ops`` (this script's counts; PostgreSQL's and Ray's must both be there)."""
        s = {name: summarize(counts) for name, counts in ops.items()}
        paced = ops["ray_turn_paced"]
        wake, hibernate = s["ray_wake_and_turn"], s["ray_hibernate"]

        def gcs(x: dict[str, int]) -> int:
            return x["registry_reads"] + x["registry_writes"] + x["named_actor_lookups"] + x["actor_remote_calls"]

        return cls(
            sql_per_turn=s["pg_turn"]["sql_statements"],
            sql_per_batch=1,  # PostgresStore.append_chunks: one statement
            batches_per_token=paced.get("store:append_chunks", 0) / sc.TOKENS,
            sql_per_wake=s["pg_start"]["sql_statements"],
            gcs_per_wake=gcs(wake),
            gcs_per_hibernation=gcs(hibernate),
            registry_record_bytes=s["ray_spawn"]["registry_bytes_written"],
            sql_per_fire=s["pg_fire_claim"]["sql_statements"] + s["pg_fire_finish"]["sql_statements"],
            sql_per_fire_turn=s["pg_fire_deliver"]["sql_statements"],
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Load:
    """One component's load and capacity; ``saturates_at`` is the turn rate at which the load meets the capacity
    (None when the load does not grow with turns); a capacity of None is not measured."""

    component: str
    load: float
    capacity: float | None
    unit: str
    saturates_at: float | None

    @property
    def utilisation(self) -> float | None:
        return None if not self.capacity else self.load / self.capacity


def _linear(component: str, fixed: float, per_turn: float, capacity: float | None, unit: str, turns: float) -> Load:
    """A load of ``fixed + per_turn * T``: it meets its capacity at ``T = (capacity - fixed) / per_turn``."""
    at = None if capacity is None or per_turn <= 0 else max((capacity - fixed) / per_turn, 0.0)
    return Load(component=component, load=fixed + per_turn * turns, capacity=capacity, unit=unit, saturates_at=at)


def model(
    w: Workload, c: Cluster, p: PerOperation | None = None, caps: dict[str, Capacity] | None = None
) -> list[Load]:
    """Each component's load for ``w`` on ``c``, from the per-operation counts ``p`` and the capacities ``caps``
    (``CAPACITIES``), ordered by the turn rate at which each saturates (the others last)."""
    p = p or PerOperation()
    k = {name: cap.value for name, cap in (caps or CAPACITIES).items()}
    shared = w.hosting == "shared"
    cores = c.nodes * c.cores
    wakes = 1 / w.turns_per_conversation  # per turn
    fires = w.schedules / w.schedule_period_s  # per second
    turn_cpu_s = k[f"node_cpu_per_turn_{'shared' if shared else 'actor'}_ms"] / 1000 * w.tokens_per_turn / 60
    start_cpu_s = 0.0 if shared else k["process_start_cpu_s"]
    pg_statement_s = k["pg_server_cpu_per_turn_ms"] / 1000 / 4  # the cited turn made 4 round trips
    sql_per_turn = p.sql_per_turn + p.sql_per_batch * p.batches_per_token * w.tokens_per_turn + p.sql_per_wake * wakes
    sql_fixed = fires * (p.sql_per_fire + p.sql_per_fire_turn + p.sql_per_wake)
    resident = w.conversations  # at least each live conversation's agent
    memory_mib = k[f"agent_memory_{'shared' if shared else 'actor'}_mib"]
    # One asyncpg pool per process, up to 10 connections: a busy shared host (one per core) fills it, an agent's own
    # process needs one.
    connections = cores * 10 if shared else resident
    loads = [
        _linear(
            "node CPU (agents, gateways, model servers)",
            0.0,
            turn_cpu_s + start_cpu_s * wakes,
            cores,
            "cores",
            w.turns_per_s,
        ),
        _linear(
            "gateways (one process per node)",
            0.0,
            w.tokens_per_turn * k["gateway_cpu_per_token_ms"] / 1000,
            c.nodes,
            "cores",
            w.turns_per_s,
        ),
        _linear(
            "PostgreSQL server CPU",
            sql_fixed * pg_statement_s,
            sql_per_turn * pg_statement_s,
            c.db_cores,
            "cores",
            w.turns_per_s,
        ),
        _linear(
            "Ray process starts (wakes)",
            0.0,
            0.0 if shared else wakes,
            cores / k["process_start_cpu_s"],
            "starts/s",
            w.turns_per_s,
        ),
        _linear(
            "GCS requests (head node)",
            fires * p.gcs_per_fire,
            wakes * (p.gcs_per_wake + p.gcs_per_hibernation),
            None,
            "requests/s",
            w.turns_per_s,
        ),
        _linear("scheduler (one actor)", fires, 0.0, k["scheduler_fires_s"], "fires/s", w.turns_per_s),
        _linear("burst runners", fires, 0.0, cores * k["runner_fires_per_core_s"], "fires/s", w.turns_per_s),
        Load(
            component="node memory (resident agents)",
            load=resident * memory_mib / 1024,
            capacity=c.nodes * c.memory_gib,
            unit="GiB",
            saturates_at=None,
        ),
        Load(
            component="PostgreSQL connections",
            load=connections,
            capacity=c.db_connections,
            unit="connections",
            saturates_at=None,
        ),
        Load(
            component="GCS memory (agent registry)",
            load=w.agents * p.registry_record_bytes / 2**30,
            capacity=c.head_memory_gib,
            unit="GiB",
            saturates_at=None,
        ),
    ]
    return sorted(loads, key=lambda x: (x.saturates_at is None, x.saturates_at or 0.0))


def first_bottleneck(loads: list[Load]) -> Load:
    """The component that saturates at the lowest turn rate (``over_capacity`` lists those the turn rate does not
    drive: their size or configuration, not the traffic, exceeds what they hold)."""
    return min((x for x in loads if x.saturates_at is not None), key=lambda x: x.saturates_at or 0.0)


def over_capacity(loads: list[Load]) -> list[Load]:
    """Components over their capacity whatever the turn rate (memory, connections, registry size)."""
    return [x for x in loads if x.saturates_at is None and (x.utilisation or 0) >= 1]


# -- output --

ROWS = (
    "store_calls",
    "store_writes",
    "store_bytes_written",
    "sql_statements",
    "registry_reads",
    "registry_writes",
    "named_actor_lookups",
    "actor_remote_calls",
    "actor_calls",
    "ray_items",
    "channel_frames",
    "schedule_store_calls",
    "processes_started",
)


def table(ops: dict[str, dict[str, int]]) -> str:
    names = list(ops)
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    summaries = {name: summarize(ops[name]) for name in names}
    for row in ROWS:
        lines.append(f"| {row} | " + " | ".join(str(summaries[n][row]) for n in names) + " |")
    return "\n".join(lines)


def model_table(loads: list[Load]) -> str:
    lines = ["| component | load | capacity | utilisation | saturates at T (turns/s) |", "|---|---|---|---|---|"]
    for x in loads:
        at = "—" if x.saturates_at is None else f"{x.saturates_at:,.0f}"
        cap = "not measured" if x.capacity is None else f"{x.capacity:,.0f}"
        use = "—" if x.utilisation is None else f"{x.utilisation:.0%}"
        lines.append(f"| {x.component} | {x.load:,.1f} {x.unit} | {cap} | {use} | {at} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the counts and the model's loads here")
    parser.add_argument("--skip-ray", action="store_true", help="count in process only")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--model-only", action="store_true", help="no counting: use the counts of docs/scaling.md")
    parser.add_argument("--agents", type=int, default=1_000_000)
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--turns-per-s", type=float, help="default: a turn per conversation every 3.5 s")
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--hosting", choices=("shared", "actor"), default="shared")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--db-cores", type=int, default=16)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    ops: dict[str, dict[str, int]] = {}
    if args.model_only:
        counts = PerOperation()  # the counts docs/scaling.md states
    else:
        data_dir = tempfile.mkdtemp(prefix="scale-model-")
        ops.update({f"sqlite_{k}": v for k, v in asyncio.run(count_in_process(None, data_dir)).items()})
        if not args.skip_postgres:
            ops.update({f"pg_{k}": v for k, v in _count_postgres().items()})
        if not args.skip_ray:
            ops.update(asyncio.run(count_on_ray(tempfile.mkdtemp(prefix="scale-ray-"))))
            result["gcs_timing"] = time_gcs_calls()
        print(table(ops))
        complete = {"pg_turn", "ray_turn_paced"} <= set(ops)
        counts = PerOperation.from_counts(ops) if complete else PerOperation()
    result["per_operation_counts"] = ops
    result["per_operation"] = dataclasses.asdict(counts)
    turns = args.turns_per_s or args.conversations / 3.5
    workload = Workload(
        agents=args.agents,
        conversations=args.conversations,
        turns_per_s=turns,
        schedules=args.schedules,
        hosting=args.hosting,
    )
    cluster = Cluster(nodes=args.nodes, cores=args.cores, db_cores=args.db_cores)
    loads = model(workload, cluster, counts)
    print()
    print(f"workload: {workload}\ncluster: {cluster}")
    print(model_table(loads))
    first = first_bottleneck(loads)
    at = "" if first.saturates_at is None else f" at {first.saturates_at:,.0f} turns/s"
    print(f"first to saturate as turns grow: {first.component}{at}")
    for x in over_capacity(loads):
        print(f"over capacity at any turn rate: {x.component} ({x.utilisation:.0%})")
    result["model"] = [dataclasses.asdict(x) for x in loads]
    if "gcs_timing" in result:
        print("GCS, one caller, serial (this machine, under load):", result["gcs_timing"])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def _count_postgres() -> dict[str, dict[str, int]]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from postgres_server import PostgresServer, PostgresUnavailable

    server = PostgresServer(prefix="scale-model-pg-")
    try:
        server.start()
    except PostgresUnavailable as err:
        server.stop()
        print(f"PostgreSQL not counted: {err}", file=sys.stderr)
        return {}
    try:
        return asyncio.run(_pg_ops(server.dsn()))
    finally:
        server.stop()


async def _pg_ops(url: str) -> dict[str, dict[str, int]]:
    from think_actors.store.postgres import close_pools

    try:
        return await count_in_process(url, tempfile.mkdtemp())
    finally:
        await close_pools()


if __name__ == "__main__":
    sys.exit(main())
