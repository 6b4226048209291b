"""Ray's ``worker_process_setup_hook`` for think_actors' workers (``_warm.SETUP_HOOK`` names it).

Importing this module imports the runtime, and with it the package's actor side; Ray runs ``setup_worker`` in each
worker process before its first task, so a worker started ahead (``_warm.top_up``) is ready for an agent actor.
Nothing in the package imports this module.
"""

from __future__ import annotations

from . import runtime
from .chunks import FinishChunk, FinishStepChunk, StartChunk, StartStepChunk, TextEndChunk, TextStartChunk
from .messages import StepStartPart, TextPart, UIMessage

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
    """Build the validators every turn needs (the import of this module has loaded the runtime)."""
    assert runtime.AgentHost is not None
    for model in _EVERY_TURN:
        model.model_rebuild()
