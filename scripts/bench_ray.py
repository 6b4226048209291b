"""Ray runtime benchmarks, measured in one run on local Ray with the scripted model.

(a) a 500-chunk turn streamed driver <- agent actor vs the same turn in process: wall time ratio and the time to
    first chunk added (targets: ratio <= 1.3, TTFC added <= 5 ms). Measured unpaced (raw overhead: the scripted
    model answers instantly) and paced (the model waits 200 ms before each step, as a provider would). Beside it,
    in the same rounds, Ray's own floor: a bare actor's streamed call shaped like the turn's (two items, a turn's
    two batches; paced: three items 200 ms apart) to the driver, less the same stream in process. Target for the
    ms the actor adds: <= the floor + 1 ms.
(b) 8 children fanned out in parallel vs one child, children's model waiting 200 ms per step (target <= 1.5x
    the single child's wall time). Children are warm actors (spawned once, before timing).
(c) resident memory (RSS) of one idle agent actor (target <= 60 MiB).
(d) the agent -> model-server hop: a 500-chunk model answer in an agent actor whose model is a model-server actor
    (the pool's path: ``PooledModel`` -> a ``ModelServer``-like actor streaming scripted events through the same
    batches) vs the same agent actor with the same scripted model in its own process, timed by the agent's turn
    (request -> first event, -> last event); the ms the hop adds vs Ray's actor -> actor floor (a bare actor
    taking two items from another), target <= the floor + 1 ms.

Usage: python scripts/bench_ray.py [--turns 20] [--streams-only] [--json PATH]
       (--streams-only: (a) and (d), no (b) or (c); --json: the summary rows, scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
from bench_agents import (
    EVENT_SERVER,
    BareActor,
    EventServer,
    FanOutLead,
    HopAgent,
    StreamAgent,
    bare_stream,
    fan_out_script,
)
from bench_summary import summary_row, write_rows

import think_actors as ta
from think_actors.runtime import RuntimeConfig

CHUNKS = 500
PACE_S = 0.2
SOURCE = "bench_ray"


async def timed_stream(stream: Any, first_type: str | None = None) -> tuple[float, float, int]:
    """(seconds to the first chunk, or to the first of ``first_type``; seconds in all; chunks)."""
    start = time.perf_counter()
    first = 0.0
    count = 0
    async for chunk in stream:
        if not first and (chunk.type == first_type if first_type else True):
            first = time.perf_counter() - start
        count += 1
    return first, time.perf_counter() - start, count


async def floor_once(actor: Any, items: int = 2, pause_s: float = 0.0) -> float:
    """Ray's own cost of a streamed call shaped like a turn's: a bare actor's ``items`` one-element items,
    ``pause_s`` apart, to the driver, less the same stream in process."""
    start = time.perf_counter()
    async for _ in bare_stream(items, pause_s):
        pass
    local = time.perf_counter() - start
    start = time.perf_counter()
    async for ref in actor.stream.options(num_returns="streaming").remote(items, pause_s):
        await ref
    return time.perf_counter() - start - local


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {key: statistics.median(values) for key, values in samples.items()}


async def bench_stream(turns: int, paced: bool, data_dir: str) -> dict[str, float]:
    """The turn in process, streamed from an agent actor, and Ray's floor, one after the other in every round."""
    local = StreamAgent("local-" + str(paced), data_dir=data_dir)
    remote = await ta.spawn(StreamAgent, f"remote-{paced}-{time.time_ns()}")
    bare = BareActor.remote()  # type: ignore[attr-defined]
    await bare.pid.remote()
    samples: dict[str, list[float]] = {k: [] for k in ("local_ttfc", "local_total", "remote_ttfc", "remote_total")}
    samples["floor"] = []
    for i in range(turns + 3):
        first, total, count = await timed_stream(local.chat("go", body={"paced": paced}))
        assert count > CHUNKS
        rfirst, rtotal, rcount = await timed_stream(remote.chat("go", body={"paced": paced}))
        assert rcount == count, (rcount, count)
        # A paced turn crosses as three batches, its two steps 200 ms apart: the floor has that shape too.
        floor = await floor_once(bare, 3, PACE_S) if paced else await floor_once(bare)
        if i >= 3:
            for key, value in zip(samples, (first, total, rfirst, rtotal, floor), strict=True):
                samples[key].append(value)
        if i % 10 == 9:
            await local.clear()
            await remote.clear()
    await local.close()
    return medians(samples)


async def bench_model_hop(turns: int) -> dict[str, float]:
    """An agent actor's model stream from a model-server actor vs from a model in its own process, as the agent
    saw it (the ``data-hop`` chunk of each turn), and Ray's actor -> actor floor, one after the other each round."""
    server = EventServer.options(name=EVENT_SERVER).remote(RuntimeConfig(), CHUNKS)  # type: ignore[attr-defined]
    await server.model_info.remote("")
    own = await ta.spawn(HopAgent, f"own-{time.time_ns()}")
    pooled = await ta.spawn(HopAgent, f"pool-{time.time_ns()}")
    source, sink = BareActor.remote(), BareActor.remote()  # type: ignore[attr-defined]
    await asyncio.gather(source.pid.remote(), sink.pid.remote())
    samples: dict[str, list[float]] = {k: [] for k in ("local_ttfc", "local_total", "remote_ttfc", "remote_total")}
    samples["floor"] = []
    for i in range(turns + 3):
        [own_hop] = [c.data for c in await own.chat("go").collect() if c.type == "data-hop"]
        [pool_hop] = [c.data for c in await pooled.chat("go").collect() if c.type == "data-hop"]
        floor = await sink.stream_from.remote(source, 2)
        if i >= 3:
            values = (own_hop["first_s"], own_hop["total_s"], pool_hop["first_s"], pool_hop["total_s"], floor)
            for key, value in zip(samples, values, strict=True):
                samples[key].append(value)
        if i % 10 == 9:
            await own.clear()
            await pooled.clear()
    return medians(samples)


def print_added(hop: str, r: dict[str, float], floor_kind: str) -> None:
    added = (r["remote_total"] - r["local_total"]) * 1e3
    floor = r["floor"] * 1e3
    verdict = "met" if added <= floor + 1 else "NOT met"
    print(
        f"      {hop} adds {added:.2f} ms; Ray's floor ({floor_kind}) {floor:.2f} ms; "
        f"target <= {floor + 1:.2f} ms: {verdict} (added - floor {added - floor:+.2f} ms)"
    )


def memory(pid: int) -> tuple[float, float, float]:
    """RSS, USS and PSS of a process in MiB."""
    info = psutil.Process(pid).memory_full_info()
    return info.rss / 2**20, info.uss / 2**20, info.pss / 2**20


async def bench_fan_out(children: int, turns: int) -> float:
    lead = await ta.spawn(FanOutLead, f"fan-{children}-{time.time_ns()}", model=fan_out_script(children, turns + 1))
    await lead.save_messages("warm up")  # creates the children's actors
    times = []
    for _ in range(turns):
        start = time.perf_counter()
        result = await lead.save_messages("fan out")
        times.append(time.perf_counter() - start)
        assert result.status == "completed", result
    return statistics.median(times)


def added_row(figure: str, r: dict[str, float]) -> dict[str, object]:
    """The ms an agent's path adds over the same stream in process, beside Ray's own floor; target floor + 1 ms."""
    added = (r["remote_total"] - r["local_total"]) * 1e3
    floor = r["floor"] * 1e3
    return summary_row(
        figure, added, floor, unit="ms", source=SOURCE, target="ours ≤ baseline + 1 ms", met=added <= floor + 1
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--streams-only", action="store_true", help="only (a) and (d)")
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        ta.init(num_cpus=2, data_dir=data_dir)
        try:
            unpaced = await bench_stream(args.turns, False, data_dir)
            paced = await bench_stream(max(3, args.turns // 4), True, data_dir)
            hop = await bench_model_hop(args.turns)
            if not args.streams_only:
                one = await bench_fan_out(1, 3)
                eight = await bench_fan_out(8, 3)
                idle = await ta.spawn(StreamAgent, f"idle-{time.time_ns()}")
                bare = BareActor.remote()  # type: ignore[attr-defined]
                bare_pid = await bare.pid.remote()
                await asyncio.sleep(2)  # let both settle after start-up
                agent_mem = memory((await idle.info())["pid"])
                bare_mem = memory(bare_pid)
        finally:
            ta.shutdown()
    print(f"Ray runtime, local Ray on this machine, median of {args.turns} turns")
    for label, r in (("unpaced", unpaced), (f"paced {PACE_S * 1000:.0f} ms/step", paced)):
        print(f"(a) {CHUNKS}-chunk turn, {label}:")
        print(f"      in process   first chunk {r['local_ttfc'] * 1e3:7.2f} ms   turn {r['local_total'] * 1e3:8.2f} ms")
        print(
            f"      driver<-actor first chunk {r['remote_ttfc'] * 1e3:7.2f} ms   turn {r['remote_total'] * 1e3:8.2f} ms"
        )
        print(
            f"      ratio {r['remote_total'] / r['local_total']:.2f} (target <= 1.3), "
            f"first chunk added {(r['remote_ttfc'] - r['local_ttfc']) * 1e3:.2f} ms (target <= 5)"
        )
        shape = f"3 items {PACE_S * 1000:.0f} ms apart" if r is paced else "2 items"
        print_added("driver <- agent actor", r, f"to the driver, {shape}")
    if not args.streams_only:
        print(
            f"(b) fan-out, children's model waits {PACE_S * 1000:.0f} ms per step: 1 child {one:.3f} s, "
            f"8 children {eight:.3f} s, ratio {eight / one:.2f} (target <= 1.5)"
        )
        print(
            f"(c) idle agent actor:  RSS {agent_mem[0]:.1f} MiB, USS {agent_mem[1]:.1f} MiB, "
            f"PSS {agent_mem[2]:.1f} MiB (target <= 60)"
        )
        print(
            f"    bare Ray actor:     RSS {bare_mem[0]:.1f} MiB, USS {bare_mem[1]:.1f} MiB, PSS {bare_mem[2]:.1f} MiB "
            "(RSS counts ~40 MiB of libraries shared by every Ray worker)"
        )
    print(f"(d) {CHUNKS}-chunk model answer as an agent actor's turn sees it (request -> first event, -> last event):")
    for label, first, total in (
        ("own model", "local_ttfc", "local_total"),
        ("model server", "remote_ttfc", "remote_total"),
    ):
        print(f"      {label:13} first event {hop[first] * 1e3:6.2f} ms   stream {hop[total] * 1e3:7.2f} ms")
    print(f"      first event added {(hop['remote_ttfc'] - hop['local_ttfc']) * 1e3:.2f} ms")
    print_added("agent <- model-server actor", hop, "actor -> actor, 2 items")
    rows = []
    for label, r in (("unpaced", unpaced), ("paced", paced)):
        rows.append(
            summary_row(
                f"Ray: {CHUNKS}-chunk turn, driver <- agent actor vs in process, {label}",
                r["remote_total"] * 1e3,
                r["local_total"] * 1e3,
                unit="ms",
                source=SOURCE,
                target="ratio ≤ 1.3" if r is paced else None,
                met=r["remote_total"] / r["local_total"] <= 1.3 if r is paced else None,
            )
        )
        rows.append(added_row(f"Ray: ms the agent actor adds to the {label} turn, vs a bare Ray actor's", r))
    rows.append(
        summary_row(
            f"Ray: first chunk, driver <- agent actor vs in process, paced {PACE_S * 1000:.0f} ms/step",
            paced["remote_ttfc"] * 1e3,
            paced["local_ttfc"] * 1e3,
            unit="ms",
            source=SOURCE,
            target="ours - baseline ≤ 5 ms",
            met=(paced["remote_ttfc"] - paced["local_ttfc"]) * 1e3 <= 5,
        )
    )
    if not args.streams_only:
        rows.append(
            summary_row(
                "Ray: fan-out to 8 children vs 1 child",
                eight,
                one,
                unit="s",
                source=SOURCE,
                target="ratio ≤ 1.5",
                met=eight / one <= 1.5,
            )
        )
        rows.append(
            summary_row(
                "Ray: USS of an idle agent actor vs a bare Ray actor",
                agent_mem[1],
                bare_mem[1],
                unit="MiB",
                source=SOURCE,
                target="ours ≤ 60 MiB",
                met=agent_mem[1] <= 60,
            )
        )
    rows.append(added_row("Ray: ms the agent <- model-server hop adds, vs a bare actor -> actor stream", hop))
    write_rows(args.json, rows)


if __name__ == "__main__":
    asyncio.run(main())
