"""Ray runtime benchmarks, measured in one run on local Ray with the scripted model.

(a) a 500-chunk turn streamed driver <- agent actor vs the same turn in process: wall time ratio and the time to
    first chunk added (targets: ratio <= 1.3, TTFC added <= 5 ms). Measured unpaced (raw overhead: the scripted
    model answers instantly) and paced (the model waits 200 ms before each step, as a provider would).
(b) 8 children fanned out in parallel vs one child, children's model waiting 200 ms per step (target <= 1.5x
    the single child's wall time). Children are warm actors (spawned once, before timing).
(c) resident memory (RSS) of one idle agent actor (target <= 60 MiB).

Usage: python scripts/bench_ray.py [--turns 20]
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
from bench_agents import BareActor, FanOutLead, StreamAgent, fan_out_script

import think_actors as ta

CHUNKS = 500
PACE_S = 0.2


async def timed_stream(stream: Any) -> tuple[float, float, int]:
    """(seconds to first chunk, seconds in all, chunks)."""
    start = time.perf_counter()
    first = 0.0
    count = 0
    async for _ in stream:
        if count == 0:
            first = time.perf_counter() - start
        count += 1
    return first, time.perf_counter() - start, count


async def bench_stream(turns: int, paced: bool, data_dir: str) -> dict[str, float]:
    local = StreamAgent("local-" + str(paced), data_dir=data_dir)
    remote = await ta.spawn(StreamAgent, f"remote-{paced}-{time.time_ns()}")
    results: dict[str, list[tuple[float, float]]] = {"local": [], "remote": []}
    for i in range(turns + 3):
        first, total, count = await timed_stream(local.chat("go", body={"paced": paced}))
        assert count > CHUNKS
        rfirst, rtotal, rcount = await timed_stream(remote.chat("go", body={"paced": paced}))
        assert rcount == count, (rcount, count)
        if i >= 3:
            results["local"].append((first, total))
            results["remote"].append((rfirst, rtotal))
        if i % 10 == 9:
            await local.clear()
            await remote.clear()
    out = {}
    for side, values in results.items():
        out[side + "_ttfc"] = statistics.median(v[0] for v in values)
        out[side + "_total"] = statistics.median(v[1] for v in values)
    await local.close()
    return out


async def bench_ray_floor(turns: int) -> float:
    """A bare actor streaming two one-element items: Ray's own cost of a streamed call like a turn's."""
    actor = BareActor.remote()  # type: ignore[attr-defined]
    await actor.pid.remote()
    times = []
    for _ in range(turns + 3):
        start = time.perf_counter()
        async for ref in actor.stream.options(num_returns="streaming").remote(2):
            await ref
        times.append(time.perf_counter() - start)
    return statistics.median(times[3:])


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


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        ta.init(num_cpus=2, data_dir=data_dir)
        try:
            unpaced = await bench_stream(args.turns, False, data_dir)
            paced = await bench_stream(max(3, args.turns // 4), True, data_dir)
            one = await bench_fan_out(1, 3)
            eight = await bench_fan_out(8, 3)
            floor = await bench_ray_floor(args.turns)
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
    print(
        f"(b) fan-out, children's model waits {PACE_S * 1000:.0f} ms per step: 1 child {one:.3f} s, "
        f"8 children {eight:.3f} s, ratio {eight / one:.2f} (target <= 1.5)"
    )
    print(f"    Ray's own floor for a streamed call of 2 items from a bare actor: {floor * 1e3:.2f} ms")
    print(
        f"(c) idle agent actor:  RSS {agent_mem[0]:.1f} MiB, USS {agent_mem[1]:.1f} MiB, PSS {agent_mem[2]:.1f} MiB "
        "(target <= 60)"
    )
    print(
        f"    bare Ray actor:     RSS {bare_mem[0]:.1f} MiB, USS {bare_mem[1]:.1f} MiB, PSS {bare_mem[2]:.1f} MiB "
        "(RSS counts ~40 MiB of libraries shared by every Ray worker)"
    )


if __name__ == "__main__":
    asyncio.run(main())
