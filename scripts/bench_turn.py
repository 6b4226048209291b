"""Harness cost of one in-process turn against the floor: a bare asyncio loop over the same scripted stream.

Workload (issue "core engine"): step 1 makes one tool call; step 2 streams N text chunks of 4 characters.
Both sides consume the same ScriptedModel stream and call the same tool; the harness also runs every hook,
folds chunks into the message and persists to SQLite. Turns of N=200 and N=1000 chunks give the marginal
cost per chunk (the slope) and the fixed cost per turn (the intercept).

A third row runs the harness with the durable-turn ledger switched off (no turn record, chunk log or effect
ledger), so the ledger's own cost per turn and per chunk is measured side by side.

Usage: python scripts/bench_turn.py [--turns 200] [--json PATH]  (--json: the summary rows, scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_summary import summary_row, write_rows

import think_actors as ta
from think_actors._turn import driver, journal, tool_calls
from think_actors.models import FinishEvent, ModelRequest, TextDelta, ToolCallDelta
from think_actors.store import TurnRecord
from think_actors.testing import ScriptedModel, text, tool_call

SMALL, LARGE = 200, 1000


async def lookup(city: str) -> dict[str, Any]:
    return {"city": city, "temp_c": 21}


def script(chunks: int) -> list[Any]:
    return [tool_call("lookup", {"city": "Paris"}, id="call_1"), text("abcd" * chunks, chunk_size=4)]


class BenchAgent(ta.Think):
    instructions = "You answer weather questions."

    @ta.tool
    async def lookup(self, city: str) -> dict[str, Any]:
        """Weather for a city."""
        return await lookup(city)


async def floor_turn(model: ScriptedModel) -> str:
    """The least any harness must do: stream step 1, call the tool, stream step 2, keep the text."""
    request = ModelRequest(model="scripted", messages=[{"role": "user", "content": "weather in Paris?"}])
    calls: dict[int, list[str]] = {}
    async for event in model.stream(request):
        if isinstance(event, ToolCallDelta):
            calls.setdefault(event.index, [event.name or "", ""])[1] += event.arguments
    results = [await lookup(**json.loads(args)) for _, args in calls.values()]
    texts = []
    async for event in model.stream(request):
        if isinstance(event, TextDelta):
            texts.append(event.text)
        elif isinstance(event, FinishEvent):
            break
    assert results
    return "".join(texts)


async def harness_turn(agent: BenchAgent, model: ScriptedModel) -> str:
    result = await agent.save_messages("weather in Paris?")
    assert result.status == "completed", result
    return result.message.text if result.message else ""


_DELTA_TYPES = frozenset({"text-delta", "reasoning-delta"})


class _NoJournal(journal.TurnJournal):
    """The journal with nothing written: what a turn costs without the durable-turn ledger (the messages are still
    stored, one write each)."""

    @classmethod
    def new(cls, engine: Any, **fields: Any) -> journal.TurnJournal:
        record = TurnRecord(request_id=fields["request_id"], trigger="", status="", started_at=0, updated_at=0)
        record.message_id = fields["message_id"]
        return cls(engine, record)

    async def begin(self, messages: Any) -> None:
        for message in messages:
            await self.engine.append(message)

    def add(self, chunk: Any) -> bool:
        # Deltas still open and extend the journal's run, which the engine's hot path for deltas rides on (it
        # folds them into the reply too); nothing else is kept, and nothing is ever written.
        if chunk.type in _DELTA_TYPES:
            super().add(chunk)
        return False

    async def flush(self) -> None:
        self._take_buffer()

    async def end(self) -> None:
        self._take_buffer()
        await self.persist_reply()


async def _no_effect(*args: Any) -> tuple[None, None]:
    return None, None


@contextlib.contextmanager
def ledger_off() -> Any:
    saved = getattr(driver, "TurnJournal"), getattr(tool_calls, "effect_started")  # noqa: B009
    setattr(driver, "TurnJournal", _NoJournal)  # noqa: B010
    setattr(tool_calls, "effect_started", _no_effect)  # noqa: B010
    try:
        yield
    finally:
        setattr(driver, "TurnJournal", saved[0])  # noqa: B010
        setattr(tool_calls, "effect_started", saved[1])  # noqa: B010


async def measure(kind: str, chunks: int, turns: int, data_dir: str) -> float:
    """Median seconds per turn."""
    times = []
    agent = BenchAgent("bench-" + str(chunks), data_dir=data_dir)
    for i in range(turns + 10):
        model = ScriptedModel(script(chunks))
        agent.model = model
        gc.disable()
        start = time.perf_counter()
        with ledger_off() if kind == "no-ledger" else contextlib.nullcontext():
            out = await (floor_turn(model) if kind == "floor" else harness_turn(agent, model))
        elapsed = time.perf_counter() - start
        gc.enable()
        assert len(out) == 4 * chunks
        if i >= 10:  # warm-up turns excluded
            times.append(elapsed)
        if kind != "floor" and i % 50 == 49:
            await agent.clear()  # keep the transcript (and so the request size) bounded
    await agent.close()
    return statistics.median(times)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        results = {}
        for kind in ("floor", "no-ledger", "harness"):
            for chunks in (SMALL, LARGE):
                results[kind, chunks] = await measure(kind, chunks, args.turns, data_dir)
    print(f"in-process turn, tool call + N text chunks of 4 chars, median of {args.turns} turns, SQLite store")
    rows = {}
    for kind in ("floor", "no-ledger", "harness"):
        per_chunk = (results[kind, LARGE] - results[kind, SMALL]) / (LARGE - SMALL)
        fixed = results[kind, SMALL] - SMALL * per_chunk
        rows[kind] = (per_chunk, fixed)
        print(
            f"  {kind:8s} per chunk {per_chunk * 1e6:7.2f} µs   per turn (fixed) {fixed * 1e3:7.3f} ms"
            f"   turn with {SMALL} chunks {results[kind, SMALL] * 1e3:7.3f} ms"
        )
    chunk_cost = rows["harness"][0] - rows["floor"][0]
    turn_cost = rows["harness"][1] - rows["floor"][1]
    print(
        f"  harness cost over the floor: {chunk_cost * 1e6:.2f} µs per chunk (target ≤ 7), "
        f"{turn_cost * 1e3:.3f} ms per turn (target ≤ 3)"
    )
    print(
        f"  the durable-turn ledger's share: {(rows['harness'][0] - rows['no-ledger'][0]) * 1e6:.2f} µs per chunk, "
        f"{(rows['harness'][1] - rows['no-ledger'][1]) * 1e3:.3f} ms per turn"
    )
    print(
        f"  ratios harness/floor: per chunk {rows['harness'][0] / rows['floor'][0]:.1f}x, "
        f"per turn {rows['harness'][1] / max(rows['floor'][1], 1e-9):.1f}x"
    )
    source = "bench_turn"
    write_rows(
        args.json,
        [
            summary_row(
                f"in-process turn, {SMALL} chunks, vs the bare loop",
                results["harness", SMALL] * 1e3,
                results["floor", SMALL] * 1e3,
                unit="ms",
                source=source,
            ),
            summary_row(
                "in-process turn: cost per chunk",
                rows["harness"][0] * 1e6,
                rows["floor"][0] * 1e6,
                unit="µs",
                source=source,
                target="ours - baseline ≤ 7 µs",
                met=chunk_cost <= 7e-6,
            ),
            summary_row(
                "in-process turn: fixed cost per turn",
                rows["harness"][1] * 1e3,
                rows["floor"][1] * 1e3,
                unit="ms",
                source=source,
                target="ours - baseline ≤ 3 ms",
                met=turn_cost <= 3e-3,
            ),
            summary_row(
                "in-process turn: per chunk, vs the same with the durable ledger off",
                rows["harness"][0] * 1e6,
                rows["no-ledger"][0] * 1e6,
                unit="µs",
                source=source,
            ),
        ],
    )


if __name__ == "__main__":
    asyncio.run(main())
