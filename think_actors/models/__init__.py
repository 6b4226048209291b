"""The ModelClient protocol: one streamed model request in, normalized events out.

Events are small slotted dataclasses of plain data (they pickle cheaply, so a model-client actor can send
them in batches). A client raises a ``ModelError`` subclass for provider failures, before or during the stream.
Only ``models/litellm.py`` imports litellm.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "FinishEvent",
    "ModelClient",
    "ModelEvent",
    "ModelRequest",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "resolve_model",
    "set_model_resolver",
]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of one tool call; ``index`` identifies the call within the step (OpenAI streaming shape).

    The first fragment of a call carries ``id`` and ``name``; ``arguments`` fragments concatenate to JSON.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_input_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Usage(
            add(self.input_tokens, other.input_tokens),
            add(self.output_tokens, other.output_tokens),
            add(self.total_tokens, other.total_tokens),
            add(self.reasoning_tokens, other.reasoning_tokens),
            add(self.cached_input_tokens, other.cached_input_tokens),
        )


@dataclass(frozen=True, slots=True)
class FinishEvent:
    """The end of the model's answer: ``finish_reason`` as the provider said it (``stop``, ``tool_calls``, ...)."""

    finish_reason: str | None = None
    usage: Usage | None = None


ModelEvent = TextDelta | ReasoningDelta | ToolCallDelta | FinishEvent


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """One model call. ``messages`` and ``tools`` are in OpenAI chat-completions format.

    ``params`` holds sampling settings (temperature, top_p, top_k, max_tokens, presence_penalty,
    frequency_penalty, stop, seed); ``provider_options`` is passed through to the provider call as extra
    keyword arguments.
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] | None = None
    timeout_s: float | None = None
    max_retries: int | None = None
    provider_options: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ModelClient(Protocol):
    """Streams one model request. Raise ``ModelError`` subclasses for provider failures."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...


def _default_resolver(model_id: str) -> ModelClient:
    from .litellm import LiteLLMClient  # imported lazily: litellm costs ~3 s and ~200 MiB

    return LiteLLMClient()


_resolver: Any = _default_resolver


def set_model_resolver(resolver: Any) -> None:
    """Set how string model ids become clients (the Ray runtime serves them from model-client actors)."""
    global _resolver
    _resolver = resolver or _default_resolver


def resolve_model(model: str | ModelClient) -> tuple[ModelClient, str]:
    """The client serving ``model`` and the model id to put in the request."""
    if isinstance(model, str):
        return _resolver(model), model
    return model, getattr(model, "model_id", type(model).__name__)
