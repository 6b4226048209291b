"""ScriptedModel: a ModelClient that plays scripted steps, records requests, and fails loudly on a mismatch.

One ``stream()`` call plays one step. Build steps with the helpers::

    model = ScriptedModel([
        tool_call("search", {"q": "ray"}),                          # one tool call
        step(tool_call("a", {}), tool_call("b", {})),               # two in parallel
        text("done", chunk_size=2),                                 # streamed text
        error(RateLimitError("slow down"), after=text("partial")),  # fails mid-stream
    ])
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ScriptError
from ..models import FinishEvent, ModelEvent, ModelRequest, ReasoningDelta, TextDelta, ToolCallDelta, Usage

__all__ = ["ScriptedModel", "Step", "delay", "error", "reasoning", "step", "text", "tool_call"]


@dataclass(frozen=True, slots=True)
class _Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Raise:
    error: BaseException


@dataclass(frozen=True, slots=True)
class _ToolCall:
    name: str
    arguments: str
    id: str


@dataclass(frozen=True)
class Step:
    """One scripted model answer: text/reasoning deltas, tool calls, pauses and failures, in order."""

    items: tuple[Any, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None

    def __add__(self, other: Step) -> Step:
        return Step(self.items + other.items, other.finish_reason or self.finish_reason, other.usage or self.usage)


def _split(value: str, chunk_size: int | None, chunks: int | None) -> list[str]:
    if chunks:
        chunk_size = max(1, -(-len(value) // chunks))
    if not chunk_size or chunk_size >= len(value):
        return [value] if value else []
    return [value[i : i + chunk_size] for i in range(0, len(value), chunk_size)]


def text(value: str, *, chunk_size: int | None = None, chunks: int | None = None) -> Step:
    """Stream ``value`` as text, in pieces of ``chunk_size`` characters (or in ``chunks`` pieces)."""
    return Step(tuple(TextDelta(piece) for piece in _split(value, chunk_size, chunks)))


def reasoning(value: str, *, chunk_size: int | None = None) -> Step:
    """Stream ``value`` as reasoning."""
    return Step(tuple(ReasoningDelta(piece) for piece in _split(value, chunk_size, None)))


def tool_call(name: str, arguments: dict[str, Any] | str, *, id: str | None = None) -> Step:
    """Call tool ``name``; a str ``arguments`` is sent verbatim (to script malformed JSON)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Step((_ToolCall(name, raw, id or f"call_{uuid.uuid4().hex[:12]}"),))


def delay(seconds: float) -> Step:
    """Pause the stream (a slow provider, time to first token, or a window to cancel in)."""
    return Step((_Pause(seconds),))


def error(exc: BaseException, *, after: Step | None = None) -> Step:
    """Fail the request: before any output, or mid-stream ``after`` the given output."""
    return Step((*(after.items if after else ()), _Raise(exc)))


def step(*parts: Step, finish_reason: str | None = None, usage: Usage | None = None) -> Step:
    """Combine parts into one model answer (e.g. text then two parallel tool calls)."""
    combined = Step()
    for part in parts:
        combined = combined + part
    return Step(combined.items, finish_reason or combined.finish_reason, usage or combined.usage)


class ScriptedModel:
    """A ModelClient that plays ``steps`` in order, one per request.

    ``requests`` records every ModelRequest received. Asking for a step past the end raises ``ScriptError``;
    ``assert_complete()`` raises if steps are left over. ``model_id`` names the model in hook contexts.
    """

    def __init__(self, steps: Iterable[Step] = (), *, model_id: str = "scripted"):
        self.steps: list[Step] = list(steps)
        self.model_id = model_id
        self.requests: list[ModelRequest] = []
        self._played = 0

    def __repr__(self) -> str:
        return f"ScriptedModel({self.model_id!r}, played {self._played} of {len(self.steps)} steps)"

    def extend(self, steps: Iterable[Step]) -> None:
        self.steps.extend(steps)

    def add(self, *steps: Step) -> None:
        self.steps.extend(steps)

    @property
    def remaining(self) -> int:
        return len(self.steps) - self._played

    def assert_complete(self) -> None:
        if self._played < len(self.steps):
            raise ScriptError(f"ScriptedModel: {self.remaining} of {len(self.steps)} steps were never requested")

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        if self._played >= len(self.steps):
            raise ScriptError(
                f"ScriptedModel ran out of steps: request {len(self.requests)} arrived after all "
                f"{len(self.steps)} scripted steps were played"
            )
        scripted = self.steps[self._played]
        self._played += 1
        return _play(scripted, request)


async def _play(scripted: Step, request: ModelRequest) -> AsyncIterator[ModelEvent]:
    calls = 0
    output_chars = 0
    for item in scripted.items:
        if isinstance(item, _Pause):
            await asyncio.sleep(item.seconds)
        elif isinstance(item, _Raise):
            raise item.error
        elif isinstance(item, _ToolCall):
            # Arguments arrive in two fragments, as real providers stream them.
            half = len(item.arguments) // 2
            yield ToolCallDelta(calls, item.id, item.name, item.arguments[:half])
            if item.arguments[half:]:
                yield ToolCallDelta(calls, None, None, item.arguments[half:])
            calls += 1
            output_chars += len(item.arguments)
        else:
            output_chars += len(item.text)
            yield item
    input_chars = sum(len(str(m.get("content") or "")) for m in request.messages)
    usage = scripted.usage or Usage(
        input_tokens=input_chars // 4 + 1,
        output_tokens=output_chars // 4 + 1,
        total_tokens=input_chars // 4 + output_chars // 4 + 2,
    )
    yield FinishEvent(scripted.finish_reason or ("tool_calls" if calls else "stop"), usage)
