"""Tool calls a turn runs before its first model request: calls a person approved (or a crash left unrun),
living in an earlier assistant message. They run through the normal hooks; their results settle that message."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from ..messages import ToolPart, UIMessage
from .engine import Engine
from .tool_calls import ParsedCall, run_calls

NO_LONGER_AVAILABLE = "The tool is no longer available."


def _latest_assistant(messages: list[UIMessage]) -> UIMessage | None:
    for message in reversed(messages):
        if message.role == "assistant":
            return message
        if message.role == "user":
            return None
    return None


def approved_calls(messages: list[UIMessage]) -> tuple[UIMessage | None, list[ToolPart]]:
    """The latest assistant message and its calls a person approved that have not run yet."""
    latest = _latest_assistant(messages)
    if latest is None:
        return None, []
    return latest, [p for p in latest.parts if isinstance(p, ToolPart) and p.state == "approval-responded"]


def settled(part: ToolPart, output: Any, error: str | None) -> ToolPart:
    if error is not None:
        return part.with_state("output-error", error_text=error)
    return part.with_state("output-available", output=output, preliminary=False)


async def settle_part(engine: Engine, message_id: str, tool_call_id: str, output: Any, error: str | None) -> None:
    """Settle one tool part of a stored message (the transcript and the store)."""
    stored = next((m for m in reversed(engine.messages) if m.id == message_id), None)
    if stored is None:
        return
    parts = tuple(
        settled(p, output, error) if isinstance(p, ToolPart) and p.tool_call_id == tool_call_id else p
        for p in stored.parts
    )
    changed = stored.model_copy(update={"parts": parts})
    await engine.replace(changed)
    engine.publish("message:updated", {"message": changed.to_wire()})  # a change to an earlier message


async def run_pending(engine: Engine, run: Any, message: UIMessage, parts: list[ToolPart]) -> AsyncGenerator[Any, None]:
    """Run ``parts`` (tool calls of ``message``) through the hooks; yield their chunks; settle each in the store."""
    calls = []
    for part in parts:
        tool = run.tools.get(part.name)
        call = ParsedCall(
            part.tool_call_id, part.name, "", input=part.input, tool=tool, approved=part.state == "approval-responded"
        )
        if tool is not None:
            call.validated = tool.validate_input(part.input if isinstance(part.input, dict) else {})
        calls.append(call)
    results: list[Any] = []
    async with aclosing(run_calls(run, [c for c in calls if c.tool is not None], results)) as running:
        async for chunk in running:
            yield chunk
    by_id = {r.tool_call_id: r for r in results}
    for part in parts:
        result = by_id.get(part.tool_call_id)
        error = NO_LONGER_AVAILABLE if result is None else result.error
        await settle_part(engine, message.id, part.tool_call_id, None if result is None else result.output, error)
