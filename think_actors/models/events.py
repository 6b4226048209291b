"""What crosses the model boundary: the request, the normalized events, the ModelClient protocol and its optional
capabilities (``model_info``, ``count_tokens``).

The clients of this package (``auto``, ``openai_wire``, ``litellm``) import this module, never the package, so the
package's resolver can import them without a circle. The package docstring describes the protocol.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "FileEvent",
    "FinishEvent",
    "ModelClient",
    "ModelEvent",
    "ModelInfo",
    "ModelRequest",
    "ReasoningDelta",
    "ResponseMetadata",
    "SourceEvent",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "count_tokens",
    "model_info",
]

_log = logging.getLogger("think_actors.models")


@dataclass(frozen=True, slots=True)
class ResponseMetadata:
    """What the provider said about its response, yielded once per stream before that chunk's other events.

    ``id`` is the provider's response id, ``model`` the model that answered as reported, ``timestamp`` the
    response's creation time in unix seconds.
    """

    id: str | None = None
    model: str | None = None
    timestamp: float | None = None


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
class SourceEvent:
    """A source the model cited (a web search result, a URL citation); a stream names each URL at most once."""

    source_id: str
    url: str
    title: str | None = None


@dataclass(frozen=True, slots=True)
class FileEvent:
    """A file the model generated (e.g. an image), as a URL: usually a ``data:`` URL holding the bytes."""

    url: str
    media_type: str


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens one model request used, as the provider reported them (None where it reported nothing).

    ``input_tokens`` counts the whole prompt, cached tokens included. ``cached_input_tokens`` is the part read from
    the provider's prompt cache (OpenAI's and DeepSeek's automatic caching, Gemini's implicit caching, Anthropic's
    ``cache_read_input_tokens``), billed at the cheaper cache-read price; ``cache_write_input_tokens`` the part
    written to it (Anthropic's and Bedrock's ``cache_creation_input_tokens``), billed at the cache-write price.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_write_input_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Usage(
            add(self.input_tokens, other.input_tokens),
            add(self.output_tokens, other.output_tokens),
            add(self.total_tokens, other.total_tokens),
            add(self.reasoning_tokens, other.reasoning_tokens),
            add(self.cached_input_tokens, other.cached_input_tokens),
            add(self.cache_write_input_tokens, other.cache_write_input_tokens),
        )


@dataclass(frozen=True, slots=True)
class FinishEvent:
    """The end of the model's answer: ``finish_reason`` as the provider said it (``stop``, ``tool_calls``, ...).

    ``warnings`` are what the client reported as dropped or unsupported, ``provider_metadata`` provider-specific
    fields of the response as plain JSON data, and ``cost_usd`` the request's price from the client's price table
    (None when the model is not priced or the usage is unknown).
    """

    finish_reason: str | None = None
    usage: Usage | None = None
    warnings: tuple[str, ...] = ()
    provider_metadata: dict[str, Any] | None = None
    cost_usd: float | None = None


ModelEvent = ResponseMetadata | TextDelta | ReasoningDelta | ToolCallDelta | SourceEvent | FileEvent | FinishEvent


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What a client knows about a model: its token limits and prices (None where unknown)."""

    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    input_cost_per_token: float | None = None
    output_cost_per_token: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """One model call. ``messages`` and ``tools`` are in OpenAI chat-completions format.

    ``params`` holds sampling settings (temperature, top_p, top_k, max_tokens, presence_penalty,
    frequency_penalty, stop, seed); ``provider_options`` is passed through to the provider call as extra
    keyword arguments. ``prompt_caching`` marks the prompt's stable prefix for providers whose cache needs it
    (Anthropic's Claude, also on Bedrock, Vertex AI and Azure AI): None where litellm's model table says the model
    supports prompt caching, True on every such provider's Claude model, False never. Providers that cache on their
    own (OpenAI, DeepSeek, Gemini) need no marking either way.
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
    prompt_caching: bool | None = None


@runtime_checkable
class ModelClient(Protocol):
    """Streams one model request. Raise ``ModelError`` subclasses for provider failures."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...


async def model_info(client: ModelClient, model: str) -> ModelInfo | None:
    """``client.model_info(model)``; None when the client has no such method or it fails (logged at debug)."""
    method = getattr(client, "model_info", None)
    if method is None:
        return None
    try:
        info = await method(model)
    except Exception:
        _log.debug("model_info(%r) failed on %r", model, client, exc_info=True)
        return None
    return info if isinstance(info, ModelInfo) else None


async def count_tokens(client: ModelClient, model: str, messages: list[dict[str, Any]]) -> int | None:
    """``client.count_tokens(model, messages)``; None when the client has no such method or it fails."""
    method = getattr(client, "count_tokens", None)
    if method is None:
        return None
    try:
        count = await method(model, messages)
    except Exception:
        _log.debug("count_tokens(%r) failed on %r", model, client, exc_info=True)
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None
