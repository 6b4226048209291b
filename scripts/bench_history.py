"""A long conversation: what a 10,000-message history costs to load, to append to, to run a turn on, to compact.

Everything runs in one process on a real SQLite file (WAL), with the scripted model, so the figures are the
harness's own. Appends are timed at three history lengths side by side: the store writes one row per message,
so the time per append must stay flat (the ratio 10,000 vs 100 is printed). A turn re-assembles the model's
view of the whole history (repair, overlay, truncation, conversion), so its cost grows with the history; the
compaction overlay is what keeps the model's view short.

Usage: python scripts/bench_history.py [--messages 10000] [--appends 300] [--json PATH]
       (--json: the summary rows, scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_summary import summary_row, write_rows

import think_actors as ta
from think_actors.compaction import create_compact_function
from think_actors.testing import ScriptedModel, text

SENTENCE = "The quick brown fox jumps over the lazy dog while the agent keeps the whole transcript. "


def message(i: int) -> ta.UIMessage:
    role = "user" if i % 2 == 0 else "assistant"
    return ta.UIMessage(id=f"m{i:06d}", role=role, parts=(ta.TextPart(text=f"{i}: {SENTENCE * 2}"),))


async def fill(store: ta.SQLiteStore, count: int) -> None:
    for i in range(count):
        await store.append_message(message(i))


async def append_us(store: ta.SQLiteStore, start: int, count: int) -> float:
    """Median microseconds per append of ``count`` messages after ``start`` existing ones."""
    times = []
    for i in range(start, start + count):
        m = message(i)
        t0 = time.perf_counter()
        await store.append_message(m)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


async def summarize(prompt: str) -> str:
    return "## Topic\nA long test conversation.\n## Key Points\n- many messages"


class Agent(ta.Think):
    instructions = "You keep long conversations."

    async def configure_session(self, session: ta.Session) -> ta.Session:
        return session.on_compaction(create_compact_function(summarize, tail_token_budget=4_000))


async def measure(size: int, appends: int, directory: Path) -> dict[str, float]:
    path = directory / f"h{size}.db"
    store = ta.SQLiteStore(path)
    await fill(store, size)
    append = await append_us(store, size, appends)
    await store.close()

    gc.collect()
    model = ScriptedModel()
    t0 = time.perf_counter()
    agent = Agent("bench", model=model, store=ta.SQLiteStore(path))
    loaded = await agent.load_messages()
    load_ms = (time.perf_counter() - t0) * 1000

    turns = []
    for i in range(5):
        model.add(text("ok"))
        t0 = time.perf_counter()
        await agent.save_messages(f"turn {i}")
        turns.append(time.perf_counter() - t0)
    turn_ms = statistics.median(turns) * 1000

    assert agent.session is not None
    t0 = time.perf_counter()
    result = await agent.session.compact(agent.get_messages(), reason="manual")
    compact_ms = (time.perf_counter() - t0) * 1000
    assert result is not None
    view = agent.session.model_view(agent.get_messages())

    compacted = []
    for i in range(5):
        model.add(text("ok"))
        t0 = time.perf_counter()
        await agent.save_messages(f"after {i}")
        compacted.append(time.perf_counter() - t0)
    await agent.close()
    return {
        "messages": size,
        "loaded": len(loaded),
        "append_us": append,
        "load_ms": load_ms,
        "turn_ms": turn_ms,
        "compact_ms": compact_ms,
        "view": len(view),
        "turn_after_compaction_ms": statistics.median(compacted) * 1000,
    }


async def main(messages: int, appends: int, json_path: str | None) -> None:
    sizes = sorted({100, min(1000, messages), messages})
    with tempfile.TemporaryDirectory() as tmp:
        rows = [await measure(size, appends, Path(tmp)) for size in sizes]
    print(
        f"A history of N messages in SQLite (WAL): median µs per append of {appends} more; then load (agent start) "
        "of all of them, a turn (scripted model), one compaction, a turn once compacted."
    )
    print(
        f"{'N':>7} {'append µs':>10} {'loaded':>7} {'load ms':>8} {'turn ms':>8} "
        f"{'compact ms':>11} {'view':>5} {'turn ms after':>14}"
    )
    for row in rows:
        print(
            f"{row['messages']:>7.0f} {row['append_us']:>10.1f} {row['loaded']:>7.0f} {row['load_ms']:>8.1f} "
            f"{row['turn_ms']:>8.2f} "
            f"{row['compact_ms']:>11.1f} {row['view']:>5.0f} {row['turn_after_compaction_ms']:>14.2f}"
        )
    small, big = rows[0], rows[-1]
    ratio = big["append_us"] / small["append_us"]
    print(f"append at {big['messages']:.0f} vs {small['messages']:.0f} messages: {ratio:.2f}x (flat means ~1)")
    print(
        f"turn at {big['messages']:.0f} messages: {big['turn_ms']:.2f} ms whole history, "
        f"{big['turn_after_compaction_ms']:.2f} ms once compacted to {big['view']:.0f} messages in the model's view"
    )
    source = "bench_history"
    write_rows(
        json_path,
        [
            summary_row(
                f"history: append at {big['messages']:,.0f} messages vs at {small['messages']:.0f} (flat means ~1x)",
                big["append_us"],
                small["append_us"],
                unit="µs",
                source=source,
            ),
            summary_row(
                f"history: turn at {big['messages']:,.0f} messages, whole history vs once compacted",
                big["turn_ms"],
                big["turn_after_compaction_ms"],
                unit="ms",
                source=source,
            ),
            summary_row(
                f"history: load (agent start) of {big['loaded']:,.0f} messages",
                big["load_ms"],
                unit="ms",
                source=source,
            ),
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.appends, args.json))
