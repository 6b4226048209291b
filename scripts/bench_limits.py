"""What run limits cost, and how fast one cancel stops a tree of agents.

1. Accounting per model step. The same turn (a lead's two steps and one agent-tool child's one step, each answer
   60 text tokens) run again and again with and without ``RunLimits``, side by side in one run: in process, the
   median CPU of this process per turn;
   on local Ray (the lead and the child each an actor, so the run's account moves to the accounts actor and every
   step asks and charges it there), the whole machine's CPU per turn (``/proc/stat``) and the turn's latency. The
   model answers at once there: the worst case, where the accounting is all a turn does besides its agents' own
   work. Then the same turn on Ray with a model that streams at a real provider's pace (tokens 20 ms apart, a tool
   call after 10 such gaps), as users run, four leads' turns at once: the machine's CPU per turn with and without
   limits.
2. Cancel to stopped. A lead on Ray fans out to 5 researchers, each to 5 fetchers whose model hangs: 31 agents, an
   actor each. Once every fetcher's model runs, the lead's turn is cancelled; each fetcher's turn end is timed
   against the cancel (p50 / p99 over the fetchers of ``--trees`` trees).

Usage: python scripts/bench_limits.py [--turns 200] [--ray-turns 40] [--paced-turns 48] [--trees 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ray
from bench_summary import summary_row, write_rows
from limit_agents import CLOCK, TOKEN_GAP_S, FanLead, PacedLead, QuickLead, StopClock

import think_actors as ta
from think_actors.runtime import _require_config
from think_actors.runtime.accounts import ACCOUNTS_NAME

PACED_AT_ONCE = 4  # leads whose paced turns run at once
LIMITS = ta.RunLimits(max_total_tokens=10_000_000, max_cost_usd=1000.0, timeout_s=3600, max_depth=5)


def machine_cpu_s() -> float:
    """Seconds of CPU every process of the machine has used (``/proc/stat``: user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:8]]
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
    return busy / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


async def in_process(turns: int) -> dict[str, float]:
    """Median CPU ms of this process per turn, without and with limits: two agents, their turns alternating (both
    histories grow alike, and are cleared every 50 turns)."""
    agents = {
        "off": QuickLead("in-process-off", store=ta.MemoryStore()),
        "on": QuickLead("in-process-on", store=ta.MemoryStore()),
    }
    spent: dict[str, list[float]] = {"off": [], "on": []}
    for index in range(turns + 10):
        for key, agent in agents.items():
            if index % 50 == 0:
                await agent.clear()
            started = time.process_time()
            await agent.save_messages("go", limits=LIMITS if key == "on" else None)
            if index >= 10:  # the first ten warm up
                spent[key].append(time.process_time() - started)
    return {key: statistics.median(values) * 1000 for key, values in spent.items()}


async def on_ray(
    turns: int, lead_class: type[ta.Think] = QuickLead, block: int = 5, at_once: int = 1
) -> dict[str, Any]:
    """Machine CPU ms and median latency ms per turn on Ray, without and with limits: ``at_once`` lead actors a side,
    each running ``block`` turns in a row, the sides alternating; the calls to the accounts actor per turn with
    limits. Several leads at once share the machine's idle work between their turns, as a service's users do."""
    leads = {
        key: [await ta.spawn(lead_class, f"{lead_class.__name__}-{key}-{i}-{time.time_ns()}") for i in range(at_once)]
        for key in ("off", "on")
    }

    async def turns_of(lead: Any, limits: ta.RunLimits | None, latency: list[float]) -> None:
        for _ in range(block):
            started = time.perf_counter()
            await lead.save_messages("go", limits=limits)
            latency.append(time.perf_counter() - started)

    warm: list[float] = []
    for key, side in leads.items():
        for _ in range(3):
            await asyncio.gather(*(turns_of(lead, LIMITS if key == "on" else None, warm) for lead in side))
    accounts = ray.get_actor(ACCOUNTS_NAME, namespace=_require_config().namespace)  # started by the first run
    calls_before = await accounts.counted.remote()
    cpu = {"off": 0.0, "on": 0.0}
    latency: dict[str, list[float]] = {"off": [], "on": []}
    blocks = max(turns // (2 * block * at_once), 1)
    for index in range(blocks):
        for key in ("off", "on") if index % 2 == 0 else ("on", "off"):
            limits = LIMITS if key == "on" else None
            before = machine_cpu_s()
            await asyncio.gather(*(turns_of(lead, limits, latency[key]) for lead in leads[key]))
            cpu[key] += machine_cpu_s() - before
    count = blocks * block * at_once
    calls = await accounts.counted.remote() - calls_before
    return {
        "calls": calls / count,
        "cpu": {key: value / count * 1000 for key, value in cpu.items()},
        "latency": {key: statistics.median(values) * 1000 for key, values in latency.items()},
    }


async def cancel_tree(clock: Any, index: int) -> list[float]:
    await clock.reset.remote()
    lead = await ta.spawn(FanLead, f"fan-{index}-{time.time_ns()}")
    stream = lead.chat("everything", limits=LIMITS)
    reader = asyncio.ensure_future(stream.collect())
    deadline = time.monotonic() + 300
    while (await clock.report.remote())[0] < 25:
        if time.monotonic() > deadline:
            raise RuntimeError("the 25 fetchers did not all start within 300 s")
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    cancelled = time.time()
    await lead.cancel_chat(stream.request_id)
    await reader
    while len((await clock.report.remote())[1]) < 25:
        if time.monotonic() > deadline:
            raise RuntimeError("not every fetcher stopped")
        await asyncio.sleep(0.05)
    return [at - cancelled for at in (await clock.report.remote())[1]]


async def main(turns: int, ray_turns: int, paced_turns: int, trees: int, json_path: str | None) -> None:
    local = await in_process(turns)
    with tempfile.TemporaryDirectory() as data_dir:
        config = ta.init(num_cpus=2, data_dir=data_dir, model_pool_size=1)
        try:
            remote = await on_ray(ray_turns)
            paced = await on_ray(paced_turns, PacedLead, block=1, at_once=PACED_AT_ONCE)
            clock: Any = StopClock.options(name=CLOCK, namespace=config.namespace).remote()
            stops: list[float] = []
            for index in range(trees):
                stops += await cancel_tree(clock, index)
        finally:
            ta.shutdown()
    steps = 3  # model steps per turn: the lead's two, the child's one
    local_added = (local["on"] - local["off"]) / steps
    ray_added = (remote["cpu"]["on"] - remote["cpu"]["off"]) / steps
    paced_added = (paced["cpu"]["on"] - paced["cpu"]["off"]) / steps
    load = os.getloadavg()[0]
    p50, p99 = percentile(stops, 0.5) * 1000, percentile(stops, 0.99) * 1000
    print("Run limits: what the accounting costs (a turn of 3 model steps, 60-token answers, one child agent)")
    print(f"  in process: CPU per turn {local['off']:.2f} ms without limits, {local['on']:.2f} ms with")
    print(f"    added per model step {local_added:.3f} ms ({local_added * steps / local['off'] * 100:+.1f} % a turn)")
    print(f"  on Ray: machine CPU per turn {remote['cpu']['off']:.1f} ms without, {remote['cpu']['on']:.1f} ms with")
    print(
        f"    added per model step {ray_added:.2f} ms ({ray_added * steps / remote['cpu']['off'] * 100:+.1f} % a turn)"
    )
    print(f"    turn latency (median) {remote['latency']['off']:.1f} ms without, {remote['latency']['on']:.1f} ms with")
    print(f"    calls to the accounts actor per turn with limits: {remote['calls']:.1f}")
    gap_ms = TOKEN_GAP_S * 1000
    print(
        f"  on Ray, the model streaming a token every {gap_ms:.0f} ms (how users run; {paced_turns} turns, "
        f"{PACED_AT_ONCE} at once):"
    )
    print(f"    machine CPU per turn {paced['cpu']['off']:.1f} ms without, {paced['cpu']['on']:.1f} ms with")
    print(
        f"    added per model step {paced_added:.2f} ms "
        f"({paced_added * steps / paced['cpu']['off'] * 100:+.1f} % a turn)"
    )
    print(f"    turn latency (median) {paced['latency']['off']:.0f} ms without, {paced['latency']['on']:.0f} ms with")
    print(f"    calls to the accounts actor per turn with limits: {paced['calls']:.1f}")
    print(f"  1-minute load average at the end: {load:.2f}")
    print(f"Cancel at the root of {trees} trees of 31 agents on Ray (an actor each): {len(stops)} fetchers")
    print(f"  cancel -> fetcher's turn stopped: p50 {p50:.0f} ms, p99 {p99:.0f} ms, slowest {max(stops) * 1000:.0f} ms")
    write_rows(
        json_path,
        [
            summary_row(
                "run limits, in process: CPU per turn with limits vs without (3 steps, 1 child)",
                local["on"],
                local["off"],
                unit="ms",
                source="bench_limits",
                target="≤ 1.05x",
                met=local["on"] <= local["off"] * 1.05,
            ),
            summary_row(
                "run limits, on Ray, instant model (worst case): machine CPU per turn with limits vs without",
                remote["cpu"]["on"],
                remote["cpu"]["off"],
                unit="ms",
                source="bench_limits",
            ),
            summary_row(
                "run limits, on Ray, instant model: calls to the accounts actor per turn (3 steps, 1 child)",
                remote["calls"],
                unit="calls",
                source="bench_limits",
            ),
            summary_row(
                "run limits, on Ray, model at a provider's pace (20 ms a token): machine CPU per turn with vs without",
                paced["cpu"]["on"],
                paced["cpu"]["off"],
                unit="ms",
                source="bench_limits",
                target="≤ 1.05x",
                met=paced["cpu"]["on"] <= paced["cpu"]["off"] * 1.05,
            ),
            summary_row(
                "run limits, on Ray: turn latency (median) with limits vs without",
                remote["latency"]["on"],
                remote["latency"]["off"],
                unit="ms",
                source="bench_limits",
            ),
            summary_row(
                "cancel at the root -> each of 25 grandchildren stopped, p50 (31 agents on Ray)",
                p50,
                unit="ms",
                source="bench_limits",
                target="< 1000 ms",
                met=p50 < 1000,
            ),
            summary_row(
                "cancel at the root -> each of 25 grandchildren stopped, p99 (31 agents on Ray)",
                p99,
                unit="ms",
                source="bench_limits",
                target="< 1000 ms",
                met=p99 < 1000,
            ),
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="in-process turns of each agent (with, without)")
    parser.add_argument("--ray-turns", type=int, default=40, help="turns on Ray, half of them with limits")
    parser.add_argument(
        "--paced-turns", type=int, default=48, help="turns on Ray with the provider-paced model, half with limits"
    )
    parser.add_argument("--trees", type=int, default=2, help="trees of 31 agents to cancel")
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.ray_turns, args.paced_turns, args.trees, args.json))
