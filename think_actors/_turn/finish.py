"""The end of a turn: persist its reply and its record, then release; ``on_chat_response`` is left for after."""

from __future__ import annotations

import logging
import time

from .journal import TurnJournal
from .spec import TurnSpec

__all__ = ["finish"]

log = logging.getLogger("think_actors")


async def finish(spec: TurnSpec, journal: TurnJournal) -> None:
    """End a turn durably, inside its slot: its reply stored, its record removed.

    A turn stopped to be resumed keeps its record and goes to recovery, which finishes it (and its submission).
    A turn with ``on_finished`` (a submission's) keeps its record, marked finished with the outcome, until
    ``on_finished`` has run after the response hook (Think writes a submission's final status after it): a crash
    in between leaves a finished turn for the restart to settle (``Recovery.start``), never one to run again.
    """
    engine = journal.engine
    if engine.journal is journal:
        engine.journal = None
    if journal.reply is not None:
        if engine.queue.generation != spec.generation:
            journal.reply = None  # the conversation was cleared under the turn: it writes nothing
        elif engine.steered or journal.resume or spec.on_finished is not None:
            await journal.persist_reply()  # what follows depends on the reply being stored
    if engine.steered:
        # Steered in after this turn's last step: they run as the next turn instead of being lost.
        leftover, engine.steered = engine.steered, []
        try:
            await engine.agent.submit_messages(leftover)
        except Exception:
            log.exception("could not queue the messages steered into turn %s", spec.request_id)
    if journal.resume:
        spec.resumed = True
        engine.recovery.schedule(journal.record)
        return
    on_finished = spec.on_finished
    if on_finished is None:
        await journal.end()
        return
    record = journal.record
    record.status = "finished"
    record.data["outcome"] = {"status": spec.outcome.status, "error": spec.outcome.error}
    record.updated_at = time.time()
    await engine.store.put_turn(record)

    async def finalize() -> None:
        try:
            await on_finished(spec.outcome)
        except Exception:
            log.exception("recording the end of turn %s failed", spec.request_id)
        await journal.end()

    spec.finalize = finalize
