"""Gateway load on loopback: N concurrent WebSocket clients, each chatting with its own agent through one gateway.

The gateway runs as ``think-actors serve --local`` in its own process (agents in that process, SQLite stores);
the clients run here. Each client connects, sends one chat request, and reads frames until its ``done`` frame.
Prints p50/p99 time to the first chunk frame, turns per second over the whole run, and whether every answer
arrived complete (20 text chunks each).

Usage: python scripts/bench_gateway.py [--clients 100] [--json PATH]  (--json: the summary rows, bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from bench_summary import summary_row, write_rows

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = "".join(f"word{i} " for i in range(20))
SOURCE = "bench_gateway"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def client(session: aiohttp.ClientSession, base: str, i: int) -> tuple[float, bool]:
    async with session.ws_connect(f"{base}/agents/load-agent/client-{i}") as ws:
        await ws.receive()  # the transcript on connect
        body = {"messages": [{"id": f"u{i}", "role": "user", "parts": [{"type": "text", "text": "hello"}]}]}
        frame = {
            "type": "cf_agent_use_chat_request",
            "id": f"r{i}",
            "init": {"method": "POST", "body": json.dumps(body)},
        }
        start = time.perf_counter()
        await ws.send_str(json.dumps(frame))
        first = 0.0
        text = []
        while True:
            data = json.loads((await ws.receive()).data)
            if data["type"] != "cf_agent_use_chat_response":
                continue
            if not first and data["body"]:
                first = time.perf_counter() - start
            if data["done"]:
                break
            chunk = json.loads(data["body"]) if data["body"] else {}
            if chunk.get("type") == "text-delta":
                text.append(chunk["delta"])
        return first, "".join(text) == EXPECTED


async def main(clients: int, json_path: str | None) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts"), "THINK_ACTORS_DATA_DIR": data_dir}
        server = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "think_actors.gateway.cli",
            "serve",
            "--local",
            "--app",
            "bench_agents",
            "--port",
            str(port),
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                for _ in range(400):
                    try:
                        async with session.get(f"{base}/healthz"):
                            break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.05)
                await client(session, base, -1)  # warm-up: imports and the first store open
                start = time.perf_counter()
                results = await asyncio.gather(*(client(session, base, i) for i in range(clients)))
                elapsed = time.perf_counter() - start
        finally:
            server.terminate()
            await server.wait()
    firsts = sorted(first for first, _ in results)
    complete = sum(ok for _, ok in results)
    p99 = firsts[min(len(firsts) - 1, round(0.99 * (len(firsts) - 1)))]
    print(f"Gateway on loopback: {clients} concurrent WebSocket clients, one agent each, 20-chunk answers")
    print(f"  time to first chunk  p50 {statistics.median(firsts) * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms")
    print(f"  turns per second     {clients / elapsed:7.1f}   ({clients} turns in {elapsed:.2f} s)")
    print(f"  complete answers     {complete} of {clients}")
    what = f"gateway --local, {clients} WebSocket clients at once:"
    write_rows(
        json_path,
        [
            summary_row(f"{what} first chunk p50", statistics.median(firsts) * 1e3, unit="ms", source=SOURCE),
            summary_row(f"{what} first chunk p99", p99 * 1e3, unit="ms", source=SOURCE),
            summary_row(f"{what} turns/s", clients / elapsed, unit="turns/s", source=SOURCE),
            summary_row(f"{what} complete answers", complete, unit=f"of {clients}", source=SOURCE),
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    asyncio.run(main(args.clients, args.json))
