"""Prompt caching: where a request marks its stable prefix for the provider, and the cache tokens its usage reports.

Providers cache a prompt's prefix in one of two ways. OpenAI, DeepSeek and Gemini do it on their own and only report
the tokens they read from the cache; nothing in the request changes. Anthropic's Claude (directly, on Bedrock, on
Vertex AI and on Azure AI) caches only up to the blocks the request marks with ``cache_control`` — at most 4 per
request (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching). For those, ``injection_points``
asks litellm to mark, through its own ``cache_control_injection_points`` option (litellm's
``AnthropicCacheControlHook`` does the marking, counts the marks a caller already placed against the cap of 4 and
translates them to each provider's form: Bedrock's converse ``cachePoint`` blocks, Anthropic's ``cache_control``):

1. the last tool definition (``tool_config``): the tools are the prefix's first part;
2. the system message: tools and instructions, the same for every turn;
3. the newest user message: the conversation so far, which the next turn of the conversation starts with;
4. the last message, when it is not that user message (a step after tool calls): the turn so far, which the next
   step starts with.

The marks cost nothing where the prompt is shorter than the provider's minimum (Anthropic: 1,024 tokens for most
models); a write costs 1.25x the input price, a read 0.1x, so a prefix pays off from its first reuse.
"""

from __future__ import annotations

from typing import Any

import litellm
from litellm.llms.anthropic.common_utils import supports_anthropic_cache_control

from think_actors.models.events import ModelRequest
from think_actors.models.provider_data import get as _get

__all__ = ["MARKED_PROVIDERS", "cache_write_tokens", "injection_points"]

# litellm's provider names whose Claude models take cache_control marks (litellm's supports_anthropic_cache_control).
MARKED_PROVIDERS = frozenset({"anthropic", "bedrock", "vertex_ai", "azure_ai"})
_EPHEMERAL = {"type": "ephemeral"}


def injection_points(request: ModelRequest, custom_llm_provider: str | None = None) -> list[dict[str, Any]] | None:
    """litellm's ``cache_control_injection_points`` for ``request``; None when it marks nothing.

    ``request.prompt_caching``: None marks when litellm's model table says the model supports prompt caching,
    True marks any Claude model of the providers above (a model newer than the table), False never marks.
    """
    if request.prompt_caching is False or not request.messages:
        return None
    if not _marks(request.model, custom_llm_provider, forced=request.prompt_caching is True):
        return None
    messages = request.messages
    points: list[dict[str, Any]] = []
    if request.tools:
        points.append({"location": "tool_config", "control": dict(_EPHEMERAL)})
    system = next((i for i, m in enumerate(messages) if m.get("role") in ("system", "developer")), None)
    if system is not None:
        points.append(_message_point(system))
    user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if user is not None and user != system:
        points.append(_message_point(user))
    last = len(messages) - 1
    if last not in (user, system):
        points.append(_message_point(last))
    return points


def _message_point(index: int) -> dict[str, Any]:
    return {"location": "message", "role": None, "index": index, "control": dict(_EPHEMERAL)}


def _marks(model: str, custom_llm_provider: str | None, *, forced: bool) -> bool:
    try:
        provider = litellm.get_llm_provider(model, custom_llm_provider=custom_llm_provider)[1]
    except Exception:  # a model id litellm cannot route: litellm.acompletion reports that itself
        return False
    if provider not in MARKED_PROVIDERS or "claude" not in model.lower():
        return False
    return forced or bool(supports_anthropic_cache_control(model, provider))


def cache_write_tokens(raw_usage: Any) -> int | None:
    """The prompt tokens written to the cache as litellm's usage reports them (Anthropic's and Bedrock's).

    litellm keeps them in ``prompt_tokens_details.cache_write_tokens`` (its canonical field, mirrored as
    ``cache_creation_tokens``); a usage built from a provider's own dict may carry only the top-level
    ``cache_creation_input_tokens``.
    """
    details = _get(raw_usage, "prompt_tokens_details")
    for value in (
        _get(details, "cache_write_tokens"),
        _get(details, "cache_creation_tokens"),
        _get(raw_usage, "cache_creation_input_tokens"),
    ):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
