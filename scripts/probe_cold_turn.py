"""What a turn costs the agent's process when its CPU caches are cold, as on a node full of agent processes (issue 22).

In process, no Ray: ``--agents`` agents (MemoryStore, a model that answers at once with 20 deltas) take turns one
after another, each turn crossing ``_batches`` and ``Engine.durable`` as on an agent actor, with the opening chunks
held (one batch per turn). Each turn's CPU is taken with ``time.thread_time``. In the ``cold`` rounds a sweep of
``--sweep-mib`` of memory (a bytearray rewritten and a list of small dicts walked) runs before every turn, outside
the timed part, as the other processes of a saturated node would evict this one's caches between its turns; the
``hot`` rounds run the same turns back to back. Rounds alternate, so the machine's load reaches both alike.

Usage: python scripts/probe_cold_turn.py [--agents 50] [--rounds 4] [--sweep-mib 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import think_actors as ta
from think_actors.batching import _batches
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage
from think_actors.runtime import RuntimeConfig

CONFIG = RuntimeConfig()


class InstantModel:
    """bench_scale's paced model without its 200 ms: the 20 chunks at once."""

    model_id = "instant"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        for _ in range(20):
            yield TextDelta("abcd")
        yield FinishEvent("stop", Usage(input_tokens=10, output_tokens=20))


class Instant(ta.Think):
    model = InstantModel()


async def turn(agent: Instant) -> None:
    async for _batch in _batches(agent.chat("hi").__aiter__(), CONFIG, hold_opening=True):
        await agent._engine.durable()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sweep-mib", type=int, default=64)
    args = parser.parse_args()
    sweep = bytearray(args.sweep_mib * 1024 * 1024)
    zeros = bytes(len(sweep))
    objects = [{"i": i} for i in range(args.sweep_mib * 4096)]
    agents = [Instant(store=ta.MemoryStore()) for _ in range(args.agents)]
    for agent in agents:
        await agent.load_messages()
        await turn(agent)  # the first turn builds what later turns reuse
    figures: dict[str, list[float]] = {"hot": [], "cold": []}
    for r in range(args.rounds * 2):
        kind = "cold" if r % 2 else "hot"
        spent = []
        for agent in agents:
            if kind == "cold":
                sweep[:] = zeros
                sum(len(o) for o in objects)
            began = time.thread_time()
            await turn(agent)
            spent.append(time.thread_time() - began)
        figures[kind].append(statistics.mean(spent) * 1e3)
    hot, cold = statistics.median(figures["hot"]), statistics.median(figures["cold"])
    print(f"CPU per turn, median of {args.rounds} rounds of {args.agents} turns [load {os.getloadavg()[0]:.1f}]")
    print(f"  hot caches:  {hot:.3f} ms  (rounds {', '.join(f'{v:.3f}' for v in figures['hot'])})")
    print(f"  cold caches: {cold:.3f} ms  (rounds {', '.join(f'{v:.3f}' for v in figures['cold'])})  {cold / hot:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
