"""Mistakes a new user makes, and the errors that tell them what to do instead (the Ray stream's twins are in
``tests/ray/test_same_api_both_modes.py``)."""

from __future__ import annotations

from typing import Any

import pytest

import think_actors as ta
from think_actors import delegation
from think_actors.testing import ScriptedModel, text, tool_call


def test_a_tool_parameter_without_a_type_is_refused_by_name() -> None:
    with pytest.raises(ta.ConfigurationError) as raised:

        @ta.tool
        async def search(query, limit: int = 5) -> list[str]:  # type: ignore[no-untyped-def]
            """Search the corpus."""
            return []

    assert str(raised.value) == (
        "tool 'search': parameter 'query' has no type annotation; annotate it (e.g. `query: str`) so the model is "
        "told what to pass and its input is checked, or use `query: Any` to accept anything"
    )


def test_a_method_tool_names_its_own_name_and_skips_self_and_private_parameters() -> None:
    with pytest.raises(ta.ConfigurationError, match=r"^tool 'lookup': parameter 'key' has no type annotation"):

        class Agent(ta.Think):
            @ta.tool(name="lookup")
            async def find(self, key, _trace: str = "") -> str:  # type: ignore[no-untyped-def]
                """Look a key up."""
                return ""

    @ta.tool
    async def annotated(self: Any, key: Any, *args: Any, _hidden: int = 0, **kwargs: Any) -> str:
        """``Any`` is a type: it is allowed."""
        return ""

    assert annotated.input_schema["required"] == ["key"]


def test_agent_tool_given_an_instance_says_to_pass_the_class() -> None:
    class Researcher(ta.Think):
        pass

    with pytest.raises(ta.ConfigurationError) as raised:
        ta.agent_tool(Researcher(store=ta.MemoryStore()), description="Research one question")

    assert str(raised.value) == (
        "agent_tool takes an agent class, not an instance: pass agent_tool(Researcher, description=...) rather "
        "than agent_tool(Researcher(...), ...); each call of the tool starts a child agent of that class"
    )


SYNC_ITERATION = (
    "a chat stream is asynchronous: read it with `async for chunk in stream`, or `await stream.collect()` for the "
    "list of chunks"
)
AWAITED = (
    "a chat stream is not awaitable: read it with `async for chunk in stream`, or `await stream.collect()` for the "
    "list of chunks (`await agent.save_messages(...)` runs a turn and returns its TurnResult)"
)


async def test_reading_a_chat_stream_synchronously_or_awaiting_it_says_how_to_read_it() -> None:
    model = ScriptedModel([text("hello")])
    agent = ta.Think(model=model, store=ta.MemoryStore())
    stream = agent.chat("hi")

    with pytest.raises(TypeError) as iterated:
        for _ in stream:
            pass
    with pytest.raises(TypeError) as listed:
        list(stream)
    with pytest.raises(TypeError) as awaited:
        await stream

    assert (str(iterated.value), str(listed.value), str(awaited.value)) == (SYNC_ITERATION, SYNC_ITERATION, AWAITED)
    assert stream.status == "pending"  # none of them started the turn
    assert [c.type for c in await stream.collect()][-1] == "finish"
    model.assert_complete()


async def test_actor_tool_outside_the_runtime_says_to_start_it() -> None:
    """Without ``ta.init()`` in this process an actor tool cannot reach its actor, and says so."""

    class Actor:
        def add(self, a: int, b: int) -> int:
            return a + b

    saved = delegation._actor_calls
    delegation._actor_calls = None  # as in a process that never loaded the runtime
    try:
        add = ta.actor_tool("adder", "add", actor_class=Actor)
        model = ScriptedModel()
        agent = ta.Think(model=model, tools=[add], store=ta.MemoryStore())
        model.extend([tool_call("add", {"a": 1, "b": 2}), text("done")])
        chunks = await agent.chat("add").collect()
    finally:
        delegation._actor_calls = saved
    [failed] = [c for c in chunks if c.type == "tool-output-error"]
    assert failed.error_text.endswith(
        "tool 'add' calls a Ray actor from an agent outside any actor: start the runtime first "
        "(ta.init(); with `think-actors chat`, pass --ray)"
    )


def test_two_tools_under_one_name_are_refused_naming_it() -> None:
    class Child(ta.Think):
        pass

    class Twice(ta.Think):
        tools = [ta.agent_tool(Child, description="one"), ta.agent_tool(Child, description="two")]

    with pytest.raises(ta.ConfigurationError, match=r"two tools of Twice are named 'child'.*name="):
        Twice("t", model=ScriptedModel([]), store=ta.MemoryStore())
    named = [ta.agent_tool(Child, description="one"), ta.agent_tool(Child, name="child_2", description="two")]
    Twice("t", model=ScriptedModel([]), store=ta.MemoryStore(), tools=named)  # each its own name: fine
