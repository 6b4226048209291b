"""Where a streamed token's CPU goes: N WebSocket chats through the gateway at a provider's real pace.

Starts ``paced_provider.py`` (its own process), ``ta.init`` with one gateway actor, and ``--users`` clients that
each chat with an agent of their own: send a message, read the streamed answer, pause 1-3 s, again, for
``--duration`` seconds. Prints the CPU seconds every process spent per streamed token, grouped by role (the
gateway, the agents' processes, the model servers, the raylet, the GCS, the clients, the provider).

Usage: python scripts/probe_live.py [--users 10] [--duration 30] [--shared] [--tokens-per-s 50] [--stream-latency-ms 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import aiohttp  # noqa: E402
import psutil  # noqa: E402


def start_provider(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, str(HERE / "paced_provider.py"), "--tokens-per-s", str(args.tokens_per_s)]
    command += ["--tokens", str(args.tokens), "--first-token-s", str(args.first_token_s)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.split()[-1]


async def user(session: aiohttp.ClientSession, url: str, name: str, deadline: float, seen: dict) -> None:
    async with session.ws_connect(f"{url}/agents/{name}") as ws:
        turn = 0
        while time.perf_counter() < deadline:
            turn += 1
            message_id = f"{name.replace('/', '-')}-{turn}"
            body = {"messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
            request = {"type": "cf_agent_use_chat_request", "id": f"r-{message_id}"}
            sent = time.perf_counter()
            await ws.send_str(json.dumps({**request, "init": {"method": "POST", "body": json.dumps(body)}}))
            first = None
            last = None
            while True:
                msg = await ws.receive()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    raise ConnectionError(msg.type.name)
                data = json.loads(msg.data)
                if data.get("type") != "cf_agent_use_chat_response" or data.get("id") != f"r-{message_id}":
                    continue
                if data["done"]:
                    break
                chunk = json.loads(data["body"]) if data["body"] else {}
                if chunk.get("type") == "text-delta":
                    now = time.perf_counter()
                    if first is None:
                        first = now - sent
                    elif last is not None:
                        seen["gaps"].append(now - last)
                    last = now
                    seen["tokens"] += 1
            seen["first"].append(first or 0.0)
            seen["turns"] += 1
            await asyncio.sleep(random.uniform(1, 3))


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * (len(values) - 1)))] * 1e3 if values else 0.0


def role(process: psutil.Process) -> str:
    try:
        name = " ".join(process.cmdline()[:3])
    except psutil.Error:
        return "gone"
    for key in (
        "AgentHost",
        "SharedHost",
        "ModelServer",
        "GatewayServer",
        "raylet",
        "gcs_server",
        "paced_provider",
        "dashboard",
        "IDLE",
        "log_monitor",
    ):
        if key in name:
            return key
    if process.pid == os.getpid():
        return "driver+clients"
    return "other:" + process.name()


def cpu_by_pid() -> dict[int, tuple[str, float]]:
    """CPU seconds of this process and its descendants (this run's Ray and provider; not other work here)."""
    out = {}
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
            out[process.pid] = (role(process), times.user + times.system)
        except psutil.Error:
            pass
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--shared", action="store_true")
    parser.add_argument("--tokens-per-s", type=float, default=50)
    parser.add_argument("--tokens", type=int, default=60)
    parser.add_argument("--first-token-s", type=float, default=0.3)
    parser.add_argument("--stream-latency-ms", type=float, default=0.0, help="ta.init(stream_latency_ms=...)")
    parser.add_argument("--profile", default="", help="py-spy the gateway/agents to this directory")
    args = parser.parse_args()
    provider, base = start_provider(args)
    os.environ["OPENAI_API_BASE"] = base
    os.environ["OPENAI_API_KEY"] = "sk-bench"
    import think_actors as ta
    from think_actors.gateway.ray_server import start_gateways

    slug = "shared-live-chat" if args.shared else "live-chat"
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            ta.init(
                num_cpus=2,
                data_dir=data_dir,
                namespace=f"probe-live-{time.time_ns()}",
                stream_latency_ms=args.stream_latency_ms,
            )
            [(_gateway, url)] = await start_gateways("live_agents", host="127.0.0.1", port=0, options={})
            seen = {"tokens": 0, "turns": 0, "first": [], "gaps": []}
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                # warm up: every agent up, one turn each
                await asyncio.gather(
                    *(
                        user(session, url, f"{slug}/u{i}", 0, {"tokens": 0, "turns": 0, "first": [], "gaps": []})
                        for i in range(args.users)
                    )
                )
                await asyncio.sleep(8)  # the pool's second model server boots (litellm's import) off the count
                before = cpu_by_pid()
                seen = {"tokens": 0, "turns": 0, "first": [], "gaps": []}
                began = time.perf_counter()
                await asyncio.gather(
                    *(user(session, url, f"{slug}/u{i}", began + args.duration, seen) for i in range(args.users))
                )
                elapsed = time.perf_counter() - began
                after = cpu_by_pid()
            roles: dict[str, float] = {}
            for pid, (name, cpu) in after.items():
                if pid not in before:
                    print(f"  (started during the run, left out: {name})")
                    continue
                roles[name] = roles.get(name, 0.0) + cpu - before.get(pid, (name, 0.0))[1]
            tokens = max(seen["tokens"], 1)
            print(
                f"{args.users} users, {elapsed:.0f} s, {seen['turns']} turns, {seen['tokens']} tokens "
                f"({seen['tokens'] / elapsed:.0f}/s)"
            )
            firsts = sorted(seen["first"])
            gaps = sorted(seen["gaps"])
            print(
                f"first token p50 {pct(firsts, 0.5):.0f} ms p99 {pct(firsts, 0.99):.0f} ms; "
                f"gap p50 {pct(gaps, 0.5):.1f} ms p99 {pct(gaps, 0.99):.1f} ms"
            )
            total = 0.0
            for name, cpu in sorted(roles.items(), key=lambda kv: -kv[1]):
                if cpu > 0.05:
                    total += cpu
                    print(
                        f"  {name:20s} {cpu:7.2f} s  {cpu / tokens * 1e3:6.3f} ms/token  {cpu / elapsed:5.1%} of a core"
                    )
            print(f"  {'total':20s} {total:7.2f} s  {total / tokens * 1e3:6.3f} ms/token")
            ta.shutdown()
    finally:
        provider.terminate()


if __name__ == "__main__":
    asyncio.run(main())
