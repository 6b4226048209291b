"""Sessions inside turns (reference §5, the context-block and session cases of hooks.test.ts and
think-session.test.ts): context blocks in the system prompt, frozen until refreshed, the set_context tool in a
turn, runtime add/remove, compact_after between turns, and restarts. Session units are in test_session.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import think_actors as ta
from think_actors.compaction import CompactionResult
from think_actors.testing import ScriptedModel, text, tool_call


def system_of(request: ta.ModelRequest) -> str:
    assert request.messages[0]["role"] == "system"
    return str(request.messages[0]["content"])


class Blocks(ta.Think):
    instructions = "You are a coding assistant."

    async def configure_session(self, session: ta.Session) -> ta.Session:
        return session.with_context(
            "user", content="Prefers short answers.", description="about the user"
        ).with_context("notes", description="what to remember", max_tokens=50)


async def test_context_blocks_are_rendered_into_the_turns_system_prompt() -> None:
    model = ScriptedModel([text("ok")])
    agent = Blocks(model=model, store=ta.MemoryStore())
    await agent.save_messages("hi")

    system = system_of(model.requests[0])
    assert system.startswith("You are a coding assistant.")
    assert "Prefers short answers." in system
    assert "about the user" in system
    assert system.index("Prefers short answers.") < system.index("what to remember")


async def test_the_set_context_tool_writes_a_block_and_the_prompt_changes_only_after_a_refresh() -> None:
    model = ScriptedModel(
        [
            tool_call("set_context", {"label": "notes", "content": "The user's project is in Rust."}),
            text("noted"),
            text("next turn"),
            text("after refresh"),
        ]
    )
    agent = Blocks(model=model, store=ta.MemoryStore())
    await agent.save_messages("remember: my project is in Rust")
    offered = [t["function"]["name"] for t in model.requests[0].tools]
    assert "set_context" in offered
    [tool_message] = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert tool_message["content"].startswith("Wrote ") and "notes" in tool_message["content"]

    await agent.save_messages("what do you know?")
    assert "The user's project is in Rust." not in system_of(model.requests[2])  # frozen: prefix cache intact
    assert agent.session is not None
    await agent.session.refresh_system_prompt()
    await agent.save_messages("and now?")
    assert "The user's project is in Rust." in system_of(model.requests[3])
    assert await agent.session.get_context("notes") == "The user's project is in Rust."


async def test_an_over_budget_write_is_a_tool_error_and_the_turn_goes_on() -> None:
    model = ScriptedModel([tool_call("set_context", {"label": "notes", "content": "word " * 500}), text("sorry")])
    agent = Blocks(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("remember all this")

    assert result.status == "completed"
    [part] = [p for p in result.message.parts if isinstance(p, ta.ToolPart)]  # type: ignore[union-attr]
    assert part.state == "output-error"
    assert await agent.session.get_context("notes") in (None, "")  # type: ignore[union-attr]


async def test_add_and_remove_context_at_run_time() -> None:
    model = ScriptedModel([text("a"), text("b"), text("c"), text("d")])
    agent = Blocks(model=model, store=ta.MemoryStore())
    await agent.save_messages("one")
    session = agent.session
    assert session is not None
    await session.add_context("task", content="Fix the login bug.")
    await agent.save_messages("two")
    assert "Fix the login bug." not in system_of(model.requests[1])  # registered, not yet in the frozen prompt
    await session.refresh_system_prompt()
    await agent.save_messages("three")
    assert "Fix the login bug." in system_of(model.requests[2])
    assert "Prefers short answers." in system_of(model.requests[2])  # coexists with configure_session blocks

    assert await session.remove_context("task") is True
    assert await session.remove_context("never-there") is False
    await session.refresh_system_prompt()
    await agent.save_messages("four")
    assert "Fix the login bug." not in system_of(model.requests[3])


async def test_the_frozen_prompt_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    first_model = ScriptedModel([text("a")])
    first = Blocks("r", model=first_model, store=ta.SQLiteStore(path))
    await first.save_messages("hi")
    await first.close()

    second_model = ScriptedModel([text("b")])
    second = Blocks("r", model=second_model, store=ta.SQLiteStore(path))
    await second.save_messages("again")
    assert system_of(second_model.requests[0]) == system_of(first_model.requests[0])
    assert [m.text for m in second.get_messages()] == ["hi", "a", "again", "b"]


class AutoCompacting(ta.Think):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.events: list[ta.Event] = []
        self.observe("agents:chat", self.events.append)

    async def configure_session(self, session: ta.Session) -> ta.Session:
        async def compact(history: list[ta.UIMessage], ctx: Any) -> CompactionResult | None:
            assert ctx.reason == "threshold"
            return CompactionResult("the story so far", history[0].id, history[-3].id)

        return session.on_compaction(compact).compact_after(60)


async def test_compact_after_compacts_between_turns_past_the_threshold() -> None:
    model = ScriptedModel([text("short"), text("a much longer answer " * 10), text("fine")])
    agent = AutoCompacting(model=model, store=ta.MemoryStore())
    await agent.save_messages("hi")
    assert [e for e in agent.events if e.type == "chat:context:compacted"] == []  # under the threshold

    second = await agent.save_messages("tell me more")
    compacted = [e.payload for e in agent.events if e.type == "chat:context:compacted"]
    assert compacted == [{"reason": "threshold", "shortened": True, "requestId": second.request_id}]

    await agent.save_messages("thanks")
    contents = [str(m.get("content")) for m in model.requests[2].messages]
    assert any("the story so far" in c for c in contents)
    assert "hi" not in contents  # summarised away from the model's view...
    assert [m.text for m in agent.get_messages()][:2] == ["hi", "short"]  # ...never from the history


async def test_clear_drops_the_overlays_with_the_history() -> None:
    model = ScriptedModel([text("short"), text("a much longer answer " * 10), text("fresh")])
    agent = AutoCompacting(model=model, store=ta.MemoryStore())
    await agent.save_messages("hi")
    await agent.save_messages("tell me more")
    await agent.clear()
    await agent.save_messages("new start")
    assert [str(m.get("content")) for m in model.requests[2].messages[1:]] == ["new start"]
