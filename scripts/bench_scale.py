"""Scale benchmarks (issue 9), measured side by side in one run on local Ray.

(a) Start rate: ``--start`` bare Ray actors (``num_cpus=0``, nothing imported) and as many agents started at once,
    in alternating rounds; an agent has started when ``ta.spawn`` returns (its actor up, its store open, its
    history loaded). Target: agents at >= 0.8x the bare actors' rate.
(b) Throughput: ``--agents`` resident agents x ``--turns`` turns each, every agent's turns one after another and
    all agents at once, with a model that waits 200 ms per step as a provider would (then 20 chunks): turns/s,
    p50/p99 turn latency, and the unique memory (USS) of a resident agent's process.
(c) Scale: ``--addressable`` agents provisioned (addressable, never started), then ``--wakes`` of them, picked at
    random, woken by a chat at a fixed pace slower than the node starts actors; each hibernates 2 s after its
    turn. Wake latency (the call to the first chunk) p50/p99 (target p50 <= 1 s) and the most agents resident at
    once (a few at most; every other agent lives only in its store).

Usage: python scripts/bench_scale.py [--start 16] [--agents 200] [--turns 5] [--addressable 10000] [--wakes 40]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
from bench_agents import BareActor
from scale_agents import Napper, Worker

import think_actors as ta


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


async def bench_throughput(n_agents: int, turns: int) -> dict[str, float]:
    handles: list[Any] = []
    for begin in range(0, n_agents, 20):  # started in waves, so the start-up is not what is measured
        handles += await asyncio.gather(*(ta.spawn(Worker, f"tp-{i}") for i in range(begin, min(n_agents, begin + 20))))
    latencies: list[float] = []

    async def converse(handle: Any) -> None:
        for t in range(turns):
            began = time.perf_counter()
            await handle.chat(f"turn {t}").collect()
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(converse(h) for h in handles))
    elapsed = time.perf_counter() - began
    sample = random.sample(handles, min(10, len(handles)))
    uss = [psutil.Process((await h.info())["pid"]).memory_full_info().uss / 2**20 for h in sample]
    for handle in handles:
        await handle.kill(restart=False)
    return {
        "turns_per_s": len(latencies) / elapsed,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "uss_mib": statistics.median(uss),
        "turns": len(latencies),
    }


async def bench_scale(addressable: int, wakes: int, pace_s: float) -> dict[str, float]:
    began = time.perf_counter()
    handles = [ta.provision(Napper, f"scale-{i}") for i in range(addressable)]
    provision_s = time.perf_counter() - began
    picked = random.sample(handles, wakes)
    latencies: list[float] = []
    most_resident = 0

    async def wake(handle: Any) -> None:
        began = time.perf_counter()
        stream = handle.chat("wake up")
        await stream.__anext__()
        latencies.append(time.perf_counter() - began)
        async for _ in stream:
            pass

    tasks = []
    for handle in picked:
        tasks.append(asyncio.ensure_future(wake(handle)))
        await asyncio.sleep(pace_s)
        most_resident = max(most_resident, ta.list_agents().resident)
    await asyncio.gather(*tasks)
    listing = ta.list_agents()
    return {
        "provision_s": provision_s,
        "addressable": listing.addressable,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "most_resident": most_resident,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--addressable", type=int, default=10_000)
    parser.add_argument("--wakes", type=int, default=40)
    parser.add_argument("--pace", type=float, default=1.0, help="seconds between wakes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        ta.init(num_cpus=2, data_dir=data_dir, namespace=f"bench-scale-{time.time_ns()}")
        try:
            bare_rate, agent_rate = await bench_start(args.start, args.rounds)
            print(
                f"(a) start rate, {args.start} at once, median of {args.rounds} rounds: bare Ray actors "
                f"{bare_rate:.2f}/s, agents {agent_rate:.2f}/s, ratio {agent_rate / bare_rate:.2f} (target >= 0.8)",
                flush=True,
            )
            tp = await bench_throughput(args.agents, args.turns)
            print(
                f"(b) {args.agents} agents x {args.turns} turns at once, model 200 ms per step: "
                f"{tp['turns_per_s']:.1f} turns/s, turn p50 {tp['p50'] * 1e3:.0f} ms, p99 {tp['p99'] * 1e3:.0f} ms, "
                f"USS per resident agent {tp['uss_mib']:.1f} MiB ({tp['turns']:.0f} turns)",
                flush=True,
            )
            sc = await bench_scale(args.addressable, args.wakes, args.pace)
            print(
                f"(c) {sc['addressable']:.0f} addressable agents (provisioned in {sc['provision_s']:.1f} s), "
                f"{args.wakes} woken one per {args.pace:.1f} s: wake to first chunk p50 {sc['p50'] * 1e3:.0f} ms, "
                f"p99 {sc['p99'] * 1e3:.0f} ms (target p50 <= 1000), at most {sc['most_resident']:.0f} resident",
                flush=True,
            )
        finally:
            ta.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
