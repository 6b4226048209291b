"""Turn metrics in process: what the recorder takes from real turns, and where it records nothing.

Totals are per agent class and per process, so every test has its own agent class.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

import think_actors as ta
from think_actors import metrics
from think_actors.metrics import MetricsSnapshot, snapshot
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call


async def test_a_tool_turn_records_steps_tokens_cost_and_the_call() -> None:
    class WeatherMetrics(ta.Think):
        @ta.tool
        async def lookup(self, city: str) -> str:
            """Weather for a city."""
            return "sunny"

    model = ScriptedModel(
        [
            step(tool_call("lookup", {"city": "Paris"}), usage=ta.Usage(input_tokens=20, output_tokens=4)),
            step(text("sunny"), usage=ta.Usage(input_tokens=30, output_tokens=2), cost_usd=0.5),
        ]
    )
    agent = WeatherMetrics("a", model=model, store=ta.MemoryStore())
    result = await agent.save_messages("weather in Paris?")

    assert result.status == "completed"
    recorded = snapshot(WeatherMetrics)
    assert recorded == MetricsSnapshot(
        turns={"completed": 1},
        steps=2,
        input_tokens=50,
        output_tokens=6,
        cost_usd=0.5,
        tool_calls={("lookup", "ok"): 1},
        timed_turns=1,
        turn_seconds=recorded.turn_seconds,
        first_chunks=1,
        first_chunk_seconds=recorded.first_chunk_seconds,
    )
    assert 0 < recorded.first_chunk_seconds <= recorded.turn_seconds
    assert snapshot("WeatherMetrics") == recorded
    model.assert_complete()


async def test_tool_calls_are_counted_by_outcome() -> None:
    class ToolOutcomes(ta.Think):
        @ta.tool
        async def search(self, q: str) -> str:
            """Search."""
            return f"found {q}"

        @ta.tool
        async def fail(self) -> str:
            """Always fails."""
            raise RuntimeError("down")

        @ta.tool
        async def danger(self) -> str:
            """Never runs."""
            return "ran"

        async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
            return ta.Block("not today") if ctx.tool_name == "danger" else None

    model = ScriptedModel(
        [
            step(
                tool_call("search", {"q": "ray"}),
                tool_call("fail", {}),
                tool_call("danger", {}),
                tool_call("search", {}),  # invalid input: q is missing
                tool_call("invented_by_the_model", {}),
            ),
            text("done"),
        ]
    )
    agent = ToolOutcomes("a", model=model, store=ta.MemoryStore())
    await agent.save_messages("go")

    assert snapshot(ToolOutcomes).tool_calls == {
        ("search", "error"): 1,
        ("<unknown>", "error"): 1,  # a name the model made up never becomes a label
        ("search", "ok"): 1,
        ("fail", "error"): 1,
        ("danger", "blocked"): 1,
    }


async def test_failed_turns_are_counted_by_status_and_errors_by_stage() -> None:
    class FailingMetrics(ta.Think):
        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
            if ctx.body and ctx.body.get("refuse"):
                raise ValueError("refused")
            return None

    agent = FailingMetrics(
        "a", model=ScriptedModel([error(ta.ProviderError("boom")), text("ok")]), store=ta.MemoryStore()
    )
    streamed = await agent.save_messages("one")
    with pytest.raises(ValueError, match="refused"):
        await agent.save_messages("two", body={"refuse": True})
    fine = await agent.save_messages("three")

    assert (streamed.status, fine.status) == ("error", "completed")
    recorded = snapshot(FailingMetrics)
    assert (recorded.turns, recorded.errors, recorded.steps, recorded.timed_turns) == (
        {"error": 2, "completed": 1},
        {"stream": 1, "turn": 1},
        1,
        3,
    )


async def test_time_to_first_chunk_waits_for_the_model() -> None:
    class SlowStart(ta.Think):
        pass

    agent = SlowStart("a", model=ScriptedModel([step(delay(0.05), text("late"))]), store=ta.MemoryStore())
    finished: list[ta.Event] = []
    agent.observe("chat", lambda e: finished.append(e) if e.type == "chat:turn:finish" else None)
    await agent.save_messages("hi")

    recorded = snapshot(SlowStart)
    (event,) = finished
    assert recorded.first_chunks == 1
    assert recorded.first_chunk_seconds == event.payload["firstChunkMs"] / 1000
    assert 0.05 <= recorded.first_chunk_seconds <= recorded.turn_seconds == event.payload["durationMs"] / 1000


async def test_a_class_with_metrics_off_and_the_environment_switch_record_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Unmetered(ta.Think):
        metrics = False

    class SwitchedOff(ta.Think):
        pass

    await Unmetered("a", model=ScriptedModel([text("hi")]), store=ta.MemoryStore()).save_messages("hi")
    monkeypatch.setenv(ta.metrics.METRICS_ENV, "0")
    await SwitchedOff("a", model=ScriptedModel([text("hi")]), store=ta.MemoryStore()).save_messages("hi")

    assert snapshot(Unmetered) == snapshot(SwitchedOff) == MetricsSnapshot()


async def test_tool_labels_past_the_limit_share_one(monkeypatch: pytest.MonkeyPatch) -> None:
    class ManyTools(ta.Think):
        @ta.tool
        async def tool_label_past_the_limit(self) -> str:
            """A tool whose name comes after the limit."""
            return "ok"

    monkeypatch.setattr(ta.metrics, "MAX_TOOL_LABELS", 0)
    model = ScriptedModel([tool_call("tool_label_past_the_limit", {}), text("done")])
    await ManyTools("a", model=model, store=ta.MemoryStore()).save_messages("go")

    assert snapshot(ManyTools).tool_calls == {("<other>", "ok"): 1}


def test_without_ray_initialized_metrics_never_import_or_start_ray() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        import think_actors as ta
        from think_actors.testing import ScriptedModel, text

        async def turn():
            agent = ta.Think("a", model=ScriptedModel([text("hi")]), store=ta.MemoryStore())
            return (await agent.save_messages("hi")).status

        print(asyncio.run(turn()), "ray" in sys.modules)
        import ray  # imported, not initialized: still nothing goes to Ray
        print(asyncio.run(turn()), ray.is_initialized(), "ray.util.metrics" in sys.modules)
        print(ta.metrics.snapshot(ta.Think).turns)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.splitlines() == [
        "completed False",
        "completed False False",
        "{'completed': 2}",
    ]


class _Points:
    """Stands where a Ray ``Counter`` / ``Histogram`` would: keeps the calls it gets, in order."""

    def __init__(self, calls: list[tuple[Any, ...]], name: str) -> None:
        self.calls, self.name = calls, name

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append((self.name, "inc", value, tags))

    def observe(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append((self.name, "observe", round(value, 6) > 0, tags))


async def test_ray_points_wait_for_one_flush_counters_summed(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics.flush()  # points earlier tests of this process left waiting go to Ray (the suite's), not to this list
    calls: list[tuple[Any, ...]] = []
    names = ("turns", "steps", "input_tokens", "output_tokens", "cost_usd", "tool_calls", "errors")
    recorder = type("Recorder", (), {n: _Points(calls, n) for n in (*names, "turn_duration", "first_chunk")})()
    monkeypatch.setattr(metrics, "_ray_ready", lambda: True)
    monkeypatch.setattr(metrics, "_ray_metrics", lambda: recorder)

    class FlushedMetrics(ta.Think):
        pass

    model = ScriptedModel([step(text("a"), usage=ta.Usage(input_tokens=3, output_tokens=1)) for _ in range(3)])
    agent = FlushedMetrics("a", model=model, store=ta.MemoryStore())
    for _ in range(3):
        await agent.save_messages("hi")
    assert calls == []  # three turns, nothing recorded in Ray yet: the points wait for the flush
    metrics.flush()
    tags = {"agent_class": "FlushedMetrics"}
    assert calls == [
        ("turns", "inc", 3, {**tags, "status": "completed"}),
        ("steps", "inc", 3, tags),
        ("input_tokens", "inc", 9, tags),
        ("output_tokens", "inc", 3, tags),
        *[(name, "observe", True, tags) for _ in range(3) for name in ("turn_duration", "first_chunk")],
    ]
    metrics.flush()
    assert len(calls) == 10  # flushed points are gone
