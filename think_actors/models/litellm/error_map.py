"""LiteLLMClient's failures: every litellm or openai SDK exception becomes the project's ``ModelError`` subclass.

The package docstring lists each failure and the error it becomes; nothing litellm raised leaves this module.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import openai  # litellm's exceptions subclass the openai SDK's, so checking the base class covers both
from litellm.exceptions import ContextWindowExceededError, MidStreamFallbackError
from litellm.llms.base_llm.chat.transformation import BaseLLMException

from think_actors.errors import (
    ContextOverflowError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    ProviderError,
    RateLimitError,
)
from think_actors.models.provider_data import (
    CONTEXT_OVERFLOW,
    error_event_error,
    plain,
)
from think_actors.models.retry_policy import retry_after_s

from .stream import _int, _str

_log = logging.getLogger("think_actors.models.litellm")


def _to_model_error(exc: Exception, provider: str | None, *, mid_stream: bool = False) -> ModelError:
    """The project error for a litellm/openai exception, holding only plain facts copied from it."""
    if isinstance(exc, ModelError):
        return exc
    provider = _str(getattr(exc, "llm_provider", None)) or provider
    if mid_stream:
        # litellm flattens an error event in the stream into an APIConnectionError; the provider's own error
        # survives only as the openai.APIError it chained, so look for that before calling it a cut connection.
        event = _error_event(exc)
        if event is not None:
            # The SDK kept only the event's "error" member as the body; it is what the event is classified by.
            return error_event_error(event.body, provider)
        parsed = _parsed_error_event(exc)
        if parsed is not None:
            return error_event_error(parsed, provider)
    if isinstance(exc, MidStreamFallbackError):
        # A wrapper litellm adds so its Router can fall back; what failed is the exception inside.
        original = exc.original_exception
        if isinstance(original, Exception) and not isinstance(original, MidStreamFallbackError):
            return _to_model_error(original, provider, mid_stream=True)
        return ModelConnectionError(
            f"stream cut before it finished: {_message(exc)}", provider=provider, retryable=True, in_stream=False
        )
    message = _message(exc)
    status = _status(exc)
    error_response = _error_response(exc)
    facts: dict[str, Any] = {
        "provider": provider,
        "status_code": status,
        "response_body": _response_body(exc),
        "in_stream": False,
        "retry_after_s": retry_after_s(error_response.headers) if error_response is not None else None,
    }
    if error_response is None and _connection_failed(exc):
        # litellm labels a refused or dropped connection 500 (even InternalServerError), but no HTTP status came
        # back, so report none.
        if mid_stream:
            message = f"stream cut before it finished: {message}"
        return ModelConnectionError(message, retryable=True, **{**facts, "status_code": None, "response_body": None})
    if isinstance(exc, ContextWindowExceededError) or (
        isinstance(exc, openai.BadRequestError) and CONTEXT_OVERFLOW.search(message)
    ):
        return ContextOverflowError(message, **facts)
    if isinstance(exc, openai.RateLimitError):
        return RateLimitError(message, retryable=True, **facts)
    # Before APIConnectionError: the SDK's timeout error subclasses it.
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        if error_response is None:
            # litellm labels its own timeouts 408, but no HTTP status was received (a real 408 or 504 keeps its).
            facts["status_code"] = None
        return ModelTimeoutError(message, retryable=True, **facts)
    if isinstance(exc, openai.APIConnectionError | ConnectionError):
        if mid_stream:
            message = f"stream cut before it finished: {message}"
        return ModelConnectionError(message, retryable=True, **{**facts, "status_code": None, "response_body": None})
    if isinstance(exc, openai.APIError):
        return ProviderError(message, retryable=status is None or status >= 500, **facts)
    return ProviderError(f"{type(exc).__name__}: {message}", **facts)


def _response_body(exc: BaseException) -> Any:
    """The provider's error body: the JSON object as a dict, else the text; None without an error response.

    The HTTP response litellm keeps holds the whole body (``{"error": {...}}``, Anthropic's
    ``{"type": "error", "error": {...}}``, a proxy's HTML); the SDK's ``.body`` only its ``error`` member, so it is
    the fallback.
    """
    linked = list(_linked(exc))
    for current in linked:
        response = _http_error_response(current)
        if response is not None:
            try:
                text = response.text
            except Exception:  # a streamed body that was never read
                continue
            if text:
                return _parse_body(text)
    for current in linked:
        body = getattr(current, "body", None)
        if body is not None:
            return _parse_body(body) if isinstance(body, str) else plain(body)
    return None


def _error_response(exc: BaseException) -> httpx.Response | None:
    """The provider's HTTP error response behind ``exc``, if there was one."""
    for current in _linked(exc):
        response = _http_error_response(current)
        if response is not None:
            return response
    return None


def _http_error_response(exc: BaseException) -> httpx.Response | None:
    # Only an error status, and only a response that came over the wire (which always has headers): a failure
    # may carry the 200 stream, or a header-less placeholder litellm makes up (status 500 for a timeout).
    response = getattr(exc, "response", None)
    if (
        isinstance(response, httpx.Response)
        and isinstance(response.status_code, int)
        and response.status_code >= 400
        and response.headers
    ):
        return response
    return None


def _parse_body(text: str) -> Any:
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed if isinstance(parsed, dict) else text


def _connection_failed(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a connection that failed, not from a timeout or an answer."""
    if any(isinstance(linked, openai.APITimeoutError | TimeoutError) for linked in _linked(exc)):
        return False
    return any(isinstance(linked, openai.APIConnectionError) for linked in _linked(exc))


def _error_event(exc: BaseException) -> openai.APIError | None:
    """The provider's ``{"error": ...}`` event behind a mid-stream failure, if that is what ended the stream."""
    for linked in _linked(exc):
        # The SDK raises the bare class, with the event's "error" member as body, for an error event in the stream.
        if type(linked) is openai.APIError and linked.body is not None:
            return linked
    return None


# How litellm's OpenRouter route words an error event before raising it (its chunk parser's format).
_OPENROUTER_EVENT = re.compile(r"Message: (?P<message>.*), Metadata: .*, User ID: .*\Z", re.DOTALL)


def _parsed_error_event(exc: BaseException) -> dict[str, Any] | None:
    """The ``error`` member of an error event litellm's own HTTP handler raised mid-stream, as the event said it.

    Those routes' chunk parsers raise the provider's exception for the event: Groq's keeps the member as its body
    (and its non-numeric ``code`` then breaks litellm's wrapper with a ValueError), OpenRouter's rewords the
    message around the original one and keeps the code as the status. Both are read back to the event.
    """
    for linked in _linked(exc):
        if not isinstance(linked, BaseLLMException):
            continue
        body = getattr(linked, "body", None)
        if isinstance(body, Mapping) and isinstance(body.get("message"), str):
            return dict(body)
        message = getattr(linked, "message", None)
        match = _OPENROUTER_EVENT.match(message) if isinstance(message, str) else None
        if match is not None:
            return {"message": match.group("message"), "code": _int(getattr(linked, "status_code", None))}
    return None


def _linked(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception reachable from it through ``original_exception``, cause and context."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending and len(seen) < 32:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for linked in (getattr(current, "original_exception", None), current.__cause__, current.__context__):
            if isinstance(linked, BaseException):
                pending.append(linked)


def _message(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    return message if isinstance(message, str) and message else str(exc)


def _status(exc: BaseException) -> int | None:
    return _int(getattr(exc, "status_code", None))
