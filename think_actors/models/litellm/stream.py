"""LiteLLMClient's reading side: litellm's stream chunks become ``ModelEvent`` dataclasses, usage, cost and model info.

The package's ``__init__`` configures litellm before anything here imports it (a submodule always loads after its
package); the package docstring lists what each chunk field becomes.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import litellm

from think_actors.models.events import (
    FinishEvent,
    ModelEvent,
    ModelInfo,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from think_actors.models.provider_data import (
    content_block_events,
    file_event,
    output_tokens,
    plain,
    reasoning_details_text,
    reported_cost_usd,
)
from think_actors.models.provider_data import get as _get

from .prompt_caching import cache_write_tokens

_log = logging.getLogger("think_actors.models.litellm")

# Where litellm keeps the provider's own usage.cost once it wrote its bill there (litellm_core_utils.core_helpers).
_UPSTREAM_USAGE_COST = "upstream_usage_cost"


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
        cache_write_input_tokens=cache_write_tokens(raw),
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
