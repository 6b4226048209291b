"""ScriptedModel: a ModelClient that plays scripted steps, records requests, and fails loudly on a mismatch.

One ``stream()`` call plays one step. Build steps with the helpers::

    model = ScriptedModel([
        tool_call("search", {"q": "ray"}),                          # one tool call
        [tool_call("a", {}), tool_call("b", {})],                   # two in parallel (a list is one step)
        step(text("See the docs."), source("https://docs.ray.io")),  # text citing a source
        text("done", chunk_size=2),                                 # streamed text
        error(RateLimitError("slow down"), after=text("partial")),  # fails mid-stream
    ])

Each played step streams a ``ResponseMetadata`` (``id="scripted-<n>"`` for the n-th request) just before its first
output, as a provider's first chunk carries it; a step that fails before any output yields nothing at all, as a
request the provider refused does.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..errors import ScriptError
from ..models import (
    FileEvent,
    FinishEvent,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)

__all__ = [
    "ScriptedModel",
    "Step",
    "StepLike",
    "delay",
    "error",
    "file",
    "reasoning",
    "source",
    "step",
    "text",
    "tool_call",
]


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
    """One scripted model answer: text/reasoning deltas, tool calls, sources, files, pauses and failures, in order.

    ``finish_reason``, ``usage``, ``warnings``, ``provider_metadata`` and ``cost_usd`` go into its ``FinishEvent``.
    """

    items: tuple[Any, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    warnings: tuple[str, ...] = ()
    provider_metadata: dict[str, Any] | None = None
    cost_usd: float | None = None

    def __add__(self, other: Step) -> Step:
        return Step(
            self.items + other.items,
            other.finish_reason or self.finish_reason,
            other.usage or self.usage,
            self.warnings + other.warnings,
            other.provider_metadata if other.provider_metadata is not None else self.provider_metadata,
            other.cost_usd if other.cost_usd is not None else self.cost_usd,
        )


StepLike: TypeAlias = Step | list[Step] | tuple[Step, ...]
"""A step, or a list or tuple of steps played together as one (``step(*parts)``)."""


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


def source(url: str, *, title: str | None = None, source_id: str | None = None) -> Step:
    """Cite ``url`` (a ``SourceEvent``); ``source_id`` defaults to a fresh ``src_...`` id."""
    return Step((SourceEvent(source_id or f"src_{uuid.uuid4().hex[:12]}", url, title),))


def file(url: str, media_type: str) -> Step:
    """Return a generated file (a ``FileEvent``), e.g. ``file("data:image/png;base64,...", "image/png")``."""
    return Step((FileEvent(url, media_type),))


def delay(seconds: float) -> Step:
    """Pause the stream (a slow provider, time to first token, or a window to cancel in)."""
    return Step((_Pause(seconds),))


def error(exc: BaseException, *, after: Step | None = None) -> Step:
    """Fail the request: before any output, or mid-stream ``after`` the given output."""
    return Step((*(after.items if after else ()), _Raise(exc)))


def step(
    *parts: Step,
    finish_reason: str | None = None,
    usage: Usage | None = None,
    warnings: Iterable[str] = (),
    provider_metadata: dict[str, Any] | None = None,
    cost_usd: float | None = None,
) -> Step:
    """Combine parts into one model answer (e.g. text then two parallel tool calls).

    The keyword arguments set what the step's ``FinishEvent`` reports; without them it reports the parts'.
    """
    combined = Step()
    for part in parts:
        combined = combined + _as_step(part, "step()")
    return Step(
        combined.items,
        finish_reason or combined.finish_reason,
        usage or combined.usage,
        combined.warnings + tuple(warnings),
        provider_metadata if provider_metadata is not None else combined.provider_metadata,
        cost_usd if cost_usd is not None else combined.cost_usd,
    )


def _as_step(value: Any, where: str) -> Step:
    """``value`` as one Step: a Step as is, a list or tuple of Steps combined; anything else is refused."""
    if isinstance(value, Step):
        return value
    if isinstance(value, list | tuple) and all(isinstance(part, Step) for part in value):
        return step(*value)
    hint = f"; for text, pass text({value!r})" if isinstance(value, str) else ""
    raise TypeError(
        f"{where} takes steps built with text(), tool_call(), step(), ... or a list/tuple of them played as one "
        f"step; got {value!r}{hint}"
    )


class ScriptedModel:
    """A ModelClient that plays ``steps`` in order, one per request.

    ``requests`` records every ModelRequest received. Asking for a step past the end raises ``ScriptError``;
    ``assert_complete()`` raises if steps are left over. ``model_id`` names the model in hook contexts and in
    ``ResponseMetadata``. With ``context_window``, ``model_info`` reports it as the model's ``max_input_tokens``;
    there is no ``count_tokens``, so callers fall back to their own estimate.

    Raises:
        TypeError: a step is neither a Step nor a list/tuple of Steps.
    """

    def __init__(
        self, steps: Iterable[StepLike] | Step = (), *, model_id: str = "scripted", context_window: int | None = None
    ):
        self.steps: list[Step] = []
        self.model_id = model_id
        self.context_window = context_window
        self.requests: list[ModelRequest] = []
        self._played = 0
        self.extend([steps] if isinstance(steps, Step) else steps)

    def __repr__(self) -> str:
        return f"ScriptedModel({self.model_id!r}, played {self._played} of {len(self.steps)} steps)"

    def extend(self, steps: Iterable[StepLike]) -> None:
        """Append steps; a list or tuple among them is one step. Raises ``TypeError`` for anything else."""
        if isinstance(steps, str):
            raise TypeError(f"ScriptedModel takes a list of steps; for text, pass [text({steps!r})]")
        self.steps.extend([_as_step(value, "ScriptedModel") for value in steps])

    def add(self, *steps: StepLike) -> None:
        """Append each argument as one step (a list or tuple of steps is combined into one)."""
        self.extend(steps)

    @property
    def remaining(self) -> int:
        return len(self.steps) - self._played

    def assert_complete(self) -> None:
        if self._played < len(self.steps):
            raise ScriptError(f"ScriptedModel: {self.remaining} of {len(self.steps)} steps were never requested")

    async def model_info(self, model: str) -> ModelInfo | None:
        """``ModelInfo(max_input_tokens=context_window)``, or None when no ``context_window`` was given."""
        return None if self.context_window is None else ModelInfo(max_input_tokens=self.context_window)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        if self._played >= len(self.steps):
            raise ScriptError(
                f"ScriptedModel ran out of steps: request {len(self.requests)} arrived after all "
                f"{len(self.steps)} scripted steps were played"
            )
        scripted = self.steps[self._played]
        self._played += 1
        return _play(scripted, request, f"scripted-{len(self.requests)}", self.model_id)


async def _play(scripted: Step, request: ModelRequest, response_id: str, model_id: str) -> AsyncIterator[ModelEvent]:
    calls = 0
    output_chars = 0
    started = False
    for item in scripted.items:
        if isinstance(item, _Pause):
            await asyncio.sleep(item.seconds)
            continue
        if isinstance(item, _Raise):
            raise item.error
        if not started:
            started = True
            yield ResponseMetadata(id=response_id, model=model_id, timestamp=time.time())
        if isinstance(item, _ToolCall):
            # Arguments arrive in two fragments, as real providers stream them.
            half = len(item.arguments) // 2
            yield ToolCallDelta(calls, item.id, item.name, item.arguments[:half])
            if item.arguments[half:]:
                yield ToolCallDelta(calls, None, None, item.arguments[half:])
            calls += 1
            output_chars += len(item.arguments)
        else:
            if isinstance(item, TextDelta | ReasoningDelta):
                output_chars += len(item.text)
            yield item
    if not started:
        yield ResponseMetadata(id=response_id, model=model_id, timestamp=time.time())
    input_chars = sum(len(str(m.get("content") or "")) for m in request.messages)
    usage = scripted.usage or Usage(
        input_tokens=input_chars // 4 + 1,
        output_tokens=output_chars // 4 + 1,
        total_tokens=input_chars // 4 + output_chars // 4 + 2,
    )
    yield FinishEvent(
        scripted.finish_reason or ("tool_calls" if calls else "stop"),
        usage,
        warnings=scripted.warnings,
        provider_metadata=scripted.provider_metadata,
        cost_usd=scripted.cost_usd,
    )
