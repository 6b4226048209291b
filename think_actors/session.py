"""Session: what ``configure_session`` configures before the agent loads its history."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .messages import UIMessage
from .store import Store

__all__ = ["CompactionResult", "Session"]

CompactionResult = dict[str, Any]
"""``{"summary": str, "from_message_id": str, "to_message_id": str}`` as returned by a compaction function."""


class Session:
    """An agent's message store and its compaction function.

    ``configure_session`` receives one per agent start and returns it (or a replacement), e.g.
    ``return session.on_compaction(my_summarizer)``. The compaction function is what context-overflow
    recovery calls to shorten the history.
    """

    def __init__(self, agent_path: str, store: Store):
        self.agent_path = agent_path
        self.store = store
        self.compaction: Callable[[list[UIMessage]], Awaitable[CompactionResult | None]] | None = None

    def on_compaction(self, fn: Callable[[list[UIMessage]], Awaitable[CompactionResult | None]]) -> Session:
        """Register the function that summarises a range of history (None when it cannot shorten it)."""
        self.compaction = fn
        return self

    def with_store(self, store: Store) -> Session:
        """Use another store for this agent (e.g. a PostgreSQL store on a cluster)."""
        self.store = store
        return self
