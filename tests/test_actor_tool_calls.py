"""How an actor tool of an agent outside any actor reaches its actor: through the call the runtime hands to delegation.

delegation sits below the runtime, so the runtime, when it loads, gives it its Ray call (``use_actor_calls``);
before that the tool fails with what to do. The real Ray path is tested in ``tests/ray/test_remote_tools.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import drain

import think_actors as ta
from think_actors import delegation
from think_actors.testing import ScriptedModel, text, tool_call


class Counter:
    def add(self, n: int) -> int:
        """Add ``n`` to the count."""
        return n


def agent_with_counter_tool() -> ta.Think:
    model = ScriptedModel([tool_call("add", {"n": 2}, id="call-1"), text("done")])
    tool = ta.actor_tool("counter", "add", actor_class=Counter, namespace="ns")
    return ta.Think("a1", model=model, tools=[tool], store=ta.MemoryStore())


async def test_without_the_runtime_an_actor_tool_says_to_start_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delegation, "_actor_calls", None)

    chunks = await drain(agent_with_counter_tool().chat("count"))

    [failed] = [c for c in chunks if c.type == "tool-output-error"]
    assert failed.tool_call_id == "call-1"
    assert failed.error_text == (
        "tool 'add' calls a Ray actor from an agent outside any actor: start the runtime first "
        "(ta.init(); with `think-actors chat`, pass --ray)"
    )


async def test_an_actor_tool_uses_the_call_the_runtime_handed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    async def call(target: Any, method: str, kwargs: dict[str, Any], namespace: str | None) -> Any:
        calls.append((target, method, kwargs, namespace))
        return 42

    monkeypatch.setattr(delegation, "_actor_calls", None)
    delegation.use_actor_calls(call)

    chunks = await drain(agent_with_counter_tool().chat("count"))

    assert calls == [("counter", "add", {"n": 2}, "ns")]
    assert [(c.tool_call_id, c.output) for c in chunks if c.type == "tool-output-available"] == [("call-1", 42)]


def test_loading_the_runtime_hands_delegation_its_ray_call() -> None:
    from think_actors import runtime

    assert delegation._actor_calls is runtime.call_actor_method
