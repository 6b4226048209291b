"""Capacity at a real provider's pace: how many people can chat at once through each system on this machine.

The workload is what users do: N people chat at once through a WebSocket server, each sending a message, reading
the streamed answer to its end, pausing uniformly 1-3 s and sending the next (scripts/live_load.py, every client in
this process). The model is scripts/paced_provider.py, a process of its own: the first token after 300 ms, then 50
tokens/s, 60 tokens, one token per SSE event. The systems, side by side, each started as its own process(es) and
stopped after its rows (scripts/live_systems.py):

- floor: scripts/floor_relay.py, a bare aiohttp relay of the same frames (no agent, no store);
- peer: scripts/peer_relay.py, openai-agents' ``Runner.run_streamed`` behind the same relay (.venv-bench);
- local: ``think-actors serve --local --app live_agents`` (agents in the server's process, SQLite stores);
- shared: ``think-actors serve --app live_agents`` on its own Ray, ``hosting = "shared"`` agents;
- actor: the same on a Ray of its own, an actor per agent.

For each system the ramp finds the largest N whose added first-token latency (from sending to the first
``text-delta`` frame, minus the provider's own 300 ms) stays under 100 ms at p99 with nothing lost (every turn
``completed`` with the whole answer, ``paced_provider.answer(60)``): N doubles from a start per system (halving
while the first step fails), then bisects between the last pass and the first fail, up to ``--cap`` or until the
machine's memory would run out. Users join within 2 s of a step and the step waits until every one of them has
finished a turn (an agent woken, a process started); then a window measures the turns sent in it. After the ramp,
``--pace-n`` users send ``tool: ...`` messages, then chat at 150, 50 and 10 tokens/s (the 50 row compares systems'
CPU at one N) (the model calls ``lookup``, then
answers in a second step: the provider's own first text token comes after 300 + 20 + 300 ms).

Per step: turns sent in the window, lost (ended wrong) and unfinished (not ended 5 s after the window plus a turn's
length); first-token p50/p99 and the added p99; the gaps between ``text-delta`` frames as the client sees them (the
provider's own: 1 / pace); CPU per turn and per streamed token of every process of the system (its tree: for Ray the
GCS, raylet, agents, gateway actor, model servers, idle workers, Ray's helpers), never the clients' or the
provider's; USS of the system at the end of the window, per conversation (USS / N, and the marginal cost: over the
USS after the warm-up's ``WARM_USERS`` conversations, since Ray's model servers start at first use); the clients'
own CPU and how late their event loop woke (p99), which every client-side figure includes. Per system: the USS and
CPU with no conversation (the quietest half second after the start). Ray rows add CPU and USS by process role.

The machine is small and shared, and the clients and the provider run on it too: every row carries the 1-minute
load average, a row whose clients used more than ``CLIENT_CORE_WARN`` of a core says so, and so does one where the
provider itself wrote more than 1% of its tokens over 5 ms late (the machine was short of CPU then; the verdict stays
the clients'). The whole run keeps to ``Plan.budget_s`` (a ramp stops early when its system's share of the time is
spent, and says so); a server that does not come up is started afresh, up to ``START_ATTEMPTS`` times.
``--quick``: the ramps only (floor, local, shared, actor), two short steps each.

Usage: python scripts/bench_live.py [--quick] [--systems floor,peer,local,shared,actor] [--json PATH] [--cap 800]
       [--pace-n 20] [--start floor=400,actor=8] [--ray-worker-niceness 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
from live_load import Load, percentile
from live_report import CLIENT_CORE_WARN, HEADER, Result, cores, print_row, print_summary, summary, summary_json
from live_systems import BENCH_PYTHON, SPECS, Provider, StartError, System
from paced_provider import answer

FIRST_TOKEN_S = 0.3
TOKENS = 60
PACE = 50.0
TARGET_ADDED_MS = 100.0
WARM_USERS = 4
STEP_OVERHEAD_S = 5.0  # a step's settling and the wait for its last turns, about
STOP_S = 5.0  # stopping a system, about
START_ATTEMPTS = 3  # a server that fails to come up is started afresh (a Ray gateway actor can die as it starts)
MEMORY_SHARE = 0.7  # a step may take at most this share of the memory available before it
SYSTEMS = tuple(SPECS)


@dataclass(frozen=True)
class Plan:
    """How long and how far each system is driven."""

    window_s: float  # a ramp step's measurement
    settle_s: float  # at least this long after users join or leave, before a window
    start: dict[str, int]  # the ramp's first N per system
    max_steps: int
    bisections: int
    side_window_s: float = 0.0  # the pace and tool steps'
    idle_s: float = 3.0  # the baseline's CPU: the quietest half second of this long (0: not measured)
    budget_s: float = 570.0  # the whole run's; each ramp stops early to keep to its share
    sides_s: float = 0.0  # what a system's pace and tool steps take, about
    paces: tuple[float, ...] = ()
    tool: bool = False


STARTS = {"floor": 400, "peer": 32, "local": 200, "shared": 50, "actor": 16}
FULL = Plan(
    window_s=7.0,
    settle_s=1.5,
    start=STARTS,
    max_steps=7,
    bisections=2,
    side_window_s=5.0,
    paces=(10.0, 50.0, 150.0),
    tool=True,
    sides_s=50.0,
)
QUICK = Plan(
    window_s=3.0,
    settle_s=1.0,
    start=STARTS,
    max_steps=2,
    bisections=0,
    idle_s=0.0,  # a Ray node still boots workers for seconds after its start: too short a look misleads
    budget_s=140.0,
)


def load1() -> float:
    return os.getloadavg()[0]


def own_cpu_s() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


async def measure(
    system: System,
    provider: Provider,
    load: Load,
    *,
    n: int,
    phase: str,
    pace: float,
    window_s: float,
    settle_s: float,
    warm_mib: float,
) -> dict[str, Any]:
    """Bring the load to ``n`` users, let it settle, measure a window; the row."""
    step_began = time.perf_counter()
    joining = max(0, n - load.n)
    await load.resize(n)
    ready = await load.settle(settle_s, cap_s=20.0 + 1.0 * joining)  # an actor per agent starts ~2/s here
    await asyncio.to_thread(provider.reset)
    cpu_before, provider_before = system.cpu(), provider.cpu_s()
    own_before, tokens_before, completed_before = own_cpu_s(), load.tokens, load.completed
    began = time.perf_counter()
    await asyncio.sleep(window_s)
    ended = time.perf_counter()
    own_after, tokens, completed = own_cpu_s(), load.tokens - tokens_before, load.completed - completed_before
    cpu_after, provider_after = system.cpu(), provider.cpu_s()
    roles = System.cpu_delta(cpu_before, cpu_after)
    uss_mib, processes, uss_roles = await asyncio.to_thread(system.uss_mib)
    provider_stats = await asyncio.to_thread(provider.stats)
    window = [t for t in load.turns if began <= t.sent < ended]
    await load.wait_until(lambda: all(t.done for t in window), 5.0 + FIRST_TOKEN_S * 2 + TOKENS / pace)
    own_first_s = FIRST_TOKEN_S * 2 + 1 / pace if phase == "tool" else FIRST_TOKEN_S
    firsts = [t.first_s for t in window if t.first_s is not None]
    # A turn that never had a first token counts as infinitely late.
    firsts += [math.inf] * sum(1 for t in window if t.first_s is None)
    gaps = [g for t in window for g in t.gaps]
    lost = [t for t in window if t.done and not t.ok]
    unfinished = sum(1 for t in window if not t.done)
    cpu_s = sum(roles.values())
    added_p99_ms = (percentile(firsts, 99) - own_first_s) * 1e3
    row = {
        "system": system.name,
        "phase": phase,
        "tokens_per_s": pace,
        "n": n,
        "ready": ready,
        "turns": len(window),
        "lost": len(lost),
        "unfinished": unfinished,
        "lost_examples": sorted({t.error for t in lost})[:3],
        "first_p50_ms": percentile(firsts, 50) * 1e3,
        "first_p99_ms": percentile(firsts, 99) * 1e3,
        "added_first_p99_ms": added_p99_ms,
        "gap_p50_ms": percentile(gaps, 50) * 1e3,
        "gap_p99_ms": percentile(gaps, 99) * 1e3,
        "added_gap_p99_ms": (percentile(gaps, 99) - 1 / pace) * 1e3,
        "cpu_ms_per_turn": cpu_s / max(completed, 1) * 1e3,
        "cpu_ms_per_token": cpu_s / max(tokens, 1) * 1e3,
        "server_cores": cpu_s / (ended - began),
        "cpu_s_by_role": {k: round(v, 3) for k, v in sorted(roles.items(), key=lambda kv: -kv[1]) if v >= 0.005},
        "uss_mib": uss_mib,
        "uss_mib_by_role": {k: round(v, 1) for k, v in sorted(uss_roles.items(), key=lambda kv: -kv[1])},
        "processes": processes,
        "mib_per_conversation": uss_mib / n if n else 0.0,
        # What one more conversation costs: over the USS after the warm-up (Ray's model servers start at first use).
        "mib_per_added_conversation": (uss_mib - warm_mib) / (n - WARM_USERS) if n > WARM_USERS else 0.0,
        "client_cores": (own_after - own_before) / (ended - began),
        "client_lag_p99_ms": load.lag_p99_ms(began, ended),
        "provider_cores": (provider_after - provider_before) / (ended - began),
        "provider_late_tokens": provider_stats["late_tokens"],
        "provider_late_share": provider_stats["late_tokens"] / max(provider_stats["written"], 1),
        "provider_late_ms_max": provider_stats["late_ms_max"],
        "load1": load1(),
        "step_s": time.perf_counter() - step_began,
    }
    row["passed"] = bool(window) and not lost and not unfinished and added_p99_ms < TARGET_ADDED_MS
    return row


async def ramp(
    system: System, provider: Provider, load: Load, plan: Plan, cap: int, result: Result, until: float
) -> None:
    """Double N from the plan's start (halving while the first steps fail), then bisect; rows into ``result``.
    No step starts that would end after ``until`` (perf_counter), unless none ran yet."""
    n = min(plan.start[system.name], cap)
    passed, failed, bisections = 0, 0, 0
    for step in range(plan.max_steps):
        if step and time.perf_counter() + plan.window_s + STEP_OVERHEAD_S > until:
            result.stopped_by = "its share of the time budget"
            break
        row = await measure(
            system,
            provider,
            load,
            n=n,
            phase="ramp",
            pace=PACE,
            window_s=plan.window_s,
            settle_s=plan.settle_s,
            warm_mib=result.warm_mib,
        )
        result.rows.append(row)
        print_row(row)
        if row["passed"]:
            passed = max(passed, n)
        else:
            failed = min(failed, n) if failed else n
        if not failed:
            if n >= cap:
                result.capped = True
                result.stopped_by = f"the cap ({cap})"
                break
            following = min(2 * n, cap)
        elif not passed:
            if n <= 1:
                break
            following = n // 2
        else:
            if bisections >= plan.bisections or failed - passed <= max(2, passed // 8):
                break
            following = (passed + failed) // 2
            bisections += 1
        growth = following - n
        per_conversation = max(row["mib_per_added_conversation"], 0.05)
        available = psutil.virtual_memory().available / 2**20
        if growth > 0 and growth * per_conversation > MEMORY_SHARE * available:
            result.stopped_by = f"memory: {following} would need ~{growth * per_conversation:.0f} MiB more"
            break
        n = following
    result.largest = passed


async def run_system(name: str, plan: Plan, provider: Provider, args: argparse.Namespace, until: float) -> Result:
    """Start a system, ramp it, run its pace and tool steps, stop it; its ramp ends in time for the rest to end
    by ``until`` (perf_counter)."""
    result = Result(name)
    began = time.perf_counter()
    await asyncio.to_thread(provider.set_pace, PACE)
    options = {"ray_worker_niceness": args.ray_worker_niceness, "stream_latency_ms": args.stream_latency_ms}
    system = System(name, provider.base, **options)
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await asyncio.to_thread(system.start)
                break
            except StartError as err:
                print(f"  {name}: start {attempt} of {START_ATTEMPTS} failed: {err}".rstrip(), flush=True)
                await asyncio.to_thread(system.stop)
                if attempt == START_ATTEMPTS:
                    raise
                system = System(name, provider.base, **options)
        print(
            f"\n{SPECS[name].label}: up in {time.perf_counter() - began:.1f} s at {system.url} "
            f"(load average {load1():.1f})",
            flush=True,
        )
        # The quietest half second: right after the start, workers may still be booting.
        slices = []
        for _ in range(round(plan.idle_s / 0.5)):
            before = system.cpu()
            await asyncio.sleep(0.5)
            slices.append(sum(System.cpu_delta(before, system.cpu()).values()) / 0.5)
        result.idle_cores = min(slices) if slices else None
        result.baseline_mib, processes, _ = await asyncio.to_thread(system.uss_mib)
        print(
            f"  baseline, no conversation: USS {result.baseline_mib:.0f} MiB in {processes} processes, "
            f"CPU {cores(result.idle_cores)}",
            flush=True,
        )
        async with Load(system.agent_url, answer(TOKENS)) as load:
            await load.resize(WARM_USERS)  # lazy start-up (model servers, imports) outside the windows
            await load.settle(1.0, 60.0)
            result.warm_mib, _, _ = await asyncio.to_thread(system.uss_mib)
            print(HEADER + "\n" + "|---" * HEADER.count(" | ") + "|---|", flush=True)
            await ramp(system, provider, load, plan, args.cap, result, until - plan.sides_s - STOP_S)
            # The pace and tool steps: the turns of the step before end first (a change of pace applies to the
            # provider's next streams), so their tokens stay out of the window.
            previous = PACE
            # The slowest pace last: its long turns would otherwise hold up the next step's start.
            sides = ([("tool", PACE)] if plan.tool else []) + [("pace", p) for p in sorted(plan.paces, reverse=True)]
            for phase, pace in sides:
                await asyncio.to_thread(provider.set_pace, pace)
                load.tool = phase == "tool"
                row = await measure(
                    system,
                    provider,
                    load,
                    n=args.pace_n,
                    phase=phase,
                    pace=pace,
                    window_s=plan.side_window_s,
                    settle_s=plan.settle_s + FIRST_TOKEN_S + TOKENS / previous,
                    warm_mib=result.warm_mib,
                )
                result.rows.append(row)
                print_row(row)
                previous = pace
            all_lost = sum(1 for t in load.turns if t.done and not t.ok)
        print(f"  {len(load.turns)} turns in all, {all_lost} lost (in or out of windows)", flush=True)
        if all_lost:
            for line in await asyncio.to_thread(system.error_lines):
                print(f"    server log: {line}", flush=True)
    finally:
        stopping = time.perf_counter()
        await asyncio.to_thread(system.stop)
        print(f"  stopped in {time.perf_counter() - stopping:.1f} s", flush=True)
    result.took_s = time.perf_counter() - began
    stopped = f"; the ramp stopped at {result.stopped_by}" if result.stopped_by else ""
    print(
        f"  {name}: largest passing N {result.largest}{stopped}; {result.took_s:.0f} s with start and stop", flush=True
    )
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ramps only (floor, local, shared, actor), short steps")
    parser.add_argument("--systems", default=None, help=f"comma-separated, of {','.join(SYSTEMS)}")
    parser.add_argument("--json", default=None, help="write the rows and the summary here")
    parser.add_argument("--cap", type=int, default=800, help="the ramp's largest N")
    parser.add_argument("--pace-n", type=int, default=20, help="users of the pace and tool steps")
    parser.add_argument("--start", default="", help="the ramps' first N, e.g. floor=400,actor=8 (default: the plan's)")
    parser.add_argument(
        "--ray-worker-niceness",
        type=int,
        default=None,
        help="RAY_worker_niceness for the Ray systems (default: Ray's own, 15: agents and the gateway actor yield "
        "the CPU to the clients and the provider, which share this machine)",
    )
    parser.add_argument(
        "--stream-latency-ms",
        type=float,
        default=0.0,
        help="the Ray systems' latency budget (serve --stream-latency-ms; default 0: each token sent at once)",
    )
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    try:
        starts = dict(item.split("=") for item in args.start.split(",") if item)
        plan = replace(plan, start={**plan.start, **{k: int(v) for k, v in starts.items()}})
    except ValueError:
        parser.error(f"--start {args.start!r}: give system=N pairs, comma-separated")
    chosen = args.systems.split(",") if args.systems else [s for s in SYSTEMS if not (args.quick and s == "peer")]
    unknown = set(chosen) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}: choose from {','.join(SYSTEMS)}")
    if "peer" in chosen and not BENCH_PYTHON.exists():
        print("peer skipped: .venv-bench is missing (make bench-peers ARGS=--help builds it)", flush=True)
        chosen.remove("peer")
    # A TERM (``timeout``, a CI runner) ends the run as Ctrl-C does: the servers and the provider are stopped.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    began = time.perf_counter()
    start_load = load1()
    print(
        f"bench_live{' --quick' if args.quick else ''}: {', '.join(chosen)}; {os.cpu_count()} cores, "
        f"{psutil.virtual_memory().available / 2**30:.1f} GiB available, 1-minute load average {start_load:.1f} "
        f"at the start (above 0 when others share the machine: numbers are noisy then)",
        flush=True,
    )
    provider = await asyncio.to_thread(Provider, first_token_s=FIRST_TOKEN_S, tokens_per_s=PACE, tokens=TOKENS)
    results: dict[str, Result] = {}
    try:
        deadline = began + plan.budget_s
        for i, name in enumerate(chosen):
            share = (deadline - time.perf_counter()) / (len(chosen) - i)
            try:
                results[name] = await run_system(name, plan, provider, args, time.perf_counter() + share)
            except StartError:
                results[name] = Result(name, stopped_by=f"no start in {START_ATTEMPTS} attempts")
    finally:
        provider.stop()
    table = summary(results, args.cap)
    print_summary(table)
    took_s = time.perf_counter() - began
    print(
        f"\ntook {took_s:.0f} s; 1-minute load average {start_load:.1f} at the start, {load1():.1f} at the end",
        flush=True,
    )
    busy = [r for res in results.values() for r in res.rows if r["client_cores"] > CLIENT_CORE_WARN]
    if busy:
        print(
            f"warning: in {len(busy)} rows the clients used more than {CLIENT_CORE_WARN:.0%} of a core: their own "
            "delays count against the system there",
            flush=True,
        )
    if args.json:
        document = {
            "bench": "bench_live",
            "quick": args.quick,
            "cores": os.cpu_count(),
            "load1_start": start_load,
            "load1_end": load1(),
            "took_s": took_s,
            "cap": args.cap,
            "provider": {"first_token_s": FIRST_TOKEN_S, "tokens_per_s": PACE, "tokens": TOKENS},
            "systems": {
                name: {
                    "largest_n": r.largest,
                    "capped": r.capped,
                    "stopped_by": r.stopped_by,
                    "baseline_mib": r.baseline_mib,
                    "warm_mib": r.warm_mib,
                    "idle_cores": r.idle_cores,
                    "took_s": r.took_s,
                }
                for name, r in results.items()
            },
            "rows": [row for r in results.values() for row in r.rows],
            "summary": summary_json(table),
        }
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(document, indent=1, default=str))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("stopped before the end: the servers and the provider were stopped", file=sys.stderr)
        sys.exit(1)
