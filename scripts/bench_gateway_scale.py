"""Gateway at scale (issue 22): ``--agents`` addressable agents chatting at random through the gateway on Ray.

The agents are provisioned (addressable, never started) and hibernate ``--idle-timeout`` seconds after their last
turn, so the node holds only the ones chatted with lately; every other agent lives in its SQLite store and a chat
wakes it. One gateway actor on local Ray (what ``think-actors serve`` starts on each machine), in front of them.
``--clients`` concurrent WebSocket clients (aiohttp, in this process) each pick an agent at random that no other
client is talking to, open a socket to it (the gateway finds, or wakes, the agent while the socket opens), send one
chat request in the Cloudflare agents protocol, read its frames to ``done`` and close, again and again for
``--duration`` seconds. The model takes 200 ms per step, then 20 chunks (``scale_agents.PacedModel``).

Reported: turns/s over the run; time to the first chunk frame p50/p99 from the moment the client opens the socket
(a wake's time included), split by whether the agent was resident when picked (its registry record) or had to
wake; the most agents resident at once (the node's ``ray::AgentHost`` processes, counted every second); memory:
USS summed over the node's Ray worker processes (agents, gateway, idle and warm workers) at its peak, and the median
USS of a resident agent's process; CPU per turn of the gateway actor and of this driver (the clients). Nothing
lost: every request's turn must end ``completed`` with the whole answer, and each agent's store must hold exactly
the messages sent to it, in order, each followed by its answer (read from the SQLite files, which needs no wake;
``--handle-checks`` agents are also read through ``ta.get`` handles, which wakes them).

A 2-core machine starts agent processes at 1.5-2/s (scripts/README-perf-notes.md), so with picks spread evenly
over 1,000 agents most turns wait for a wake and the rate is the wake rate's; the idle timeout sets how many stay
resident (the wake rate times the timeout, at ~55 MiB and a few % of a core each).

``--shared``: the agents are of a class with ``hosting = "shared"``, held many to a process by the node's shared
hosts: a wake loads an agent into a running host, the resident count is the registry's, and an agent's memory is its
hosts' USS over the agents they hold.

Usage: python scripts/bench_gateway_scale.py [--agents 1000] [--duration 60] [--clients 8] [--idle-timeout 20]
       [--warm 1] [--handle-checks 3] [--resident 0] [--shared] [--json PATH]
       (--json: the summary rows, scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import psutil
import ray
from bench_summary import summary_row, write_rows
from scale_agents import Roamer, SharedRoamer

import think_actors as ta
from think_actors import registry
from think_actors.gateway.ray_server import start_gateways
from think_actors.runtime import _require_config
from think_actors.store._codec import decode_message

EXPECTED = "abcd" * 20
AGENT: type[ta.Think] = Roamer  # --shared: SharedRoamer
SLUG = "roamer"
HOST_TITLE = "ray::AgentHost"  # the processes that hold resident agents (--shared: their shared hosts)
TURN_TIMEOUT_S = 300.0
REOPENS = 3  # a socket refused at its opening is opened again this many times
SOURCE = "bench_gateway_scale"


@dataclass
class Run:
    """What the clients did: each agent's sent message ids in order, every turn's timings, what went wrong."""

    sent: dict[int, list[str]] = field(default_factory=dict)
    busy: set[int] = field(default_factory=set)
    first_s: dict[str, list[float]] = field(default_factory=lambda: {"resident": [], "woken": []})
    connect_s: list[float] = field(default_factory=list)
    completed: int = 0
    refused: list[str] = field(default_factory=list)  # sockets the gateway refused (HTTP 5xx), opened again
    failures: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {percentile(values, 50) * 1e3:.0f} ms, p99 {percentile(values, 99) * 1e3:.0f} ms"


def name_of(agent: int) -> str:
    return f"a-{agent}"


async def chat_once(session: aiohttp.ClientSession, url: str, agent: int, message_id: str) -> tuple[float, float]:
    """One turn over a fresh socket: (socket open, socket open to first chunk frame) in seconds. Raises unless the
    turn ends ``completed`` with the whole answer."""
    opened = time.perf_counter()
    async with session.ws_connect(f"{url}/agents/{SLUG}/{name_of(agent)}") as ws:
        connect = time.perf_counter() - opened  # the gateway found or woke the agent before the handshake ended
        body = {"messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": message_id}]}]}
        request = {"type": "cf_agent_use_chat_request", "id": f"r-{message_id}"}
        await ws.send_str(json.dumps({**request, "init": {"method": "POST", "body": json.dumps(body)}}))
        first = 0.0
        text = []
        while True:
            message = await ws.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise ConnectionError(f"the socket ended before the turn did: {message.type.name}")
            data = json.loads(message.data)
            if data["type"] == "cf_agent_error":
                raise RuntimeError(data.get("error"))
            if data["type"] != "cf_agent_use_chat_response":
                continue
            if not first and data["body"]:
                first = time.perf_counter() - opened
            if data["done"]:
                break
            chunk = json.loads(data["body"]) if data["body"] else {}
            if chunk.get("type") == "text-delta":
                text.append(chunk["delta"])
        if data.get("outcome") != "completed" or "".join(text) != EXPECTED:
            raise RuntimeError(f"outcome {data.get('outcome')!r}, text {''.join(text)[:40]!r}")
    return connect, first


async def client(session: aiohttp.ClientSession, url: str, agents: int, deadline: float, run: Run) -> None:
    namespace = _require_config().namespace
    while time.perf_counter() < deadline:
        agent = random.randrange(agents)
        while agent in run.busy:  # one client talks to an agent at a time, so its history's order is known
            agent = random.randrange(agents)
        run.busy.add(agent)
        record = registry.lookup(namespace, f"{SLUG}/{name_of(agent)}")
        kind = "resident" if record is not None and record.resident else "woken"
        sent = run.sent.setdefault(agent, [])
        message_id = f"m-{agent}-{len(sent)}"
        sent.append(message_id)
        try:
            for attempt in range(REOPENS + 1):
                try:
                    turn = chat_once(session, url, agent, message_id)
                    connect, first = await asyncio.wait_for(turn, TURN_TIMEOUT_S)
                    break
                except aiohttp.WSServerHandshakeError as err:
                    # Refused before the request was sent (nothing stored): a client opens the socket again.
                    run.refused.append(f"{message_id}: {err.status} {err.message}")
                    if attempt == REOPENS:
                        raise
            run.connect_s.append(connect)
            run.first_s[kind].append(first)
            run.completed += 1
        except Exception as err:
            run.failures.append(f"{message_id}: {type(err).__name__}: {err}")
        finally:
            run.busy.discard(agent)


def raylet_pid() -> int:
    node: Any = ray._private.worker._global_node
    return int(node.all_processes["raylet"][0].process.pid)


def workers() -> list[psutil.Process]:
    try:
        return psutil.Process(raylet_pid()).children()
    except psutil.NoSuchProcess:
        return []


def title(process: psutil.Process) -> str:
    try:
        return (process.cmdline() or [""])[0]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def memory_sample() -> dict[str, float]:
    """USS of the node's Ray worker processes, all of them and a resident agent's (median), in MiB."""
    total, agents = 0.0, []
    for process in workers():
        try:
            uss = process.memory_full_info().uss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += uss
        if title(process).startswith(HOST_TITLE):
            agents.append(uss)
    if AGENT.hosting == "shared":  # a host's USS over the agents it holds
        held = ta.list_agents().resident
        return {"total": total, "agents": held, "per_agent": sum(agents) / held if held else 0.0}
    return {"total": total, "agents": len(agents), "per_agent": statistics.median(agents) if agents else 0.0}


def resident_now() -> int:
    """Agents resident now: their processes, or (``--shared``) the registry's count."""
    if AGENT.hosting == "shared":
        return ta.list_agents().resident
    return sum(title(p).startswith(HOST_TITLE) for p in workers())


def timed(work: Any) -> tuple[Any, float]:
    """``work()`` and the CPU seconds it took in this thread (the sampler's own cost, kept out of the clients')."""
    began = time.thread_time()
    return work(), time.thread_time() - began


async def watch(stop: asyncio.Event, every_s: float, memory_every_s: float, seen: dict[str, Any]) -> None:
    """Count resident agents every ``every_s`` and sample memory every ``memory_every_s`` until ``stop``; the CPU
    seconds it spent go to ``seen["cpu_s"]``."""
    last_memory = 0.0
    while not stop.is_set():
        resident, cpu = await asyncio.to_thread(timed, resident_now)
        seen["most_resident"] = max(seen["most_resident"], resident)
        seen["cpu_s"] += cpu
        if time.monotonic() - last_memory >= memory_every_s:
            last_memory = time.monotonic()
            sample, cpu = await asyncio.to_thread(timed, memory_sample)
            seen["cpu_s"] += cpu
            if sample["total"] > seen["memory"]["total"]:
                seen["memory"] = sample
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


def stored(data_dir: str, agent: int) -> list[tuple[str, str, str]]:
    """The agent's stored messages (id, role, text) in the order written, read from its SQLite file."""
    path = Path(data_dir) / SLUG / f"{name_of(agent)}.db"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, role, body FROM messages ORDER BY seq").fetchall()
    finally:
        conn.close()
    return [(row[0], row[1], decode_message(row[2]).text) for row in rows]


def verify_stores(data_dir: str, run: Run) -> list[str]:
    """Each agent's store holds exactly its sent messages, in order, each followed by the whole answer."""
    wrong = []
    for agent, ids in run.sent.items():
        try:
            rows = stored(data_dir, agent)
        except sqlite3.Error as err:
            wrong.append(f"{name_of(agent)}: its store cannot be read: {err}")
            continue
        users = [(i, text) for i, role, text in rows if role == "user"]
        answers = [text for _, role, text in rows if role == "assistant"]
        roles = [role for _, role, _ in rows]
        if (
            users != [(i, i) for i in ids]
            or answers != [EXPECTED] * len(ids)
            or roles != ["user", "assistant"] * len(ids)
        ):
            wrong.append(f"{name_of(agent)}: sent {ids}, stored {[(i, r) for i, r, _ in rows]}")
    return wrong


async def verify_handles(run: Run, count: int) -> list[str]:
    """The same check for ``count`` agents through ``ta.get`` handles (each wakes its agent)."""
    wrong = []
    for agent in random.sample(sorted(run.sent), min(count, len(run.sent))):
        handle = await ta.get(AGENT, name_of(agent))
        got = [(m.role, m.text) for m in await handle.get_messages()]
        if got != [pair for i in run.sent[agent] for pair in (("user", i), ("assistant", EXPECTED))]:
            wrong.append(f"{name_of(agent)} through its handle: {got}")
    return wrong


async def prewake(agents: int, count: int, wave: int = 8) -> float:
    """Wake ``count`` agents picked at random, ``wave`` at a time; seconds it took."""
    began = time.perf_counter()
    picked = random.sample(range(agents), count)
    for start in range(0, count, wave):
        handles = [ta.provision(AGENT, name_of(i)) for i in picked[start : start + wave]]
        await asyncio.gather(*(h.info() for h in handles))
    return time.perf_counter() - began


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000, help="addressable agents")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds the clients start new turns")
    parser.add_argument("--clients", type=int, default=8, help="concurrent WebSocket clients")
    parser.add_argument("--idle-timeout", type=float, default=20.0, help="seconds after its last turn an agent sleeps")
    parser.add_argument("--warm", type=int, default=1, help="warm worker processes per node (ta.init warm_workers)")
    parser.add_argument("--handle-checks", type=int, default=3, help="agents whose history is read through handles")
    parser.add_argument(
        "--resident",
        type=int,
        default=0,
        help="agents woken before the clients start (a resident set to hit; give an --idle-timeout longer than "
        "their waking takes, ~1 s each on 2 cores, or the first hibernate before the clients begin)",
    )
    parser.add_argument(
        "--shared", action="store_true", help='agents of a class with hosting = "shared" (many to a process)'
    )
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    if args.shared:
        global AGENT, SLUG, HOST_TITLE
        AGENT, SLUG, HOST_TITLE = SharedRoamer, "shared-roamer", "ray::SharedHost"
    if not args.clients < args.agents:
        parser.error("--clients must be fewer than --agents: each client talks to an agent no other client has")
    print(f"1-minute load average at the start: {load()} ({os.cpu_count()} cores)", flush=True)
    with tempfile.TemporaryDirectory() as data_dir:
        ta.init(
            num_cpus=2,
            data_dir=data_dir,
            namespace=f"bench-gateway-scale-{time.time_ns()}",
            idle_timeout_s=args.idle_timeout,
            warm_workers=args.warm,
        )
        try:
            began = time.perf_counter()
            for i in range(args.agents):
                ta.provision(AGENT, name_of(i))
            provision_s = time.perf_counter() - began
            prewake_s = await prewake(args.agents, args.resident)
            [(gateway, url)] = await start_gateways("scale_agents", host="127.0.0.1", port=0, options={})
            gateway_process = psutil.Process(await gateway.__ray_call__.remote(lambda self: os.getpid()))
            await asyncio.sleep(5)  # the warm worker that ta.init asked for has booted, as on a node that idled
            run, stop = Run(), asyncio.Event()
            seen: dict[str, Any] = {
                "most_resident": 0,
                "cpu_s": 0.0,
                "memory": {"total": 0.0, "agents": 0, "per_agent": 0.0},
            }
            watcher = asyncio.ensure_future(watch(stop, 1.0, 10.0, seen))
            driver = psutil.Process()
            cpu_before = (cpu_seconds(gateway_process), cpu_seconds(driver))
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                began = time.perf_counter()
                deadline = began + args.duration
                await asyncio.gather(*(client(session, url, args.agents, deadline, run) for _ in range(args.clients)))
                elapsed = time.perf_counter() - began
            gateway_cpu_s = cpu_seconds(gateway_process) - cpu_before[0]
            cpu_gateway = gateway_cpu_s / max(run.completed, 1) * 1e3
            stop.set()
            await watcher
            cpu_driver = (cpu_seconds(driver) - cpu_before[1] - seen["cpu_s"]) / max(run.completed, 1) * 1e3
            resident_at_end = ta.list_agents().resident
            wrong = verify_stores(data_dir, run)
            wrong += await verify_handles(run, args.handle_checks)
            await gateway.stop.remote()
        finally:
            ta.shutdown()
    sent = sum(len(ids) for ids in run.sent.values())
    firsts = run.first_s["resident"] + run.first_s["woken"]
    resident, woken = run.first_s["resident"], run.first_s["woken"]
    memory = seen["memory"]
    print(
        f"{args.agents} addressable agents{' (hosting = shared)' if args.shared else ''} "
        f"(provisioned in {provision_s:.1f} s), {args.clients} clients for "
        f"{args.duration:.0f} s, idle timeout {args.idle_timeout:.0f} s, {args.warm} warm worker(s), {args.resident} "
        f"woken first ({prewake_s:.0f} s): {run.completed} "
        f"turns in {elapsed:.1f} s = {run.completed / elapsed:.2f} turns/s; {len(run.sent)} agents chatted with; "
        f"at most {seen['most_resident']} resident, {resident_at_end} at the end [load {load()}]",
        flush=True,
    )
    for failure in (run.failures + wrong)[:10]:
        print(f"  LOST: {failure}", flush=True)
    for refusal in run.refused[:5]:
        print(f"  refused, opened again: {refusal}", flush=True)
    ratio = f", p50 {percentile(woken, 50) / percentile(resident, 50):.1f}x the resident's" if resident else ""
    rows = [
        ("turns/s through the gateway", f"{run.completed / elapsed:.2f} ({run.completed} turns in {elapsed:.0f} s)"),
        ("time to first chunk (socket opened -> first chunk frame), all turns", spread(firsts)),
        (f"  agent resident when picked ({len(resident)} turns)", spread(resident)),
        (f"  agent woken by the turn ({len(woken)} turns)", spread(woken) + (ratio if woken else "")),
        (
            "most agents resident at once",
            f"{seen['most_resident']} of {args.agents} ({seen['most_resident'] / args.agents:.1%})",
        ),
        (
            "USS of the node's Ray workers at its peak",
            f"{memory['total'] / 1024:.2f} GiB with {memory['agents']} agents resident",
        ),
        ("USS per resident agent (median)", f"{memory['per_agent']:.1f} MiB"),
        (
            "CPU per turn: gateway actor, clients (this process, the sampler's CPU left out)",
            f"{cpu_gateway:.1f} ms ({gateway_cpu_s / elapsed:.1%} of a core over the run), {cpu_driver:.1f} ms",
        ),
        (
            "lost: turns not completed, stores not matching what was sent",
            f"{len(run.failures)} of {sent} turns, {len(wrong)} of {len(run.sent)} agents",
        ),
        ("sockets refused at opening (HTTP 5xx) and opened again", f"{len(run.refused)} of {sent} turns"),
    ]
    print("\n| gateway at scale | measured |\n|---|---|")
    for what, measured in rows:
        print(f"| {what} | {measured} |")
    print(f"1-minute load average at the end: {load()} (over 2: other work shared the machine)", flush=True)
    what = f"gateway, {args.agents:,} addressable agents{' (shared)' if args.shared else ''}, {args.duration:.0f} s:"
    lost = len(run.failures) + len(wrong)
    write_rows(
        args.json,
        [
            summary_row(f"{what} turns/s", run.completed / elapsed, unit="turns/s", source=SOURCE),
            summary_row(
                f"{what} first chunk p99", percentile(firsts, 99) * 1e3 if firsts else None, unit="ms", source=SOURCE
            ),
            summary_row(f"{what} most agents resident at once", seen["most_resident"], unit="", source=SOURCE),
            summary_row(f"{what} USS per resident agent (median)", memory["per_agent"], unit="MiB", source=SOURCE),
            summary_row(
                f"{what} turns lost and stores not matching", lost, unit="", source=SOURCE, target="none", met=lost == 0
            ),
        ],
    )
    if run.failures or wrong:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
