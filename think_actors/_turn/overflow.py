"""Context-window overflow: one compaction of the history, and the proactive guard before a step.

The reactive side (classify a failed request, discard the attempt, compact, run again) lives in the driver,
which owns the attempts; both sides compact through ``compact`` here (reference §2.7).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from ..models import model_info
from .assembly import assemble_history
from .convert import ensure_continue_checkpoint
from .engine import Engine
from .run import TurnRun

log = logging.getLogger("think_actors")


async def compact(engine: Engine, reason: Literal["reactive", "proactive"], request_id: str | None) -> Any:
    """Compact the agent's history once; None when it could not be shortened (a failing compaction counts)."""
    session = engine.session
    if session is None:
        return None
    try:
        return await session.compact(engine.messages, reason=reason, request_id=request_id)
    except Exception:
        log.exception("%s compaction failed; the history stays as it is", reason)
        return None


async def _input_limit(run: TurnRun) -> int | None:
    proactive = run.context_overflow.proactive if run.context_overflow is not None else None
    if proactive is None:
        return None
    if proactive.max_input_tokens is not None:
        return proactive.max_input_tokens
    if run.context_window is None:
        client, model_id = run.engine.model_client(run.model)
        info = await model_info(client, model_id)
        run.context_window = (info.max_input_tokens if info is not None else None) or 0
    return run.context_window or None


async def proactive_messages(run: TurnRun) -> None:
    """Before a step: compact when the previous step's input reached the headroom, then rebuild the messages.

    The rebuilt list is the compacted history followed by this turn's own step messages, so the step goes on
    where it was. An attempt counts even when it could not shorten anything (the reactive layer is the backstop).
    """
    proactive = run.context_overflow.proactive if run.context_overflow is not None else None
    if proactive is None or run.compactions >= max(1, proactive.max_compactions) or not run.steps:
        return
    limit = await _input_limit(run)
    if not limit or limit <= 0:
        return
    usage = run.steps[-1].usage
    used = usage.input_tokens if usage.input_tokens is not None else usage.total_tokens
    if used is None or used < limit * proactive.headroom:
        return
    run.compactions += 1
    engine = run.engine
    compacted = await compact(engine, "proactive", run.request_id)
    engine.publish("chat:context:compacted", {"reason": "proactive", "shortened": compacted is not None})
    if compacted is None:
        return
    _, head = await assemble_history(engine, run.request_id)
    head = ensure_continue_checkpoint(head)
    run.messages = [*head, *run.messages[run.baseline :]]
    run.baseline = len(head)
