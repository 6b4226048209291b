"""CPU per turn of a few agents kept busy, by variant, each in its own local Ray: where a turn's CPU goes (issue 22).

N actors (default 10) answer turns back to back for ``--seconds``; the CPU the actors' processes and the driver
spent is divided by the turns. Variants: ``bare`` (a bare async actor of the same call shape as bench_scale's
(b): 200 ms, then the 20 chunks in one item), ``agents`` (the default agent), ``no-metrics`` (an agent class with
``metrics = False``), ``held`` (``ta.init(first_chunk_at_once=False)``), ``memory`` (the default agent with a
``MemoryStore``: no SQLite write at all), ``held-memory`` (both). Run the variants alternately, twice or more: the
machine's load moves between runs, and a variant is only compared with its neighbours.

Usage: python scripts/probe_turn_cpu.py [--agents 10] [--seconds 20] bare agents no-metrics held bare agents ...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
from scale_agents import BareTurn, Worker

import think_actors as ta

VARIANTS = ("bare", "agents", "no-metrics", "held", "memory", "held-memory")


class QuietWorker(Worker):
    """The benchmark's agent without metrics."""

    metrics = False


async def bare_turn(actor: Any, message: str) -> None:
    async for ref in actor.turn.options(num_returns="streaming").remote(message):
        await ref


async def agent_turn(handle: Any, message: str) -> None:
    await handle.chat(message).collect()


async def probe(variant: str, agents: int, seconds: float) -> str:
    ta.init(data_dir=tempfile.mkdtemp(), warm_workers=0, first_chunk_at_once=not variant.startswith("held"))
    try:
        if variant == "bare":
            targets: list[Any] = [BareTurn.remote() for _ in range(agents)]  # type: ignore[attr-defined]
            pids = [await t.pid.remote() for t in targets]
            turn = bare_turn
        else:
            agent_class = QuietWorker if variant == "no-metrics" else Worker
            options: dict[str, Any] = {"store": ta.MemoryStore()} if variant.endswith("memory") else {}
            targets = [await ta.spawn(agent_class, f"probe-{i}", **options) for i in range(agents)]
            pids = [(await t.info())["pid"] for t in targets]
            turn = agent_turn
        for target in targets:
            await turn(target, "warm up")  # the first turn of a process builds what later turns reuse
        processes, driver = [psutil.Process(pid) for pid in pids], psutil.Process()

        def cpu(group: list[psutil.Process]) -> float:
            return sum(sum(p.cpu_times()[:2]) for p in group)

        count = 0
        stop = time.monotonic() + seconds

        async def converse(target: Any) -> None:
            nonlocal count
            while time.monotonic() < stop:
                await turn(target, "hi")
                count += 1

        actors_before, driver_before, began = cpu(processes), cpu([driver]), time.perf_counter()
        await asyncio.gather(*(converse(t) for t in targets))
        elapsed = time.perf_counter() - began
        actors_ms = (cpu(processes) - actors_before) / count * 1e3
        driver_ms = (cpu([driver]) - driver_before) / count * 1e3
        return (
            f"{variant:>10}: {count / elapsed:6.1f} turns/s, CPU per turn: actors {actors_ms:5.2f} ms, "
            f"driver {driver_ms:5.2f} ms [load {os.getloadavg()[0]:.1f}]"
        )
    finally:
        ta.shutdown()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variants", nargs="+", choices=VARIANTS)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    for variant in args.variants:
        print(await probe(variant, args.agents, args.seconds), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
