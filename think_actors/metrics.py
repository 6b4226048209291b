"""Metrics: turns, steps, tokens, cost, tool calls, errors and latencies, per agent class, as Ray metrics.

Every agent (unless its class sets ``metrics = False``, or ``THINK_ACTORS_METRICS=0`` is in the environment)
has a ``MetricsRecorder`` subscribed to its ``agents:chat`` events: it reads ``chat:turn:finish`` (status,
duration, steps, tokens, cost, tool calls, time to first chunk) and ``chat:request:failed`` (stage), so it
costs a few dict updates per turn and nothing per chunk. It adds to this process's totals (``snapshot``) and,
where Ray is initialized in the process (an actor, or a driver after ``ray.init``), to the Ray metrics below;
without Ray it never imports ``ray``. Ray exports them on each node's metrics endpoint (Prometheus text, with a
``ray_`` prefix and ``_total`` on counters), which the Ray dashboard and Grafana read.

A Ray metric point costs tens of microseconds of the agent's event loop (tag checks, then Ray's own recorder), so
the points of a process wait up to ``FLUSH_S`` and go to Ray together: counters summed by label set, histogram
points one by one (Ray has no call for several). Ray itself exports a worker's points only every few seconds, so
nothing is seen later for it; a process that hibernates flushes first, one killed loses at most ``FLUSH_S``.

=========================================  =========  ==========================================
metric                                     kind       labels (besides Ray's node/worker labels)
=========================================  =========  ==========================================
think_actors_turns                         counter    agent_class, status
think_actors_steps                         counter    agent_class
think_actors_input_tokens                  counter    agent_class
think_actors_output_tokens                 counter    agent_class
think_actors_cost_usd                      counter    agent_class
think_actors_tool_calls                    counter    agent_class, tool, outcome (ok|error|blocked)
think_actors_errors                        counter    agent_class, stage
think_actors_turn_duration_seconds         histogram  agent_class
think_actors_time_to_first_chunk_seconds   histogram  agent_class
=========================================  =========  ==========================================

Labels stay bounded: never an agent's name or a request id; tool names come from the agents' code, and past
``MAX_TOOL_LABELS`` distinct names in a process the rest share the label ``<other>``.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from .observability import Event

__all__ = [
    "FIRST_CHUNK_BOUNDARIES_S",
    "MAX_TOOL_LABELS",
    "METRICS_ENV",
    "TURN_DURATION_BOUNDARIES_S",
    "MetricsRecorder",
    "MetricsSnapshot",
    "enabled",
    "flush",
    "snapshot",
]

METRICS_ENV = "THINK_ACTORS_METRICS"  # "0" / "false" / "off": no agent of this process records metrics
MAX_TOOL_LABELS = 100
TURN_DURATION_BOUNDARIES_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
FIRST_CHUNK_BOUNDARIES_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
FLUSH_S = 1.0  # how long a Ray metric point may wait for the others of its process (module docstring)
_TIMED = frozenset({"completed", "error", "aborted"})  # a skipped turn did nothing: no latency to record


@dataclass(frozen=True, kw_only=True, slots=True)
class MetricsSnapshot:
    """What the agents of one class recorded in this process (one actor's worth on Ray).

    Durations are sums with their counts (``turn_seconds`` over ``timed_turns`` turns), as a histogram's
    ``_sum`` and ``_count`` are.
    """

    turns: dict[str, int] = field(default_factory=dict)  # by status
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: dict[tuple[str, str], int] = field(default_factory=dict)  # by (tool, outcome)
    errors: dict[str, int] = field(default_factory=dict)  # by stage
    timed_turns: int = 0
    turn_seconds: float = 0.0
    first_chunks: int = 0
    first_chunk_seconds: float = 0.0


@dataclass(slots=True)
class _Totals:  # MetricsSnapshot's fields, mutable: what the recorder adds to
    turns: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: dict[tuple[str, str], int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    timed_turns: int = 0
    turn_seconds: float = 0.0
    first_chunks: int = 0
    first_chunk_seconds: float = 0.0


_totals: dict[str, _Totals] = {}  # by agent class
_tool_labels: set[str] = set()


def snapshot(agent_class: str | type) -> MetricsSnapshot:
    """This process's totals for the agents of ``agent_class`` (a class or its name); zeros if none ran."""
    name = agent_class if isinstance(agent_class, str) else agent_class.__name__
    # asdict copies the dicts: the snapshot does not change as the totals go on.
    return MetricsSnapshot(**dataclasses.asdict(_totals.get(name) or _Totals()))


def enabled(agent_class: type) -> bool:
    """Whether agents of ``agent_class`` record metrics: its ``metrics`` attribute and ``THINK_ACTORS_METRICS``."""
    if os.environ.get(METRICS_ENV, "").strip().lower() in {"0", "false", "off", "no"}:
        return False
    return getattr(agent_class, "metrics", True) is not False


def _tool_label(name: str) -> str:
    if name in _tool_labels:
        return name
    if len(_tool_labels) >= MAX_TOOL_LABELS:
        return "<other>"
    _tool_labels.add(name)
    return name


class MetricsRecorder:
    """Turns one agent's ``agents:chat`` events into metrics; subscribe it with ``agent.observe("chat", it)``."""

    def __call__(self, event: Event) -> None:
        if event.type == "chat:turn:finish":
            self._turn_finished(event.agent, event.payload)
        elif event.type == "chat:request:failed":
            stage = str(event.payload.get("stage") or "unknown")
            totals = _totals.setdefault(event.agent, _Totals())
            totals.errors[stage] = totals.errors.get(stage, 0) + 1
            if _ray_ready():
                _count("errors", 1, (("agent_class", event.agent), ("stage", stage)))
                _flush_later()

    def _turn_finished(self, agent_class: str, payload: dict[str, Any]) -> None:
        status = str(payload.get("status") or "unknown")
        usage = payload.get("usage") or {}
        input_tokens = int(usage.get("inputTokens") or 0)
        output_tokens = int(usage.get("outputTokens") or 0)
        steps = int(payload.get("steps") or 0)
        cost = float(payload.get("costUsd") or 0.0)
        duration_s = float(payload.get("durationMs") or 0.0) / 1000 if status in _TIMED else None
        first_chunk_ms = payload.get("firstChunkMs")
        first_chunk_s = float(first_chunk_ms) / 1000 if first_chunk_ms is not None else None
        tool_calls = [
            (_tool_label(tool), outcome, count)
            for tool, outcomes in (payload.get("toolCalls") or {}).items()
            for outcome, count in outcomes.items()
        ]

        totals = _totals.setdefault(agent_class, _Totals())
        totals.turns[status] = totals.turns.get(status, 0) + 1
        totals.steps += steps
        totals.input_tokens += input_tokens
        totals.output_tokens += output_tokens
        totals.cost_usd += cost
        for tool, outcome, count in tool_calls:
            totals.tool_calls[tool, outcome] = totals.tool_calls.get((tool, outcome), 0) + count
        if duration_s is not None:
            totals.timed_turns += 1
            totals.turn_seconds += duration_s
        if first_chunk_s is not None:
            totals.first_chunks += 1
            totals.first_chunk_seconds += first_chunk_s

        if not _ray_ready():
            return
        tags = (("agent_class", agent_class),)
        _count("turns", 1, (*tags, ("status", status)))
        for name, value in (
            ("steps", steps),
            ("input_tokens", input_tokens),
            ("output_tokens", output_tokens),
            ("cost_usd", cost),
        ):
            _count(name, value, tags)
        for tool, outcome, count in tool_calls:
            _count("tool_calls", count, (*tags, ("tool", tool), ("outcome", outcome)))
        if duration_s is not None:
            _observed.append(("turn_duration", duration_s, tags))
        if first_chunk_s is not None:
            _observed.append(("first_chunk", first_chunk_s, tags))
        _flush_later()


# Ray metric points waiting for ``flush``: counter sums by (metric, labels), histogram points in order.
_Labels = tuple[tuple[str, str], ...]
_counts: dict[tuple[str, _Labels], float] = {}
_observed: list[tuple[str, float, _Labels]] = []
_flush_timer: tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle] | None = None


def _count(name: str, value: float, labels: _Labels) -> None:
    if value > 0:  # Ray refuses to add zero to a counter, and a zero adds nothing anyway
        _counts[name, labels] = _counts.get((name, labels), 0) + value


def _flush_later() -> None:
    """Flush within ``FLUSH_S``: on this thread's event loop, or at once where none runs."""
    global _flush_timer
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        flush()
        return
    if _flush_timer is not None:
        if _flush_timer[0] is loop:
            return
        _flush_timer[1].cancel()  # an earlier loop's (a driver's ``asyncio.run`` that ended): this one flushes
    _flush_timer = (loop, loop.call_later(FLUSH_S, flush))


def flush() -> None:
    """Record this process's waiting metric points in Ray now (an agent about to hibernate calls this)."""
    global _flush_timer
    if _flush_timer is not None:
        _flush_timer[1].cancel()
        _flush_timer = None
    counts, observed = list(_counts.items()), list(_observed)
    _counts.clear()
    _observed.clear()
    ray_metrics = _ray_metrics()
    if ray_metrics is None:
        return
    for (name, labels), value in counts:
        getattr(ray_metrics, name).inc(value, dict(labels))
    for name, value, labels in observed:
        getattr(ray_metrics, name).observe(value, dict(labels))


atexit.register(flush)


class _RayMetrics:
    """The Ray metric objects, made once per process (Ray registers a metric by name)."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Histogram

        by_class = ("agent_class",)
        self.turns = Counter("think_actors_turns", "Turns that ended, by status", ("agent_class", "status"))
        self.steps = Counter("think_actors_steps", "Model steps (requests) of ended turns", by_class)
        self.input_tokens = Counter("think_actors_input_tokens", "Input tokens the models reported", by_class)
        self.output_tokens = Counter("think_actors_output_tokens", "Output tokens the models reported", by_class)
        self.cost_usd = Counter("think_actors_cost_usd", "Cost of model calls in US dollars, where known", by_class)
        self.tool_calls = Counter(
            "think_actors_tool_calls", "Tool calls by outcome (ok, error, blocked)", ("agent_class", "tool", "outcome")
        )
        self.errors = Counter(
            "think_actors_errors", "Failed turns by stage (chat:request:failed)", ("agent_class", "stage")
        )
        self.turn_duration = Histogram(
            "think_actors_turn_duration_seconds",
            "Turn latency, queue wait included",
            boundaries=list(TURN_DURATION_BOUNDARIES_S),
            tag_keys=by_class,
        )
        self.first_chunk = Histogram(
            "think_actors_time_to_first_chunk_seconds",
            "From a turn's start to the model's first stream event",
            boundaries=list(FIRST_CHUNK_BOUNDARIES_S),
            tag_keys=by_class,
        )


_ray: _RayMetrics | None = None


def _ray_ready() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def _ray_metrics() -> _RayMetrics | None:
    """The Ray metrics when Ray is initialized in this process; never imports (let alone starts) Ray itself."""
    global _ray
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():  # checked per turn: a driver may init (and shut down) Ray later
        return None
    if _ray is None:
        _ray = _RayMetrics()
    return _ray
