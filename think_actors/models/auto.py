"""AutoModelClient: the client string model ids get; each request takes the fast path when its provider allows.

A request whose provider speaks OpenAI's chat-completions wire (``fast_path.FAST_PATH_PROVIDERS``) streams through
``OpenAIWireClient``; every other request, and every request when the fast path is off, through ``LiteLLMClient``.
Both emit the same events and raise the same errors, so the choice changes only the CPU a stream costs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from think_actors.models.events import ModelEvent, ModelInfo, ModelRequest
from think_actors.models.fast_path import fast_path_enabled
from think_actors.models.litellm import LiteLLMClient
from think_actors.models.openai_wire import OpenAIWireClient

__all__ = ["AutoModelClient"]


class AutoModelClient:
    """Streams each request through the OpenAI-wire fast path when it can, else through litellm.

    Args:
        fast_path: True or False to turn the fast path on or off; None (the default) follows
            ``$THINK_FAST_MODEL_PATH`` (on unless ``0``).
        api_base, api_key, **extra: Default options for both clients, as for ``LiteLLMClient``.
    """

    def __init__(
        self, *, fast_path: bool | None = None, api_base: str | None = None, api_key: str | None = None, **extra: Any
    ) -> None:
        self.fast_path = fast_path_enabled(fast_path)
        self._litellm = LiteLLMClient(api_base=api_base, api_key=api_key, **extra)
        self._wire = OpenAIWireClient(api_base=api_base, api_key=api_key, **extra) if self.fast_path else None

    def __repr__(self) -> str:
        return f"AutoModelClient(fast_path={self.fast_path})"

    def takes_fast_path(self, request: ModelRequest) -> bool:
        """Whether ``request`` would stream through the fast path."""
        return self._wire is not None and self._wire.prepare(request) is not None

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream one request through the path that serves it (see the module docstring)."""
        wire = self._wire.prepare(request) if self._wire is not None else None
        if self._wire is not None and wire is not None:
            events = self._wire.stream_prepared(wire)
        else:
            events = self._litellm.stream(request)
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    async def model_info(self, model: str) -> ModelInfo | None:
        """The model's limits and prices from litellm's table (the same whichever path streams it)."""
        return await self._litellm.model_info(model)

    async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
        """The prompt's size by litellm's tokenizer for ``model``."""
        return await self._litellm.count_tokens(model, messages)

    async def aclose(self) -> None:
        """Close the fast path's connection pools."""
        if self._wire is not None:
            await self._wire.aclose()
