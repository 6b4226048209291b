"""LiteLLMClient: the ModelClient for every provider litellm speaks; this package is the only importer of litellm.

``stream.py`` reads litellm's chunks, ``error_map.py`` maps its exceptions; ``wire.py`` is litellm's side of the
OpenAI-wire fast path (``models/openai_wire.py``).

litellm objects never leave this package: chunks become plain ``ModelEvent`` dataclasses and exceptions become the
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
- the usage chunk -> ``FinishEvent.usage`` and ``cost_usd`` from litellm's local price table, cached prompt
  tokens (``prompt_tokens_details.cached_tokens`` and ``cache_write_tokens``) priced at their own rates.
- a request to a Claude model gets litellm's ``cache_control_injection_points`` (``prompt_caching.py``).
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
import logging
import os
from collections.abc import AsyncGenerator
from typing import Any

from think_actors.errors import ModelError
from think_actors.models.events import ModelEvent, ModelInfo, ModelRequest

# Without these, importing litellm fetches a model cost map from the internet and logs at INFO.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")

import litellm

litellm.suppress_debug_info = True
_log = logging.getLogger(__name__)
for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
    logging.getLogger(_name).setLevel(logging.ERROR)

# The modules beside this one import litellm too: only after the configuration above.
from .error_map import _to_model_error  # noqa: E402
from .prompt_caching import injection_points  # noqa: E402
from .stream import _close, _int, _lookup_model_info, _str, _StreamReader  # noqa: E402

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
        # Before the provider options, so a caller's own cache_control_injection_points replace these.
        points = injection_points(request, _str(request.provider_options.get("custom_llm_provider")))
        if points is not None:
            kwargs["cache_control_injection_points"] = points
        kwargs.update(request.provider_options)
        return kwargs


def _provider_of(model: str) -> str | None:
    # "openai/gpt-4o" -> "openai"; a bare "gpt-4o" leaves the provider to litellm's guess.
    return model.split("/", 1)[0] if "/" in model else None


# -- errors -----------------------------------------------------------------------------------------------------
