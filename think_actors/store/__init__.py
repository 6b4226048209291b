"""Persistence: the Store protocol (``protocol.py``), the agent-path rules, and the stores that implement it.

A store belongs to one agent. Messages form a tree (``parent_id``); the active transcript is the path from
the root to the latest leaf, where the latest leaf is the message written most recently (so a regenerated
answer, appended under an earlier message, becomes the new branch). Appending is O(1): one row, never a
rewrite of the history.

Stores: ``SQLiteStore`` (the default: one file per agent), ``PostgresStore`` (clusters: one database for every
agent; imported lazily, with asyncpg), ``MemoryStore`` (tests). ``open_store`` picks one by URL (``url.py``).
SQLite and PostgreSQL fence two writers of one agent with a generation lease (``_lease.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lease import holds_lease, superseded
from ._search import MessageHit
from .memory import MemoryStore
from .protocol import LATEST, Store, agent_path, validate_agent_name
from .records import EffectRecord, SubmissionRecord, TurnRecord
from .sqlite import SQLiteStore
from .url import STORE_ENV, check_store_url, open_store

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "LATEST",
    "STORE_ENV",
    "EffectRecord",
    "MemoryStore",
    "MessageHit",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "SubmissionRecord",
    "TurnRecord",
    "agent_path",
    "check_store_url",
    "holds_lease",
    "open_store",
    "superseded",
    "validate_agent_name",
]


def __getattr__(name: str) -> object:
    # postgres.py imports asyncpg: load it only in processes that use PostgreSQL.
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
