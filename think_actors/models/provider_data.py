"""Provider data made into the project's plain facts, the same way by both model clients.

``LiteLLMClient`` reads it from litellm's objects and ``OpenAIWireClient`` from the JSON of the OpenAI wire; what
comes out must not differ, so the rules live here: the media type of a generated image, JSON-safe provider
metadata, and what an ``{"error": ...}`` event inside a stream becomes.
"""

from __future__ import annotations

import contextlib
import mimetypes
import re
from collections.abc import Mapping
from typing import Any

from think_actors.errors import ContextOverflowError, ModelError, ProviderError, RateLimitError
from think_actors.models import FileEvent

__all__ = ["CONTEXT_OVERFLOW", "error_event_error", "file_event", "get", "plain", "text_or_none"]

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


def error_event_error(error: Any, provider: str | None) -> ModelError:
    """What a stream's ``{"error": ...}`` event becomes, given the event's ``error`` member.

    The message is the member's ``message`` (the whole member when it is a string), classified by its ``code``
    and ``type`` as the openai SDK reads them: an overflow, a rate limit, else a provider error that is retryable
    unless the request itself was invalid. ``response_body`` is the event as the provider sent it.
    """
    message = get(error, "message") if isinstance(error, Mapping) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"  # the openai SDK's words for an error without a message
    text = error if isinstance(error, str) else message
    code = error.get("code") if isinstance(error, Mapping) else None
    code = str(code) if code is not None else ""
    error_type = error.get("type") if isinstance(error, Mapping) else None
    facts: dict[str, Any] = {"provider": provider, "response_body": {"error": plain(error)}, "in_stream": True}
    described = f"error event mid-stream: {text}"
    if code == "context_length_exceeded" or CONTEXT_OVERFLOW.search(text):
        return ContextOverflowError(described, **facts)
    if code in ("rate_limit_exceeded", "rate_limit_error") or error_type in ("rate_limit_error", "requests"):
        return RateLimitError(described, retryable=True, **facts)
    # The provider accepted the request and then failed while generating: usually transient.
    return ProviderError(described, retryable=error_type != "invalid_request_error", **facts)
