"""Model-path benchmarks: what a streamed chunk costs the model client, and what one model-server actor sustains.

The scripted OpenAI-compatible server runs in another process, so only the client's work is measured.

(a) Client CPU per streamed chunk (``time.process_time`` of this process: every thread of it) for three readers of
    the same stream: the raw floor (aiohttp, SSE lines split, ``json.loads`` per event, nothing else), the
    OpenAI-wire fast path (``OpenAIWireClient``) and ``litellm.acompletion`` (through ``LiteLLMClient``). Slope and
    intercept from streams of 200 and 1000 chunks of 4 characters: per chunk, and per request (fixed). Target:
    fast path <= 1.3x the floor per chunk.
(b) Model-pool throughput: chunks/s one model-server Ray actor (``model_pool.ModelServer``, as the pool builds it)
    streams to the driver with 8 streams at once, fast path vs litellm, and the chunks per CPU-second the actor
    spends (its process's CPU time), i.e. what it sustains on one core.

Usage: python scripts/bench_model_path.py [--streams 30] [--skip-ray] [--json PATH]
       (--json: the summary rows, scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import aiohttp
import psutil
from bench_summary import summary_row, write_rows

SMALL, LARGE = 200, 1000
CONCURRENT = 8
MESSAGES = [{"role": "user", "content": "count for me"}]


# -- the server, in its own process ---------------------------------------------------------------------------


def serve(port_queue: Any) -> None:
    """Run a ScriptedOpenAIServer whose every request streams ``max_tokens`` chunks of 4 characters."""
    from aiohttp import web

    from think_actors.testing.openai_server import ScriptedOpenAIServer

    class EndlessServer(ScriptedOpenAIServer):
        async def _handle(self, request: web.Request) -> web.StreamResponse:
            body = await request.json()  # aiohttp keeps the body: the base handler reads it again
            chunks = int(body.get("max_tokens") or 100)
            # Distinct 4-character chunks (a model repeating one chunk trips litellm's loop guard).
            text = "".join(f"{i % 10000:04d}" for i in range(chunks))
            usage = {"prompt_tokens": 12, "completion_tokens": chunks, "total_tokens": 12 + chunks}
            self.add_text(text, chunk_size=4, usage=usage)
            self.requests.clear()  # keep memory flat over thousands of requests
            self.request_headers.clear()
            return await super()._handle(request)

    async def main() -> None:
        async with EndlessServer() as server:
            port_queue.put(server.base_url)
            await asyncio.Event().wait()

    asyncio.run(main())


def start_server() -> tuple[multiprocessing.Process, str]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=serve, args=(queue,), daemon=True)
    process.start()
    return process, queue.get(timeout=60)


# -- (a) client CPU per chunk ---------------------------------------------------------------------------------


class Floor:
    """aiohttp + SSE line split + json.loads: the least any client of this wire can do."""

    def __init__(self, base_url: str):
        self.url = base_url + "/chat/completions"
        self.session: aiohttp.ClientSession | None = None

    async def stream(self, chunks: int) -> int:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        body = {"model": "scripted", "messages": MESSAGES, "stream": True, "max_tokens": chunks}
        body["stream_options"] = {"include_usage": True}
        count = 0
        async with self.session.post(self.url, json=body, headers={"Authorization": "Bearer x"}) as response:
            buffer = b""
            async for data in response.content.iter_any():
                lines = (buffer + data).split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    if line.startswith(b"data: ") and line != b"data: [DONE]":
                        json.loads(line[6:])
                        count += 1
        return count

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


class Client:
    """A model client streaming the benchmark's request; counts the text deltas it yields."""

    def __init__(self, client: Any):
        self.client = client

    async def stream(self, chunks: int) -> int:
        from think_actors.models import ModelRequest, TextDelta

        request = ModelRequest(model="openai/scripted", messages=MESSAGES, params={"max_tokens": chunks})
        count = 0
        async for event in self.client.stream(request):
            if type(event) is TextDelta:
                count += 1
        return count

    async def close(self) -> None:
        close = getattr(self.client, "aclose", None)
        if close is not None:
            await close()


async def cpu_of_stream(reader: Any, chunks: int) -> float:
    """Client CPU seconds of one stream of ``chunks`` chunks."""
    started = time.process_time()
    received = await reader.stream(chunks)
    spent = time.process_time() - started
    assert received >= chunks, (received, chunks)
    return spent


async def bench_client_cpu(base_url: str, streams: int) -> dict[str, tuple[float, float]]:
    """Per reader: (CPU per chunk, CPU per request), the slope and intercept of medians at 200 and 1000 chunks.

    The readers take turns stream by stream, so a change in the machine's load (it is shared) reaches all three
    alike; litellm, ≈40x dearer per chunk, streams every fourth round only.
    """
    from think_actors.models.litellm import LiteLLMClient
    from think_actors.models.openai_wire import OpenAIWireClient

    readers = {
        "floor": Floor(base_url),
        "fast": Client(OpenAIWireClient(api_base=base_url, api_key="x")),
        "litellm": Client(LiteLLMClient(api_base=base_url, api_key="x")),
    }
    samples: dict[tuple[str, int], list[float]] = {(name, n): [] for name in readers for n in (SMALL, LARGE)}
    for round_ in range(streams + 3):
        for name, reader in readers.items():
            if name == "litellm" and round_ % 4 != 0:
                continue
            for n in (SMALL, LARGE):
                spent = await cpu_of_stream(reader, n)
                if round_ >= 3 or (name == "litellm" and round_ > 0):  # the first streams warm up
                    samples[(name, n)].append(spent)
    results = {}
    for name, reader in readers.items():
        small = statistics.median(samples[(name, SMALL)])
        large = statistics.median(samples[(name, LARGE)])
        per_chunk = (large - small) / (LARGE - SMALL)
        results[name] = (per_chunk, small - per_chunk * SMALL)
        await reader.close()
    return results


# -- (b) one model-server actor's throughput ------------------------------------------------------------------


async def bench_pool(base_url: str, fast_path: bool, rounds: int) -> tuple[float, float]:
    """(chunks per second to the driver, chunks per CPU-second of the actor) for 8 concurrent streams."""
    import ray

    from think_actors.model_pool import ModelServer, PooledModel
    from think_actors.models import ModelRequest
    from think_actors.runtime import RuntimeConfig

    actor = ModelServer.options(name=f"bench-model-server-{fast_path}-{time.time_ns()}").remote(  # type: ignore[attr-defined]
        RuntimeConfig(fast_model_path=fast_path)
    )
    pooled = PooledModel([actor])
    request = ModelRequest(
        model="openai/scripted",
        messages=MESSAGES,
        params={"max_tokens": LARGE},
        provider_options={"api_base": base_url, "api_key": "x"},
    )

    async def one() -> int:
        return sum(1 for _ in [event async for event in pooled.stream(request)])

    await one()  # the actor starts (and imports litellm) before timing
    process = psutil.Process(await actor.__ray_call__.remote(lambda self: os.getpid()))
    cpu_before = sum(process.cpu_times()[:2])
    started = time.perf_counter()
    events = 0
    for _ in range(rounds):
        events += sum(await asyncio.gather(*(one() for _ in range(CONCURRENT))))
    wall = time.perf_counter() - started
    cpu = sum(process.cpu_times()[:2]) - cpu_before
    ray.kill(actor)
    chunks = rounds * CONCURRENT * LARGE
    assert events >= chunks
    return chunks / wall, chunks / cpu


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of 8 concurrent streams per pool run")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    server, base_url = start_server()
    try:
        cpu = await bench_client_cpu(base_url, args.streams)
        pool: dict[str, tuple[float, float]] = {}
        if not args.skip_ray:
            import think_actors as ta

            with tempfile.TemporaryDirectory() as data_dir:
                ta.init(num_cpus=2, data_dir=data_dir)
                try:
                    pool["fast"] = await bench_pool(base_url, True, args.rounds)
                    pool["litellm"] = await bench_pool(base_url, False, max(1, args.rounds // 3))
                finally:
                    ta.shutdown()
    finally:
        server.terminate()

    floor = cpu["floor"][0]
    print("Model path, client CPU per streamed chunk (server in another process; slope of 200 vs 1000 chunks)")
    print(f"    {'':34} {'per chunk':>10} {'x floor':>8} {'per request':>12}")
    labels = {
        "floor": "floor (aiohttp + SSE split + json)",
        "fast": "fast path (OpenAIWireClient)",
        "litellm": "litellm.acompletion (LiteLLMClient)",
    }
    for name, (per_chunk, per_request) in cpu.items():
        print(f"(a) {labels[name]:34} {per_chunk * 1e6:7.1f} µs {per_chunk / floor:7.2f}x {per_request * 1e3:9.2f} ms")
    fast, lite = cpu["fast"][0], cpu["litellm"][0]
    verdict = "met" if fast <= 1.3 * floor else "NOT met"
    print(f"    fast path {fast / floor:.2f}x the floor (target <= 1.3: {verdict}); ", end="")
    print(f"litellm {lite / fast:.1f}x the fast path")
    if pool:
        print(f"(b) one model-server actor, {CONCURRENT} streams of {LARGE} chunks at once, to the driver:")
        for name in ("fast", "litellm"):
            wall, per_cpu = pool[name]
            print(f"    {labels[name]:38} {wall:9,.0f} chunks/s   {per_cpu:9,.0f} chunks per actor CPU-second")
        print(
            f"    fast path / litellm: {pool['fast'][0] / pool['litellm'][0]:.1f}x chunks/s, "
            f"{pool['fast'][1] / pool['litellm'][1]:.1f}x per CPU-second"
        )
    source = "bench_model_path"
    rows = [
        summary_row(
            "model path: client CPU per streamed chunk, fast path vs raw aiohttp + json",
            fast * 1e6,
            floor * 1e6,
            unit="µs",
            source=source,
            target="ratio ≤ 1.3",
            met=fast <= 1.3 * floor,
        ),
        summary_row(
            "model path: client CPU per streamed chunk, fast path vs litellm",
            fast * 1e6,
            lite * 1e6,
            unit="µs",
            source=source,
        ),
    ]
    if pool:
        rows.append(
            summary_row(
                f"one model-server actor, {CONCURRENT} streams at once: fast path vs litellm",
                pool["fast"][0],
                pool["litellm"][0],
                unit="chunks/s",
                source=source,
            )
        )
    write_rows(args.json, rows)


if __name__ == "__main__":
    asyncio.run(main())
