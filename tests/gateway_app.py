"""An ``--app`` module for the gateway's CLI test: one agent class with a model that needs no script."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage


class EchoModel:
    model_id = "echo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        content = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        yield TextDelta(f"echo: {content}")
        yield FinishEvent("stop", Usage())


class Echo(ta.Think):
    model = EchoModel()
