"""Provider data made into the project's plain facts, the same way by both model clients.

``LiteLLMClient`` reads it from litellm's objects and ``OpenAIWireClient`` from the JSON of the OpenAI wire; what
comes out must not differ, so the rules live here: the media type of a generated image, JSON-safe provider
metadata, what an ``{"error": ...}`` event inside a stream becomes, and the provider quirks real recordings show
(``tests/data/provider_streams/``): Mistral's content blocks, ``reasoning_details``, xAI's reasoning tokens and
cost ticks, OpenRouter's reported cost.
"""

from __future__ import annotations

import contextlib
import mimetypes
import re
from collections.abc import Mapping
from typing import Any

from think_actors.errors import ContextOverflowError, ModelError, ProviderError, RateLimitError
from think_actors.models.events import FileEvent, ModelEvent, ReasoningDelta, TextDelta

__all__ = [
    "CONTEXT_OVERFLOW",
    "USD_PER_XAI_TICK",
    "content_block_events",
    "error_event_error",
    "file_event",
    "get",
    "output_tokens",
    "plain",
    "reasoning_details_text",
    "reported_cost_usd",
    "text_or_none",
]

# xAI reports a request's price in ticks of a ten-billionth of a dollar (docs.x.ai, "cost tracking").
USD_PER_XAI_TICK = 1e-10

# An error message that says the prompt is too long for the model, whatever the provider's wording.
CONTEXT_OVERFLOW = re.compile(
    r"context[ _-]?(length|window)|maximum context|prompt is too long|input is too long|too many tokens"
    r"|exceeds? the (model's )?(maximum|context)",
    re.IGNORECASE,
)

_DATA_URL_TYPE = re.compile(r"data:([\w.+-]+/[\w.+-]+)[;,]", re.IGNORECASE)


def text_or_none(value: Any) -> str | None:
    """``value`` as a plain ``str`` when it is a non-empty string, else None."""
    return str(value) if isinstance(value, str) and value else None


def get(obj: Any, key: str) -> Any:
    """``obj[key]`` for a mapping, else ``obj.key``: litellm hands over dicts or pydantic objects."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def file_event(image: Any) -> FileEvent | None:
    """A generated image as a ``FileEvent``; None when it carries no URL.

    The shape is ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}, "index": 0}``
    (Gemini and OpenRouter image output as litellm and the wire give it), or ``image_url`` as a bare string.
    """
    image_url = get(image, "image_url")
    url = text_or_none(get(image_url, "url") if not isinstance(image_url, str) else image_url)
    if url is None:
        return None
    match = _DATA_URL_TYPE.match(url)
    media_type = match.group(1).lower() if match else mimetypes.guess_type(url)[0]
    # The field holds images only, so a URL without a recognisable type is still some image.
    return FileEvent(url, media_type if media_type and media_type.startswith("image/") else "image/*")


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data of exact builtin types (no litellm or pydantic objects, which would not pickle)."""
    if value is None or type(value) in (bool, str, int, float):
        return value
    if depth > 32:
        return repr(value)
    # Subclasses (str and int enums, litellm's own str types) become the builtin value they hold.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # bool cannot be subclassed, so this is an int subclass
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v, depth + 1) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        with contextlib.suppress(Exception):
            return plain(dump(mode="json"), depth + 1)
    return repr(value)


def content_block_events(blocks: list[Any]) -> list[ModelEvent]:
    """The events of a ``delta.content`` sent as a list of blocks (Mistral's Magistral models).

    ``{"type": "text", "text": ...}`` is text; ``{"type": "thinking", "thinking": [{"type": "text", ...}]}`` (or a
    plain string) is reasoning. Other block types carry nothing to show.
    """
    events: list[ModelEvent] = []
    for block in blocks:
        kind = get(block, "type")
        if kind == "text":
            text = text_or_none(get(block, "text"))
            if text is not None:
                events.append(TextDelta(text))
        elif kind == "thinking":
            thinking = get(block, "thinking")
            parts = [thinking] if isinstance(thinking, str) else thinking if isinstance(thinking, list) else []
            for part in parts:
                text = text_or_none(part if isinstance(part, str) else get(part, "text"))
                if text is not None:
                    events.append(ReasoningDelta(text))
    return events


def reasoning_details_text(details: Any) -> str:
    """The readable reasoning in an OpenRouter-style ``reasoning_details`` list (Snowflake sends only this).

    ``reasoning.text`` entries carry ``text``, ``reasoning.summary`` entries ``summary``; ``reasoning.encrypted``
    carries nothing readable.
    """
    if not isinstance(details, list):
        return ""
    texts = []
    for detail in details:
        kind = get(detail, "type")
        value = get(detail, "text") if kind == "reasoning.text" else get(detail, "summary")
        if kind in ("reasoning.text", "reasoning.summary") and isinstance(value, str):
            texts.append(value)
    return "".join(texts)


def output_tokens(prompt: int | None, completion: int | None, total: int | None, reasoning: int | None) -> int | None:
    """The output tokens a usage stands for: ``completion`` plus ``reasoning`` when the provider counted them apart.

    OpenAI counts reasoning inside ``completion_tokens``; xAI leaves it out and says so by its total
    (``total = prompt + completion + reasoning``), so its output is completion plus reasoning.
    """
    if reasoning and prompt is not None and completion is not None and total == prompt + completion + reasoning:
        return completion + reasoning
    return completion


def reported_cost_usd(usage: Any) -> float | None:
    """The price the provider itself reported in its usage, in USD; None when it reported none.

    xAI's ``cost_in_usd_ticks`` and OpenRouter's ``cost``. A provider's own figure wins over the price table.
    """
    ticks = get(usage, "cost_in_usd_ticks")
    if type(ticks) is int and ticks >= 0:
        return ticks * USD_PER_XAI_TICK
    cost = get(usage, "cost")
    if type(cost) in (int, float) and cost == cost and cost >= 0:
        return float(cost)
    return None


def _status(value: Any) -> int | None:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if type(value) is int and 100 <= value < 600 else None


def error_event_error(error: Any, provider: str | None) -> ModelError:
    """What a stream's ``{"error": ...}`` event becomes, given the event's ``error`` member.

    The message is the member's ``message`` (the whole member when it is a string), classified by its ``code``
    and ``type`` as the openai SDK reads them: an overflow, a rate limit, else a provider error that is retryable
    unless the request itself was invalid. ``status_code`` is the member's ``code`` when it is an HTTP status
    (OpenRouter sends 400), else its ``status_code`` (Groq); a 4xx is not retryable, and a ``code`` that is not a
    number (Groq's ``tool_use_failed``) is only a word. ``response_body`` is the event as the provider sent it.
    """
    message = get(error, "message") if isinstance(error, Mapping) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"  # the openai SDK's words for an error without a message
    text = error if isinstance(error, str) else message
    raw_code = error.get("code") if isinstance(error, Mapping) else None
    status = _status(raw_code)
    if status is None and isinstance(error, Mapping):
        status = _status(error.get("status_code"))
    code = str(raw_code) if raw_code is not None else ""
    error_type = error.get("type") if isinstance(error, Mapping) else None
    facts: dict[str, Any] = {
        "provider": provider,
        "response_body": {"error": plain(error)},
        "in_stream": True,
        "status_code": status,
    }
    described = f"error event mid-stream: {text}"
    if code == "context_length_exceeded" or CONTEXT_OVERFLOW.search(text):
        return ContextOverflowError(described, **facts)
    if (
        code in ("rate_limit_exceeded", "rate_limit_error")
        or error_type in ("rate_limit_error", "requests")
        or status == 429
    ):
        return RateLimitError(described, retryable=True, **facts)
    # The provider accepted the request and then failed while generating: usually transient, unless it says the
    # request was at fault (an invalid request, a 4xx such as OpenRouter's "Token limit reached").
    invalid = error_type == "invalid_request_error" or (status is not None and 400 <= status < 500)
    return ProviderError(described, retryable=not invalid, **facts)
