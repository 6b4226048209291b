"""Log context: records of think_actors loggers name the agent path and the request they were logged for."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

tool_log = logging.getLogger("think_actors.tests.tools")


class LoggingAgent(ta.Think):
    @ta.tool
    async def where(self) -> dict[str, Any]:
        """Log, and say what the log context is."""
        tool_log.warning("inside the tool")
        context = ta.log_context()
        return {"agent": context.agent, "request_id": context.request_id}

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        logging.getLogger("think_actors").warning("before the turn")
        return None

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        logging.getLogger("think_actors.tests").warning("after the turn")


def _records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str, str]]:
    return [
        (r.name, r.agent, r.request_id, r.getMessage()) for r in caplog.records if r.name.startswith("think_actors")
    ]


async def test_records_logged_inside_a_turn_carry_the_agent_path_and_request_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = ScriptedModel([tool_call("where", {}), text("done"), text("again")])
    agent = LoggingAgent("team-1", path="lead/team-1", model=model, store=ta.MemoryStore())
    with caplog.at_level(logging.WARNING):
        first = await agent.save_messages("where are you?")
        stream = agent.chat("and now?")
        await stream.collect()
        tool_log.warning("outside any turn")

    assert _records(caplog) == [
        ("think_actors", "lead/team-1", first.request_id, "before the turn"),
        ("think_actors.tests.tools", "lead/team-1", first.request_id, "inside the tool"),
        ("think_actors.tests", "lead/team-1", first.request_id, "after the turn"),
        ("think_actors", "lead/team-1", stream.request_id, "before the turn"),
        ("think_actors.tests", "lead/team-1", stream.request_id, "after the turn"),
        ("think_actors.tests.tools", "-", "-", "outside any turn"),
    ]
    (message,) = [m for m in agent.get_messages() if m.role == "assistant"][:1]
    (output,) = [p.output for p in message.parts if isinstance(p, ta.ToolPart)]
    assert output == {"agent": "lead/team-1", "request_id": first.request_id}
    assert ta.log_context() == ta.LogContext(agent=None, request_id=None)


async def test_a_child_agents_turn_inside_a_tool_names_the_child_then_the_parent_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Child(ta.Think):
        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
            tool_log.warning("child turn")
            return None

    class Parent(ta.Think):
        @ta.tool
        async def ask(self) -> str:
            """Ask the child."""
            child = await self.sub_agent(Child, "c", model=ScriptedModel([text("child says hi")]))
            await child.save_messages("hi")
            tool_log.warning("back in the parent's tool")
            return "asked"

    parent = Parent("p", model=ScriptedModel([tool_call("ask", {}), text("done")]), store=ta.MemoryStore())
    with caplog.at_level(logging.WARNING):
        result = await parent.save_messages("go")

    records = _records(caplog)
    assert [(agent, message) for _, agent, _, message in records] == [
        ("parent/p/child/c", "child turn"),
        ("parent/p", "back in the parent's tool"),
    ]
    assert records[0][2] != result.request_id and records[1][2] == result.request_id


def test_other_libraries_records_are_left_alone_unless_they_add_the_filter() -> None:
    other = logging.getLogger("some_other_library")
    plain = other.makeRecord(other.name, logging.INFO, __file__, 1, "hi", (), None)
    assert not hasattr(plain, "agent") and not hasattr(plain, "request_id")

    ours = logging.getLogger("think_actors.gateway").makeRecord(
        "think_actors.gateway", logging.INFO, "f", 1, "x", (), None
    )
    assert (ours.agent, ours.request_id) == ("-", "-")

    assert ta.LogContextFilter().filter(plain)
    assert (plain.agent, plain.request_id) == ("-", "-")


def test_log_format_shows_the_logger_agent_and_request() -> None:
    record = logging.makeLogRecord(
        {"name": "think_actors", "levelname": "INFO", "msg": "hello", "agent": "lead/team-1", "request_id": "abc123"}
    )
    line = logging.Formatter(ta.logs.LOG_FORMAT).format(record)
    assert line.endswith(" INFO [think_actors agent=lead/team-1 request=abc123] hello")
