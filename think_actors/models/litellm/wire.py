"""litellm's side of the OpenAI-wire fast path: everything around the stream, once per request or per error.

``OpenAIWireClient`` (``models/openai_wire.py``) reads the OpenAI wire's stream itself, for speed; litellm stays in
charge of everything around it: which provider a model id names, that provider's endpoint and key, the body
litellm would send (its parameter mapping and validation per provider and model), the class and text of an error
answer, the finish reason's normal form and the price. None of it runs per chunk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import litellm
from litellm.litellm_core_utils.core_helpers import map_finish_reason
from litellm.litellm_core_utils.exception_mapping_utils import exception_type
from litellm.llms.openai.common_utils import OpenAIError, get_openai_credentials
from litellm.secret_managers.main import get_secret_str
from litellm.types.utils import LlmProviders, all_litellm_params
from litellm.utils import (
    ProviderConfigManager,
    get_optional_params,
    validate_and_fix_openai_messages,
    validate_and_fix_openai_tools,
    validate_chat_completion_tool_choice,
    validate_openai_optional_params,
)

from think_actors.errors import ModelConnectionError, ModelError, ModelTimeoutError, ProviderError
from think_actors.models.events import Usage
from think_actors.models.litellm.error_map import _parse_body, _to_model_error
from think_actors.models.litellm.prompt_caching import cache_write_tokens
from think_actors.models.litellm.stream import _cost, _int, _log, _str
from think_actors.models.provider_data import get as _get
from think_actors.models.provider_data import output_tokens, reported_cost_usd
from think_actors.models.retry_policy import retry_after_s

__all__ = [
    "REPEATED_CHUNK_LIMIT",
    "WireRequest",
    "wire_failure",
    "wire_finish_reason",
    "wire_repetition_error",
    "wire_request",
    "wire_status_error",
    "wire_usage_and_cost",
]

_LITELLM_OPTIONS = frozenset(all_litellm_params)

# What the fast path handles of litellm's own options; a request with any other litellm option (caching, fallbacks,
# mock responses, metadata for callbacks, an Azure api_version, ...) goes through litellm.acompletion.
_WIRE_OPTIONS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "api_base",
        "base_url",
        "api_key",
        "timeout",
        "max_retries",
        "num_retries",
        "extra_headers",
        "custom_llm_provider",
        "drop_params",
    }
)
# OpenAI parameters that litellm does more with than map them into the body (the Responses API bridge for
# reasoning and web search, emulated function calling, audio output, several choices, query parameters).
_LITELLM_ONLY_PARAMS = frozenset(
    {
        "reasoning_effort",
        "web_search_options",
        "thinking",
        "verbosity",
        "functions",
        "function_call",
        "audio",
        "modalities",
        "prediction",
        "n",
        "extra_query",
    }
)
# Providers litellm sends through the openai SDK: their error answers get the SDK's wording and the SDK's retries.
_SDK_PROVIDERS = frozenset({"openai", "cerebras"})


@dataclass(frozen=True, slots=True)
class WireRequest:
    """A streamed chat-completions request exactly as litellm would send it, for ``OpenAIWireClient`` to send.

    ``model`` is the request's model id as given (it prices the stream and names it in errors, as in
    ``LiteLLMClient``), ``api_model`` the name the provider is sent; ``custom_llm_provider`` is the request's own
    option of that name, which litellm's price lookup takes.
    """

    provider: str
    url: str
    headers: dict[str, str]
    body: bytes
    model: str
    api_model: str
    custom_llm_provider: str | None
    timeout_s: float
    max_retries: int | None


def wire_request(kwargs: Mapping[str, Any], providers: frozenset[str]) -> WireRequest | None:
    """The request ``litellm.acompletion(**kwargs)`` would stream, when its provider is one of ``providers``.

    None when the request must go through litellm: another provider, a litellm option or parameter the fast path
    does not handle, litellm callbacks or TLS settings configured (only its route applies them), a model litellm
    serves through the Responses API, no key, or anything litellm raises while preparing it (it raises it again
    there).
    """
    if any(key not in _WIRE_OPTIONS and (key in _LITELLM_OPTIONS or key in _LITELLM_ONLY_PARAMS) for key in kwargs):
        return None
    if _litellm_settings_apply() or kwargs.get("stream") is not True:
        return None
    try:
        return _wire_request(kwargs, providers)
    except Exception:
        _log.debug("request for %r left to litellm", kwargs.get("model"), exc_info=True)
        return None


def _wire_request(kwargs: Mapping[str, Any], providers: frozenset[str]) -> WireRequest | None:
    model: str = kwargs["model"]
    api_base = _str(kwargs.get("api_base")) or _str(kwargs.get("base_url"))
    api_key = _str(kwargs.get("api_key"))
    custom_llm_provider = _str(kwargs.get("custom_llm_provider"))
    api_model, provider, dynamic_key, dynamic_base = litellm.get_llm_provider(
        model, custom_llm_provider=custom_llm_provider, api_base=api_base, api_key=api_key
    )
    if provider not in providers or _served_as_responses(api_model, provider):
        return None
    api_base, api_key = _endpoint(provider, api_base or dynamic_base, api_key or dynamic_key)
    if api_base is None or (api_key is None and provider != "hosted_vllm"):
        return None

    config: Any = ProviderConfigManager.get_provider_chat_config(model=api_model, provider=LlmProviders(provider))
    # The checks and clean-ups litellm.completion starts with (roles filled in, None fields dropped, ...), on
    # copies: the caller's messages stay as they were.
    messages: Any = validate_and_fix_openai_messages(messages=[dict(message) for message in kwargs["messages"]])
    messages = list(
        config.translate_developer_role_to_system_role(
            messages=messages, model=api_model, custom_llm_provider=provider, api_base=api_base, model_info=None
        )
    )
    params = {key: value for key, value in kwargs.items() if key not in _WIRE_OPTIONS or key == "drop_params"}
    if "tools" in params:
        params["tools"] = validate_and_fix_openai_tools(tools=params["tools"])
    if "tool_choice" in params:
        params["tool_choice"] = validate_chat_completion_tool_choice(tool_choice=params["tool_choice"], model=model)
    if "stop" in params:
        params["stop"] = validate_openai_optional_params(stop=params["stop"])
    optional: Any = get_optional_params(
        model=api_model, custom_llm_provider=provider, messages=messages, stream=True, **params
    )
    if optional.get("fake_stream"):
        return None  # litellm asks for a whole answer and replays it as a stream (e.g. Groq with response_format)
    if isinstance(config, litellm.FireworksAIConfig):
        optional = config.map_extra_body_params(optional_params=optional, model=api_model)
    extra_headers = kwargs.get("extra_headers")
    headers: dict[str, str] = dict(extra_headers) if extra_headers else dict(litellm.headers or {})
    if provider == "openrouter":
        # What litellm's OpenRouter route sends to identify the app (OpenRouter's attribution headers).
        headers = {
            "HTTP-Referer": get_secret_str("OR_SITE_URL") or "https://litellm.ai",
            "X-Title": get_secret_str("OR_APP_NAME") or "liteLLM",
            **headers,
        }
    headers = dict(
        config.validate_environment(
            headers=headers,
            model=api_model,
            messages=messages,
            optional_params=optional,
            litellm_params={},
            api_key=api_key,
            api_base=api_base,
        )
    )
    if provider in _SDK_PROVIDERS:
        headers.update(_sdk_identity_headers())
    url = config.get_complete_url(
        api_base=api_base, api_key=api_key, model=api_model, optional_params=optional, litellm_params={}, stream=True
    )
    data = dict(config.transform_request(api_model, messages, optional, {}, headers))
    # Both the openai SDK and litellm's HTTP handler send extra_body's members as top-level fields.
    extra_body = data.pop("extra_body", None)
    if isinstance(extra_body, Mapping):
        data.update(extra_body)
    data["stream"] = True
    timeout = kwargs.get("timeout")
    max_retries = kwargs.get("max_retries")
    return WireRequest(
        provider=provider,
        url=str(url),
        headers={str(name): str(value) for name, value in headers.items()},
        body=json.dumps(data).encode(),
        model=model,
        api_model=api_model,
        custom_llm_provider=custom_llm_provider,
        timeout_s=float(timeout)
        if isinstance(timeout, int | float)
        else float(vars(litellm).get("request_timeout") or 600.0),
        max_retries=max_retries if isinstance(max_retries, int) else None,
    )


def _endpoint(provider: str, api_base: str | None, api_key: str | None) -> tuple[str | None, str | None]:
    """The endpoint and key litellm's route for ``provider`` falls back to when neither was given or resolved."""
    if provider == "openai":
        credentials = get_openai_credentials(api_base=api_base, api_key=api_key)
        return credentials.api_base, credentials.api_key
    if provider == "openrouter":
        api_base = (
            api_base or litellm.api_base or get_secret_str("OPENROUTER_API_BASE") or "https://openrouter.ai/api/v1"
        )
        api_key = (
            api_key
            or litellm.api_key
            or litellm.openrouter_key
            or get_secret_str("OPENROUTER_API_KEY")
            or get_secret_str("OR_API_KEY")
        )
        return api_base, api_key
    if provider == "mistral":
        api_base = api_base or litellm.api_base or get_secret_str("MISTRAL_API_BASE") or "https://api.mistral.ai/v1"
        return api_base, api_key or litellm.api_key or get_secret_str("MISTRAL_API_KEY")
    return api_base or litellm.api_base, api_key or litellm.api_key


def _sdk_identity_headers() -> dict[str, str]:
    """The organization and project headers the openai SDK adds from litellm's settings and its environment."""
    headers: dict[str, str] = {}
    organization = get_openai_credentials().organization or os.environ.get("OPENAI_ORG_ID")
    if organization:
        headers["OpenAI-Organization"] = organization
    project = os.environ.get("OPENAI_PROJECT_ID")
    if project:
        headers["OpenAI-Project"] = project
    return headers


def _served_as_responses(api_model: str, provider: str) -> bool:
    # litellm bridges models whose table entry says mode "responses" to the Responses API, another wire.
    for key in (f"{provider}/{api_model}", api_model):
        entry = litellm.model_cost.get(key)
        if isinstance(entry, Mapping):
            return entry.get("mode") == "responses"
    return False


def _litellm_settings_apply() -> bool:
    """Whether litellm's global settings ask for something only its own route does (callbacks, TLS settings).

    litellm registers a ``"cache"`` callback whenever a ``Cache`` object is built, also one for its own use that
    reads nothing: its Vertex AI context-caching module builds one when it is imported, at the first Gemini or
    Vertex AI request. That callback counts only with ``litellm.cache`` set, else one Gemini request would take
    every later request of the process off the fast path.
    """
    if litellm.ssl_verify is not True or vars(litellm).get("cache") is not None:
        return True  # TLS settings, or litellm's response cache: only its route applies them
    return any(
        callback != "cache"
        for name in (
            "callbacks",
            "input_callback",
            "success_callback",
            "failure_callback",
            "_async_success_callback",
            "_async_failure_callback",
        )
        for callback in getattr(litellm, name, None) or ()
    )


def wire_status_error(request: WireRequest, status: int, headers: Mapping[str, str], body: bytes) -> ModelError:
    """What an HTTP error answer to ``request`` becomes: the error ``LiteLLMClient`` raises for the same answer.

    litellm classifies it, from the same exception its own route would have made of the answer (the openai SDK's
    for SDK-routed providers, the provider config's error class otherwise), so the class, message and
    retryability match.
    """
    text = body.decode("utf-8", "replace")
    original: Exception
    if request.provider in _SDK_PROVIDERS:
        message, data = _sdk_status_message(status, text)
        original = OpenAIError(status_code=status, message=message, headers=dict(headers), body=data)
    else:
        config: Any = ProviderConfigManager.get_provider_chat_config(
            model=request.api_model, provider=LlmProviders(request.provider)
        )
        original = config.get_error_class(error_message=text, status_code=status, headers=dict(headers))
    try:
        classify: Any = exception_type  # untyped in litellm
        classify(
            model=request.api_model,
            custom_llm_provider=request.provider,
            original_exception=original,
            completion_kwargs={},
            extra_kwargs={},
        )
    except Exception as exc:
        error = _to_model_error(exc, request.provider)
    else:  # exception_type always raises; a plain error in case a later litellm does not
        error = ProviderError(f"Error code: {status}", provider=request.provider, status_code=status)
    if isinstance(error, ModelTimeoutError) and error.status_code is None:
        error.status_code = status  # a 408 or 504 answer: a status did come back
    # The whole body as sent (litellm's exception keeps only part of it), as LiteLLMClient reports it.
    error.response_body = _parse_body(text) if text else None
    error.retry_after_s = retry_after_s(headers)
    return error


def _sdk_status_message(status: int, text: str) -> tuple[str, Any]:
    """The message and body of the exception the openai SDK raises for an error answer (its own rules)."""
    message = f"Error code: {status}"
    stripped = text.strip()
    try:
        body: Any = json.loads(stripped)
    except ValueError:
        return message, stripped
    error = body.get("error", body) if isinstance(body, Mapping) else None
    detail = error.get("message") if isinstance(error, Mapping) else None
    if isinstance(detail, str) and detail:
        message += f" - {detail}"
    return message, body.get("error", body) if isinstance(body, Mapping) else body


def wire_failure(request: WireRequest, kind: str) -> ModelError:
    """The error ``LiteLLMClient`` raises when the connection fails, times out or the stream is cut.

    ``kind``: ``timeout`` (no answer or no data within the timeout), ``refused`` (no connection), ``cut`` (the
    connection dropped mid-stream) or ``eof`` (the stream ended without a finish reason). The words are
    litellm's, so a classifier reading messages sees the same text from either client.
    """
    name = "OpenAI" if request.provider == "openai" else request.provider[:1].upper() + request.provider[1:]
    facts: dict[str, Any] = {"provider": request.provider, "retryable": True, "in_stream": False}
    if kind == "timeout":
        return ModelTimeoutError(
            "litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out.", **facts
        )
    if kind == "refused":
        return ModelConnectionError(
            f"litellm.InternalServerError: InternalServerError: {name}Exception - Connection error.", **facts
        )
    detail = "Connection error." if kind == "cut" else "Stream ended before a finish_reason was received"
    return ModelConnectionError(
        f"stream cut before it finished: litellm.APIConnectionError: APIConnectionError: {name}Exception - {detail}",
        **facts,
    )


def wire_repetition_error(request: WireRequest, content: str) -> ModelError:
    """litellm's loop guard: the same chunk, longer than two characters, many times in a row (see stack-notes)."""
    return ProviderError(
        f"litellm.InternalServerError: The model is repeating the same chunk = {content}.",
        provider=request.provider,
        status_code=500,
        retryable=True,
        in_stream=False,
    )


REPEATED_CHUNK_LIMIT: int = int(vars(litellm).get("REPEATED_STREAMING_CHUNK_LIMIT") or 100)


def wire_finish_reason(reason: str | None, saw_tool_calls: bool) -> str | None:
    """The finish reason as litellm reports it: OpenAI's names, and ``tool_calls`` for ``stop`` after tool calls."""
    if reason is None:
        return None
    mapped = str(map_finish_reason(reason))
    return "tool_calls" if mapped == "stop" and saw_tool_calls else mapped


def wire_usage_and_cost(request: WireRequest, raw: Any) -> tuple[Usage | None, float | None]:
    """The stream's usage as the provider reported it, and its price: the provider's own, else litellm's table's.

    Output tokens include reasoning tokens a provider counted apart (``provider_data.output_tokens``).
    """
    if not isinstance(raw, Mapping):
        return None, None
    try:
        usage_object: Any = litellm.Usage(**raw)
    except Exception:
        _log.debug("litellm could not read usage %r", raw, exc_info=True)
        usage_object = None
    completion_details = raw.get("completion_tokens_details")
    prompt = _int(raw.get("prompt_tokens"))
    completion = _int(raw.get("completion_tokens"))
    total = _int(raw.get("total_tokens"))
    reasoning = _int(_get(completion_details, "reasoning_tokens"))
    usage = Usage(
        input_tokens=prompt,
        output_tokens=output_tokens(prompt, completion, total, reasoning),
        total_tokens=total if total is not None else (prompt or 0) + (completion or 0),
        reasoning_tokens=reasoning,
        # litellm reads each provider's cached-token field (OpenAI's details, DeepSeek's prompt_cache_hit_tokens).
        cached_input_tokens=_int(_get(getattr(usage_object, "prompt_tokens_details", None), "cached_tokens")),
        cache_write_input_tokens=cache_write_tokens(usage_object),
    )
    reported = reported_cost_usd(raw)
    if reported is not None:
        return usage, reported
    return usage, _cost(request.model, usage_object, request.custom_llm_provider)
