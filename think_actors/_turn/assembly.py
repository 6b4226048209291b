"""What a turn sends: the repaired transcript as model messages (compaction overlay applied) and the system prompt."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from ..messages import UIMessage
from .convert import repair_transcript, to_model_messages, truncate_older
from .engine import Engine


async def assemble_history(
    engine: Engine, request_id: str | None, branch_from: str | None = None, spare: Container[str] = ()
) -> tuple[list[UIMessage], list[dict[str, Any]]]:
    """The repaired transcript and the model messages made of it (compaction overlay applied, older truncated).

    ``branch_from`` (a regeneration) cuts the transcript after that message: the new reply answers it. The calls
    in ``spare`` are left unrepaired (recovery is about to run them).
    """
    history = engine.messages
    if branch_from is not None:
        ids = [m.id for m in history]
        if branch_from in ids:
            history = history[: ids.index(branch_from) + 1]
    repaired, changed, repaired_ids = repair_transcript(history, engine.agent.repair_interrupted_tool_part, spare)
    for message in changed:
        await engine.replace(message)
    if repaired_ids:
        engine.publish(
            "chat:transcript:repaired",
            {"requestId": request_id, "removedToolCalls": len(repaired_ids), "toolCallIds": repaired_ids},
        )
    view = engine.session.model_view(repaired) if engine.session is not None else repaired
    return repaired, to_model_messages(truncate_older(view))


async def system_prompt(engine: Engine, base: str) -> str:
    """The turn's system prompt: ``base`` with the session's context blocks (frozen) when it has any."""
    session = engine.session
    if session is None or not session.has_context_blocks:
        return base
    frozen: str = await session.system_prompt(base)
    return frozen
