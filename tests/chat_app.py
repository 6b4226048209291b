"""An ``--app`` module for the terminal chat's test: an agent whose model needs no script position (each run of
``think-actors chat`` is a new process), with a tool."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import think_actors as ta
from think_actors.models import ModelEvent, ModelRequest
from think_actors.testing import ScriptedModel, text, tool_call


class CalculatorModel:
    """``add A B`` calls the ``add`` tool, then reports its result; anything else is echoed with how many user
    messages the request held (the history the agent sent)."""

    model_id = "calculator"

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        messages = request.messages
        if messages[-1]["role"] == "tool":
            return ScriptedModel([text(f"The sum is {messages[-1]['content']}.", chunk_size=3)]).stream(request)
        said = str(messages[-1]["content"])
        numbers = re.fullmatch(r"add (\d+) (\d+)", said)
        if numbers:
            return ScriptedModel([tool_call("add", {"a": int(numbers[1]), "b": int(numbers[2])})]).stream(request)
        users = sum(m["role"] == "user" for m in messages)
        return ScriptedModel([text(f"echo: {said} ({users} user messages)", chunk_size=3)]).stream(request)


class Calculator(ta.Think):
    model = CalculatorModel()

    @ta.tool
    async def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b
