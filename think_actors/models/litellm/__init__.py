"""LiteLLMClient: the ModelClient for every provider litellm speaks; this package is the only importer of litellm.

``wire.py`` beside it is litellm's side of the OpenAI-wire fast path (``models/openai_wire.py``).

litellm objects never leave this module: chunks become plain ``ModelEvent`` dataclasses and exceptions become the
project's ``ModelError`` subclasses, raised with no litellm exception attached. That matters because litellm's
exceptions do not pickle (Ray would hand the caller an ``UnserializableException``) and because the process that
receives the error may not have imported litellm at all.

What litellm 1.110.2's stream carries (measured with ``ScriptedOpenAIServer``) and the events it becomes:

- the first chunk -> ``ResponseMetadata``: ``chunk.id`` is the provider's response id; the model the provider
  reported is only in the chunk's hidden params (``chunk.model`` echoes the requested model, the fallback);
  ``chunk.created`` is litellm's own clock at the first chunk, since it drops the provider's ``created``.
- ``delta.annotations`` of type ``url_citation`` (OpenAI web search, Gemini grounding), ``chunk.citations`` and
  ``chunk.search_results`` (Perplexity), and ``delta.provider_specific_fields["citation"]`` with a URL
  (Anthropic web search) -> ``SourceEvent``, once per URL.
- ``delta.images`` (Gemini, OpenRouter image output) -> ``FileEvent``.
- ``provider_specific_fields`` of chunks and deltas -> ``FinishEvent.provider_metadata``, merged, the later value
  of a key winning (as litellm's own chunk builder does).
- the usage chunk -> ``FinishEvent.usage`` and ``cost_usd`` from litellm's local price table.
- dropped or unsupported parameters are only logged by litellm, never reported on the response, so
  ``FinishEvent.warnings`` stays empty.

How it fails against an OpenAI-compatible server, and the error each failure becomes. Every error carries
``status_code`` when there was an HTTP status, ``response_body``: the error response's body as sent, parsed
into a dict when it is a JSON object, else its text (litellm keeps it on ``exc.response``; the SDK's ``.body``
holds only the ``error`` member), and ``retry_after_s`` when the answer had a ``Retry-After`` header:

- 400 ``context_length_exceeded`` (or a 400 whose text says so): ``ContextWindowExceededError`` at the call
  -> ``ContextOverflowError``.
- 429: ``RateLimitError`` at the call -> ``RateLimitError``, retryable.
- no answer within ``timeout_s``: ``Timeout``, at the call or while reading -> ``ModelTimeoutError``, retryable,
  with no ``status_code`` (litellm labels it 408; a real 408 or 504 answer keeps its status).
- no connection (refused, unreachable): litellm's ``InternalServerError`` with status 500 over the SDK's
  ``APIConnectionError`` -> ``ModelConnectionError``, retryable, no ``status_code``.
- stream cut without ``[DONE]``: ``MidStreamFallbackError`` wrapping ``APIConnectionError`` -> ``ModelConnectionError``,
  retryable.
- ``{"error": ...}`` event mid-stream: also ``MidStreamFallbackError`` wrapping ``APIConnectionError``; the event
  itself is only reachable through the exception chain -> by its code: ``ContextOverflowError``, ``RateLimitError``,
  else ``ProviderError`` (retryable unless ``invalid_request_error``), with ``in_stream=True`` and
  ``response_body={"error": ...}`` (the openai SDK keeps only the event's ``error`` member).
- 500 / 502 / 503: ``InternalServerError`` / ``ServiceUnavailableError`` / ``BadGatewayError`` -> ``ProviderError``,
  retryable.
- other 4xx (``BadRequestError``, ``AuthenticationError``, a text-body ``APIError``, ...) -> ``ProviderError``,
  not retryable.
- anything else -> ``ProviderError``, not retryable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import uuid
from collections.abc import AsyncGenerator, Iterator, Mapping
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
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from think_actors.models.provider_data import (
    CONTEXT_OVERFLOW,
    content_block_events,
    error_event_error,
    file_event,
    output_tokens,
    plain,
    reasoning_details_text,
    reported_cost_usd,
)
from think_actors.models.provider_data import get as _get
from think_actors.models.retry_policy import retry_after_s

# Without these, importing litellm fetches a model cost map from the internet and logs at INFO.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")

import httpx
import litellm
import openai  # litellm's exceptions subclass the openai SDK's, so checking the base class covers both
from litellm.exceptions import ContextWindowExceededError, MidStreamFallbackError
from litellm.llms.base_llm.chat.transformation import BaseLLMException

# Where litellm keeps the provider's own usage.cost once it wrote its bill there (litellm_core_utils.core_helpers).
_UPSTREAM_USAGE_COST = "upstream_usage_cost"

litellm.suppress_debug_info = True
_log = logging.getLogger(__name__)
for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
    logging.getLogger(_name).setLevel(logging.ERROR)

__all__ = ["LiteLLMClient"]


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
        self._model_info: dict[str, ModelInfo | None] = {}

    def __repr__(self) -> str:
        return f"LiteLLMClient(api_base={self._defaults.get('api_base')!r})"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream one request: ``ResponseMetadata``, content events, then exactly one ``FinishEvent``.

        Content events are text, reasoning and tool-call deltas, sources and files, in the order they arrive.

        Closing the generator early (``aclose``, or ``break`` inside ``contextlib.aclosing``) closes the HTTP
        response at once instead of leaving it to garbage collection.

        Raises:
            ModelError: a subclass for every provider failure, at the call or mid-stream, with ``provider``,
                ``status_code``, ``response_body``, ``in_stream`` and ``retryable`` set and no litellm exception
                attached.
        """
        provider = _provider_of(request.model)
        kwargs = self.acompletion_kwargs(request)
        error: ModelError | None = None
        try:
            response: Any = await litellm.acompletion(**kwargs)
        except Exception as exc:
            error = _to_model_error(exc, provider)
        # Raised outside the except block so the litellm exception is not even the error's __context__.
        if error is not None:
            raise error from None

        reader = _StreamReader()
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
                for event in reader.read(chunk):
                    yield event
        finally:
            # Closes the HTTP response when the consumer stops early; a no-op after a finished stream.
            await _close(response)
        yield reader.finish(request.model, kwargs.get("custom_llm_provider"))

    async def model_info(self, model: str) -> ModelInfo | None:
        """Token limits and prices of ``model`` from litellm's local table; None when it does not know the model."""
        if model not in self._model_info:
            self._model_info[model] = _lookup_model_info(model)
        return self._model_info[model]

    async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
        """The prompt size of ``messages`` by ``model``'s tokenizer (litellm's default one for unknown models).

        None when litellm cannot count them.
        """
        try:
            # In a thread: tokenizing a long transcript takes hundreds of milliseconds (measured: 300 ms for 80k
            # tokens) and would stall every other stream on this event loop.
            count = await asyncio.to_thread(litellm.token_counter, model=model, messages=messages)
        except Exception:
            _log.debug("litellm.token_counter(%r) failed", model, exc_info=True)
            return None
        return _int(count)

    def acompletion_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments ``stream`` passes to ``litellm.acompletion`` for ``request``."""
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


class _StreamReader:
    """Turns one stream's litellm chunks into events and gathers what its ``FinishEvent`` reports."""

    def __init__(self) -> None:
        self._started = False
        self._finish_reason: str | None = None
        self._usage: Any = None  # litellm's own Usage object: the cost lookup reads its cached-token details
        self._provider_metadata: dict[str, Any] = {}
        self._source_urls: set[str] = set()
        self._source_prefix = ""
        self._refused = False
        self._litellm_billed = False  # the usage chunk's usage.cost is litellm's own bill, not the provider's
        self._upstream_cost: Any = None

    def read(self, chunk: Any) -> Iterator[ModelEvent]:
        if not self._started:
            self._started = True
            metadata = _response_metadata(chunk)
            self._source_prefix = metadata.id or f"response-{uuid.uuid4().hex[:12]}"
            yield metadata
        usage = getattr(chunk, "usage", None)
        if usage:
            self._usage = usage
            # litellm may write its own bill into usage.cost, keeping what the provider reported under this key:
            # only the provider's figure is a reported cost, litellm's bill comes from the same price table as ours.
            hidden = getattr(chunk, "_hidden_params", None)
            self._litellm_billed = isinstance(hidden, dict) and _UPSTREAM_USAGE_COST in hidden
            self._upstream_cost = (
                hidden[_UPSTREAM_USAGE_COST] if isinstance(hidden, dict) and self._litellm_billed else None
            )
        self._add_provider_metadata(getattr(chunk, "provider_specific_fields", None))
        for choice in getattr(chunk, "choices", None) or ():
            index = getattr(choice, "index", None)
            if index is not None and index != 0:
                continue  # several choices (n > 1, or a server ignoring n): only the first is read
            self._finish_reason = getattr(choice, "finish_reason", None) or self._finish_reason
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            yield from _delta_events(delta)
            refusal = getattr(delta, "refusal", None)
            if isinstance(refusal, str) and refusal:
                # A refusal is what the model said instead of an answer: shown as text, the finish says
                # content_filter (as the fast path reports it).
                self._refused = True
                yield TextDelta(str(refusal))
            fields = getattr(delta, "provider_specific_fields", None)
            self._add_provider_metadata(fields)
            for annotation in _list(getattr(delta, "annotations", None)):
                if _get(annotation, "type") == "url_citation":
                    citation = _get(annotation, "url_citation") or annotation
                    yield from self._source(_get(citation, "url"), _get(citation, "title"))
            if isinstance(fields, Mapping) and isinstance(fields.get("citation"), Mapping):
                yield from self._source(_get(fields["citation"], "url"), _get(fields["citation"], "title"))
            for image in _list(getattr(delta, "images", None)):
                file = file_event(image)
                if file is not None:
                    yield file
        # Perplexity repeats its whole list on every chunk; search_results first, since only they carry titles.
        for result in _list(getattr(chunk, "search_results", None)):
            yield from self._source(_get(result, "url"), _get(result, "title"))
        for url in _list(getattr(chunk, "citations", None)):
            yield from self._source(url, None)

    def finish(self, model: str, custom_llm_provider: Any) -> FinishEvent:
        reported = None
        if self._usage is not None:
            usage = self._usage
            if self._litellm_billed:
                usage = {"cost_in_usd_ticks": _get(usage, "cost_in_usd_ticks"), "cost": self._upstream_cost}
            reported = reported_cost_usd(usage)
        reason = self._finish_reason
        return FinishEvent(
            finish_reason="content_filter" if self._refused and reason is not None else reason,
            usage=_usage(self._usage),
            warnings=(),  # litellm only logs what it drops; nothing on the response says so
            provider_metadata=self._provider_metadata or None,
            cost_usd=reported if reported is not None else _cost(model, self._usage, _str(custom_llm_provider)),
        )

    def _source(self, url: Any, title: Any) -> Iterator[SourceEvent]:
        url = _str(url)
        if url is None or url in self._source_urls:
            return
        self._source_urls.add(url)
        yield SourceEvent(f"{self._source_prefix}-source-{len(self._source_urls)}", url, _str(title))

    def _add_provider_metadata(self, fields: Any) -> None:
        if isinstance(fields, Mapping) and fields:
            self._provider_metadata.update(plain(dict(fields)))


def _response_metadata(chunk: Any) -> ResponseMetadata:
    hidden = getattr(chunk, "_hidden_params", None)
    reported = hidden.get("provider_response_model") if isinstance(hidden, Mapping) else None
    created = getattr(chunk, "created", None)
    return ResponseMetadata(
        id=_str(getattr(chunk, "id", None)),
        model=_str(reported) or _str(getattr(chunk, "model", None)),
        timestamp=float(created) if isinstance(created, int | float) and not isinstance(created, bool) else None,
    )


def _delta_events(delta: Any) -> Iterator[ModelEvent]:
    reasoning = getattr(delta, "reasoning_content", None)
    if isinstance(reasoning, str) and reasoning:
        yield ReasoningDelta(str(reasoning))
    content = getattr(delta, "content", None)
    if isinstance(content, str) and content:
        yield TextDelta(str(content))
    elif isinstance(content, list):  # Mistral's content blocks, on a route litellm passes them through
        yield from content_block_events(content)
    if not (isinstance(reasoning, str) and reasoning):
        details = getattr(delta, "reasoning_details", None)
        if details is None:
            fields = getattr(delta, "provider_specific_fields", None)
            details = fields.get("reasoning_details") if isinstance(fields, Mapping) else None
        text = reasoning_details_text(details)
        if text:
            yield ReasoningDelta(text)
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
    prompt = _int(getattr(raw, "prompt_tokens", None))
    total = _int(getattr(raw, "total_tokens", None))
    reasoning = _int(getattr(completion_details, "reasoning_tokens", None))
    return Usage(
        input_tokens=prompt,
        output_tokens=output_tokens(prompt, _int(getattr(raw, "completion_tokens", None)), total, reasoning),
        total_tokens=total,
        reasoning_tokens=reasoning,
        cached_input_tokens=_int(getattr(prompt_details, "cached_tokens", None)),
    )


def _cost(model: str, raw_usage: Any, custom_llm_provider: str | None) -> float | None:
    """The request's price in USD from litellm's local table; None when the model is unpriced or usage unknown."""
    prompt = _int(getattr(raw_usage, "prompt_tokens", None))
    completion = _int(getattr(raw_usage, "completion_tokens", None))
    if prompt is None and completion is None:
        return None
    try:
        # usage_object lets litellm price cached input tokens at the cache-read rate.
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model,
            prompt_tokens=prompt or 0,
            completion_tokens=completion or 0,
            usage_object=raw_usage if isinstance(raw_usage, litellm.Usage) else None,
            custom_llm_provider=custom_llm_provider,
        )
        cost = float(prompt_cost) + float(completion_cost)
    except Exception:  # ModelNotMappedError for an unpriced model, or anything litellm's pricing trips on
        _log.debug("no litellm price for %r", model, exc_info=True)
        return None
    return cost if cost == cost and cost >= 0 else None  # never NaN or negative


def _lookup_model_info(model: str) -> ModelInfo | None:
    try:
        info: Any = litellm.get_model_info(model)
        return ModelInfo(
            max_input_tokens=_int(info.get("max_input_tokens")),
            max_output_tokens=_int(info.get("max_output_tokens")),
            input_cost_per_token=_float(info.get("input_cost_per_token")),
            output_cost_per_token=_float(info.get("output_cost_per_token")),
        )
    except Exception:  # litellm raises for a model it has no entry for
        _log.debug("litellm has no model info for %r", model, exc_info=True)
        return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value else None


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


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
