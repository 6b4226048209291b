"""Ray's ``worker_process_setup_hook`` for think_actors' workers (``_warm.SETUP_HOOK`` names it).

Importing this module imports the runtime, and with it the package's actor side; Ray runs ``setup_worker`` in each
worker process before its first task, so a worker started ahead by a warm pool (``_warm.WarmPool``) is ready for an
agent actor. Nothing in the package imports this module.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401  (asyncio's default executor: an async actor's first stream uses it)
import logging
import os

from . import _warm, runtime
from .chunks import FinishChunk, FinishStepChunk, StartChunk, StartStepChunk, TextEndChunk, TextStartChunk
from .messages import StepStartPart, TextPart, UIMessage
from .store import STORE_ENV

__all__ = ["setup_worker"]

# What every text turn validates or serializes. Their validators are built at first use (``defer_build``, so a
# process pays only for the types it meets): built here, off the wake's path, an agent's first turn on a warm
# worker does not pay for them (in process, 2026-12-01: a first turn's CPU 12.0 -> 9.4 ms; later turns 2.4 ms).
_EVERY_TURN = (
    UIMessage,
    TextPart,
    StepStartPart,
    StartChunk,
    StartStepChunk,
    TextStartChunk,
    TextEndChunk,
    FinishStepChunk,
    FinishChunk,
)


def setup_worker() -> None:
    """Load and build what an agent's start and first turn need (the import of this module has loaded the runtime),
    then tell the node's warm pool that this process has booted."""
    assert runtime.AgentHost is not None
    for model in _EVERY_TURN:
        model.model_rebuild()
    if os.environ.get(STORE_ENV, "").split(":", 1)[0].lower() in ("postgresql", "postgres"):
        # The cluster's store (ta.init(store=...)): its client and asyncpg, which the package loads only on use.
        from .store import postgres  # noqa: F401
    _warm.prepare_worker()
    try:
        _warm.mark_ready()
        _warm.watch_tasks()
    except (OSError, AttributeError):  # a hook that raises kills the worker: a pool that cannot count it is no reason
        logging.getLogger(__name__).warning("could not mark this worker as warm", exc_info=True)
