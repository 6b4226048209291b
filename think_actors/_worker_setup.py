"""Ray's ``worker_process_setup_hook`` for think_actors' workers (``_warm.SETUP_HOOK`` names it).

Importing this module imports the runtime, and with it the package's actor side; Ray runs ``setup_worker`` in each
worker process before its first task, so a worker started ahead (``_warm.top_up``) is ready for an agent actor.
Nothing in the package imports this module.
"""

from __future__ import annotations

from . import runtime

__all__ = ["setup_worker"]


def setup_worker() -> None:
    """Nothing left to do: the import of this module loaded the runtime (an agent actor then finds it loaded)."""
    assert runtime.AgentHost is not None
