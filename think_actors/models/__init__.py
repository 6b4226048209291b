"""The ModelClient protocol: one streamed model request in, normalized events out.

Events are small slotted dataclasses of plain data (they pickle cheaply, so a model-client actor can send
them in batches). A client raises a ``ModelError`` subclass for provider failures, before or during the stream.
Only the ``models/litellm`` package imports litellm. The types live in ``models/events.py``.

String model ids are served by ``AutoModelClient`` (``models/auto.py``): providers that speak OpenAI's
chat-completions wire stream through ``OpenAIWireClient`` (``models/openai_wire.py``, the fast path), every other
provider through ``LiteLLMClient``; ``THINK_FAST_MODEL_PATH=0`` sends everything through litellm.

Besides ``stream``, a client may offer two optional capabilities, reached through the module-level ``model_info``
and ``count_tokens`` (which answer None for a client without them):

- ``async def model_info(self, model: str) -> ModelInfo | None``: the model's context window and prices.
- ``async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None``: the prompt's size.
"""

from __future__ import annotations

from typing import Any

from .events import (
    FileEvent,
    FinishEvent,
    ModelClient,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    count_tokens,
    model_info,
)

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
    "resolve_model",
    "set_model_resolver",
]


_default_client: ModelClient | None = None


def _default_resolver(model_id: str) -> ModelClient:
    # One client for the process, so the fast path's connections are reused from request to request.
    global _default_client
    if _default_client is None:
        from .auto import AutoModelClient  # imported lazily: litellm costs ~3 s and ~200 MiB

        _default_client = AutoModelClient()
    return _default_client


_resolver: Any = _default_resolver


def set_model_resolver(resolver: Any) -> None:
    """Set how string model ids become clients (the Ray runtime serves them from model-client actors)."""
    global _resolver
    _resolver = resolver or _default_resolver


def resolve_model(model: str | ModelClient) -> tuple[ModelClient, str]:
    """The client serving ``model`` and the model id to put in the request."""
    if isinstance(model, str):
        return _resolver(model), model
    return model, getattr(model, "model_id", type(model).__name__)
