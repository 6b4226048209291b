"""LiteLLMClient: the ModelClient for every provider litellm speaks, and the package's only importer of litellm.

litellm objects never leave this module: chunks become plain ``ModelEvent`` dataclasses and exceptions become the
project's ``ModelError`` subclasses, raised with no litellm exception attached. That matters because litellm's
exceptions do not pickle (Ray would hand the caller an ``UnserializableException``) and because the process that
receives the error may not have imported litellm at all.

How litellm 1.110.2 fails against an OpenAI-compatible server (measured with ``ScriptedOpenAIServer``), and the
error each failure becomes:

- 400 ``context_length_exceeded`` (or a 400 whose text says so): ``ContextWindowExceededError`` at the call
  -> ``ContextOverflowError``.
- 429: ``RateLimitError`` at the call -> ``RateLimitError``, retryable.
- no answer within ``timeout_s``: ``Timeout``, at the call or while reading -> ``ModelTimeoutError``, retryable.
- stream cut without ``[DONE]``: ``MidStreamFallbackError`` wrapping ``APIConnectionError`` -> ``ModelConnectionError``,
  retryable.
- ``{"error": ...}`` event mid-stream: also ``MidStreamFallbackError`` wrapping ``APIConnectionError``; the event
  itself is only reachable through the exception chain -> by its code: ``ContextOverflowError``, ``RateLimitError``,
  else ``ProviderError`` (retryable unless ``invalid_request_error``).
- 500 / 502 / 503: ``InternalServerError`` / ``ServiceUnavailableError`` -> ``ProviderError``, retryable.
- other 4xx (``BadRequestError``, ``AuthenticationError``, ...) -> ``ProviderError``, not retryable.
- anything else -> ``ProviderError``, not retryable.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import AsyncGenerator, Iterator
from typing import Any

from think_actors.errors import (
    ContextOverflowError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    ProviderError,
    RateLimitError,
)
from think_actors.models import (
    FinishEvent,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

# Without these, importing litellm fetches a model cost map from the internet and logs at INFO.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")

import litellm
import openai  # litellm's exceptions subclass the openai SDK's, so checking the base class covers both
from litellm.exceptions import ContextWindowExceededError, MidStreamFallbackError

litellm.suppress_debug_info = True
for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
    logging.getLogger(_name).setLevel(logging.ERROR)

__all__ = ["LiteLLMClient"]

_CONTEXT_OVERFLOW = re.compile(
    r"context[ _-]?(length|window)|maximum context|prompt is too long|input is too long|too many tokens"
    r"|exceeds? the (model's )?(maximum|context)",
    re.IGNORECASE,
)


class LiteLLMClient:
    """Streams chat completions through ``litellm.acompletion`` and normalizes them to ``ModelEvent``.

    Args:
        api_base: Default endpoint, e.g. a local OpenAI-compatible server's ``http://127.0.0.1:PORT/v1``.
        api_key: Default key; litellm otherwise reads the provider's usual environment variable.
        **extra: Further default keyword arguments for every ``litellm.acompletion`` call. A request's ``params``
            and ``provider_options`` override them.
    """

    def __init__(self, *, api_base: str | None = None, api_key: str | None = None, **extra: Any) -> None:
        self._defaults: dict[str, Any] = dict(extra)
        if api_base is not None:
            self._defaults["api_base"] = api_base
        if api_key is not None:
            self._defaults["api_key"] = api_key

    def __repr__(self) -> str:
        return f"LiteLLMClient(api_base={self._defaults.get('api_base')!r})"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream one request: text, reasoning and tool-call deltas, then exactly one ``FinishEvent``.

        Closing the generator early (``aclose``, or ``break`` inside ``contextlib.aclosing``) closes the HTTP
        response at once instead of leaving it to garbage collection.

        Raises:
            ModelError: a subclass for every provider failure, at the call or mid-stream, with ``provider``,
                ``status_code`` and ``retryable`` set and no litellm exception attached.
        """
        provider = _provider_of(request.model)
        error: ModelError | None = None
        try:
            response: Any = await litellm.acompletion(**self._call_kwargs(request))
        except Exception as exc:
            error = _to_model_error(exc, provider)
        # Raised outside the except block so the litellm exception is not even the error's __context__.
        if error is not None:
            raise error from None

        finish_reason: str | None = None
        usage: Usage | None = None
        chunks = aiter(response)
        try:
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    error = _to_model_error(exc, provider, mid_stream=True)
                if error is not None:
                    raise error from None
                usage = _usage(getattr(chunk, "usage", None)) or usage
                for choice in getattr(chunk, "choices", None) or ():
                    finish_reason = getattr(choice, "finish_reason", None) or finish_reason
                    for event in _delta_events(getattr(choice, "delta", None)):
                        yield event
        finally:
            # Closes the HTTP response when the consumer stops early; a no-op after a finished stream.
            await _close(response)
        yield FinishEvent(finish_reason=finish_reason, usage=usage)

    def _call_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            **self._defaults,
            "model": request.model,
            "messages": request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        optional = {
            "tools": request.tools or None,
            "tool_choice": request.tool_choice,
            "response_format": request.response_format,
            "timeout": request.timeout_s,
            "extra_headers": request.headers,
            # max_retries drives the provider SDK's own retries, num_retries litellm's; given both, litellm makes
            # n + 1 attempts in all (measured), and with neither the openai SDK's default of 2 retries applies.
            "max_retries": request.max_retries,
            "num_retries": request.max_retries,
        }
        kwargs.update((key, value) for key, value in optional.items() if value is not None)
        kwargs.update(request.params)
        kwargs.update(request.provider_options)
        return kwargs


def _delta_events(delta: Any) -> Iterator[ModelEvent]:
    if delta is None:
        return
    reasoning = getattr(delta, "reasoning_content", None)
    if isinstance(reasoning, str) and reasoning:
        yield ReasoningDelta(reasoning)
    content = getattr(delta, "content", None)
    if isinstance(content, str) and content:
        yield TextDelta(content)
    for position, call in enumerate(getattr(delta, "tool_calls", None) or ()):
        function = getattr(call, "function", None)
        index = getattr(call, "index", None)
        call_id = getattr(call, "id", None)
        name = getattr(function, "name", None)
        arguments = getattr(function, "arguments", None) or ""
        if call_id or name or arguments:
            yield ToolCallDelta(
                index=index if isinstance(index, int) else position,
                id=str(call_id) if call_id else None,
                name=str(name) if name else None,
                arguments=str(arguments),
            )


def _usage(raw: Any) -> Usage | None:
    if raw is None:
        return None
    completion_details = getattr(raw, "completion_tokens_details", None)
    prompt_details = getattr(raw, "prompt_tokens_details", None)
    return Usage(
        input_tokens=_int(getattr(raw, "prompt_tokens", None)),
        output_tokens=_int(getattr(raw, "completion_tokens", None)),
        total_tokens=_int(getattr(raw, "total_tokens", None)),
        reasoning_tokens=_int(getattr(completion_details, "reasoning_tokens", None)),
        cached_input_tokens=_int(getattr(prompt_details, "cached_tokens", None)),
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def _close(response: Any) -> None:
    aclose = getattr(response, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):  # cleanup must not hide the error or the events before it
            await aclose()


def _provider_of(model: str) -> str | None:
    # "openai/gpt-4o" -> "openai"; a bare "gpt-4o" leaves the provider to litellm's guess.
    return model.split("/", 1)[0] if "/" in model else None


# -- errors -----------------------------------------------------------------------------------------------------


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
            return _error_event_to_model_error(event, provider)
    if isinstance(exc, MidStreamFallbackError):
        # A wrapper litellm adds so its Router can fall back; what failed is the exception inside.
        original = exc.original_exception
        if isinstance(original, Exception) and not isinstance(original, MidStreamFallbackError):
            return _to_model_error(original, provider, mid_stream=True)
        return ModelConnectionError(
            f"stream cut before it finished: {_message(exc)}", provider=provider, retryable=True
        )
    message = _message(exc)
    status = _status(exc)
    if isinstance(exc, ContextWindowExceededError) or (
        isinstance(exc, openai.BadRequestError) and _CONTEXT_OVERFLOW.search(message)
    ):
        return ContextOverflowError(message, provider=provider, status_code=status)
    if isinstance(exc, openai.RateLimitError):
        return RateLimitError(message, provider=provider, status_code=status, retryable=True)
    # Before APIConnectionError: the SDK's timeout error subclasses it.
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return ModelTimeoutError(message, provider=provider, status_code=status, retryable=True)
    if isinstance(exc, openai.APIConnectionError | ConnectionError):
        # litellm labels connection failures 500, but no HTTP status was received, so report none.
        if mid_stream:
            message = f"stream cut before it finished: {message}"
        return ModelConnectionError(message, provider=provider, retryable=True)
    if isinstance(exc, openai.APIError):
        return ProviderError(message, provider=provider, status_code=status, retryable=status is None or status >= 500)
    return ProviderError(f"{type(exc).__name__}: {message}", provider=provider, status_code=status)


def _error_event(exc: BaseException) -> openai.APIError | None:
    """The provider's ``{"error": ...}`` event behind a mid-stream failure, if that is what ended the stream."""
    for linked in _linked(exc):
        if (
            type(linked) is openai.APIError  # the SDK raises the bare class for an error event in the SSE stream
            and isinstance(linked.body, dict)
        ):
            return linked
    return None


def _error_event_to_model_error(event: openai.APIError, provider: str | None) -> ModelError:
    message = f"error event mid-stream: {event.message}"
    code = _str(event.code) or ""
    if code == "context_length_exceeded" or _CONTEXT_OVERFLOW.search(event.message):
        return ContextOverflowError(message, provider=provider)
    if code in ("rate_limit_exceeded", "rate_limit_error") or event.type in ("rate_limit_error", "requests"):
        return RateLimitError(message, provider=provider, retryable=True)
    # The provider accepted the request and then failed while generating: usually transient.
    return ProviderError(message, provider=provider, retryable=event.type != "invalid_request_error")


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


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
