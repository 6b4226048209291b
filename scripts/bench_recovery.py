"""Crash recovery time on local Ray: an agent actor dies (os._exit) in the middle of a submission's turn; how long
until the restarted actor streams the first chunk of the resumed turn (median of N crashes).

Split into Ray's part (crash -> the agent's constructor runs again in the new actor process) and the harness's
part (constructor -> first chunk of the resumed turn: store open, reconciliation, the recovery turn up to its
model's first token). The cost the ledger adds to an uncrashed turn is measured by scripts/bench_turn.py.

With ``--burners N`` the crashes are measured a second time with N processes spinning on the CPU (at Ray's
workers' niceness, as other work of the node would), where a restart has to win its CPU time.

Usage: python scripts/bench_recovery.py [--crashes 10] [--burners 2] [--json PATH]
       (--json: the summary rows, bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_agents import RecoveringAgent, RecoveryClock
from bench_summary import summary_row, write_rows

from think_actors.runtime import init, shutdown, spawn


async def one(i: int, namespace: str) -> tuple[float, float, float]:
    clock_name = f"bench-clock-{i}-{time.time_ns()}"
    clock_class: Any = RecoveryClock
    clock: Any = clock_class.options(name=clock_name, namespace=namespace).remote()
    agent = await spawn(RecoveringAgent, f"recovering-{i}-{time.time_ns()}", clock=clock_name, namespace=namespace)
    await agent.submit_messages("do the work", submission_id="s")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        crashed, restarted, resumed = await clock.times.remote()
        if crashed and restarted and resumed:
            return resumed - crashed, restarted - crashed, resumed - restarted
        await asyncio.sleep(0.05)
    raise RuntimeError("the turn was not resumed within 60 s")


@contextlib.contextmanager
def burning(count: int) -> Any:
    """``count`` processes spinning on the CPU for the block, at niceness 15 (Ray's workers' own)."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(15))
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()


def medians(rows: list[tuple[float, float, float]]) -> tuple[float, ...]:
    return tuple(statistics.median(column) for column in zip(*rows, strict=True))


async def main(crashes: int, burners: int, json_path: str | None) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        config = init(num_cpus=2, data_dir=data_dir, model_pool_size=1)
        try:
            quiet = [await one(i, config.namespace) for i in range(crashes)]
            loaded: list[tuple[float, float, float]] = []
            if burners:
                with burning(burners):
                    loaded = [await one(crashes + i, config.namespace) for i in range(crashes)]
        finally:
            shutdown()
    result_rows = []
    for label, rows in (("", quiet), (f" under {burners} CPU burners", loaded)):
        if not rows:
            continue
        total, ray_part, harness = medians(rows)
        worst = max(r[0] for r in rows)
        print(f"Crash recovery on local Ray{label}, median of {crashes} crashes (os._exit before the turn's 2nd step)")
        print(f"  crash -> first chunk of the resumed turn   {total * 1000:8.1f} ms   (slowest {worst * 1000:.0f} ms)")
        print(f"    crash -> actor back (Ray restart)        {ray_part * 1000:8.1f} ms")
        print(f"    actor back -> first chunk (think_actors) {harness * 1000:8.1f} ms")
        result_rows += [
            summary_row(
                f"crash -> first chunk of the resumed turn{label}", total * 1e3, unit="ms", source="bench_recovery"
            ),
            summary_row(
                f"  of it: think_actors' part (actor back -> first chunk) vs Ray's restart{label}",
                harness * 1e3,
                ray_part * 1e3,
                unit="ms",
                source="bench_recovery",
            ),
        ]
    write_rows(json_path, result_rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crashes", type=int, default=10)
    parser.add_argument("--burners", type=int, default=0, help="measure again with this many CPU burners")
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    asyncio.run(main(args.crashes, args.burners, args.json))
