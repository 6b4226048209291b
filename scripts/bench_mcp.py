"""What an MCP tool call costs over a plain ``@ta.tool`` call, per call: stdio and streamable HTTP, side by side.

Workload: one in-process agent (MemoryStore, ScriptedModel) runs turns of ``--calls`` steps, each step one call of
an ``echo`` tool, then a text step. The same turn runs three ways, interleaved round by round so a busy machine
slows all three alike: the tool is a plain ``@ta.tool`` function; it is the ``echo`` tool of an MCP server (the
official SDK's ``MCPServer``, this script run with ``--serve``) reached over stdio; the same server over
streamable HTTP on 127.0.0.1 (uvicorn, in its own process). Everything but the call is the same, so
(turn time - plain turn time) / calls is the added cost of one MCP call, hooks, ledger and stream included.

A second table times the bare call (no agent): the function, and ``McpConnection.run`` over each transport.

All in one process and its server subprocesses, on one machine: no network beyond loopback, no Ray.

Usage: python scripts/bench_mcp.py [--calls 20] [--rounds 15] [--json PATH]  (--json: the summary rows,
       scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_summary import summary_row, write_rows

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

CONNECT_S = 60.0
SCRIPT = str(Path(__file__).resolve())


def serve(transport: str, port: int) -> None:
    """Run the benchmark's MCP server (this script with ``--serve``)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    if transport == "http":
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run("stdio")


async def _echo(text: str) -> str:
    """Echo the text back."""
    return text


class Bench(ta.Think):
    tools = [ta.tool(_echo, name="echo")]
    max_steps = 1_000  # one step per call: a turn of --calls calls must not stop at the default 10 steps


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _turn(agent: Bench, model: ScriptedModel, tool: str, calls: int) -> float:
    model.extend([*(tool_call(tool, {"text": f"t{i}"}) for i in range(calls)), text("done")])
    gc.collect()
    started = time.perf_counter()
    result = await agent.save_messages("go")
    elapsed = time.perf_counter() - started
    if result.status != "completed":
        raise SystemExit(f"a {tool} turn ended {result.status}: {result.error}")
    model.assert_complete()
    await agent.clear()
    return elapsed


async def _bare(call: Any, n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        await call(f"t{i}")
    return (time.perf_counter() - started) / n


async def main(args: argparse.Namespace, port: int, http_server: subprocess.Popen[bytes]) -> None:
    script = SCRIPT
    model = ScriptedModel()
    agent = Bench("bench", model=model, store=ta.MemoryStore())
    try:
        await agent.add_mcp_server(
            ta.mcp.stdio(sys.executable, script, "--serve", "stdio", name="stdio", connect_timeout_s=CONNECT_S)
        )
        deadline = time.monotonic() + CONNECT_S
        while True:  # the HTTP server takes a moment to listen
            state = await agent.add_mcp_server(
                ta.mcp.http(f"http://127.0.0.1:{port}/mcp", name="http", connect_timeout_s=CONNECT_S)
            )
            if state.state == "ready" or time.monotonic() > deadline:
                break
            await agent.remove_mcp_server("http")
            await asyncio.sleep(0.5)
        states = agent.get_mcp_servers()
        if any(s.state != "ready" for s in states.values()):
            raise SystemExit(f"an MCP server did not connect: {states}")

        ways = {"plain @ta.tool": "echo", "MCP over stdio": "stdio_echo", "MCP over streamable HTTP": "http_echo"}
        for tool in ways.values():  # warm-up: imports, first connections, caches
            await _turn(agent, model, tool, args.calls)
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, tool in ways.items():
                times[name].append(await _turn(agent, model, tool, args.calls))

        plain = statistics.median(times["plain @ta.tool"])
        print(f"MCP tool call vs plain @ta.tool call, in process: {args.rounds} rounds of turns of {args.calls} calls")
        print(f"  {'tool':<26} {'turn (median)':>14} {'per call':>10} {'added per call':>15}")
        for name, samples in times.items():
            turn = statistics.median(samples)
            added = (turn - plain) / args.calls
            extra = "" if name.startswith("plain") else f"{added * 1e6:>12.0f} µs"
            print(f"  {name:<26} {turn * 1e3:>11.1f} ms {turn / args.calls * 1e6:>7.0f} µs {extra:>15}")

        # The bare call: the function, and a connection of its own to each server.
        stdio = ta.mcp.McpConnection(ta.mcp.stdio(sys.executable, script, "--serve", "stdio", name="s"))
        http = ta.mcp.McpConnection(ta.mcp.http(f"http://127.0.0.1:{port}/mcp", name="h"))
        try:
            if not (await stdio.wait_ready(CONNECT_S) and await http.wait_ready(CONNECT_S)):
                raise SystemExit(f"a bare connection did not connect: {stdio.error or http.error}")
            bare = {
                "function": await _bare(_echo, 2000),
                "McpConnection.run, stdio": await _bare(lambda t: stdio.run("echo", {"text": t}), args.bare),
                "McpConnection.run, HTTP": await _bare(lambda t: http.run("echo", {"text": t}), args.bare),
            }
        finally:
            await stdio.close()
            await http.close()
        print("  bare call, no agent:")
        for name, seconds in bare.items():
            print(f"    {name:<26} {seconds * 1e6:>10.1f} µs")
        write_rows(
            args.json,
            [
                summary_row(
                    f"MCP: turn of {args.calls} tool calls, {name} vs a plain @ta.tool",
                    statistics.median(times[name]) * 1e3,
                    plain * 1e3,
                    unit="ms",
                    source="bench_mcp",
                )
                for name in ways
                if name.startswith("MCP")
            ],
        )
    finally:
        await agent.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20, help="tool calls per turn (one per step)")
    parser.add_argument("--rounds", type=int, default=15, help="turns of each kind")
    parser.add_argument("--bare", type=int, default=300, help="bare MCP calls per transport")
    parser.add_argument("--serve", choices=("stdio", "http"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    options = parser.parse_args()
    if options.serve:
        serve(options.serve, options.port)
    else:
        free = _free_port()
        server = subprocess.Popen(
            [sys.executable, SCRIPT, "--serve", "http", "--port", str(free)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            asyncio.run(main(options, free, server))
        finally:
            server.terminate()
            server.wait(10)
