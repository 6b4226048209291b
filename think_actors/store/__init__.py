"""Persistence: the Store protocol, the agent-path rules, and the stores that implement it.

A store belongs to one agent. Messages form a tree (``parent_id``); the active transcript is the path from
the root to the latest leaf, where the latest leaf is the message written most recently (so a regenerated
answer, appended under an earlier message, becomes the new branch). Appending is O(1): one row, never a
rewrite of the history.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidAgentNameError
from ..messages import UIMessage

__all__ = ["LATEST", "MemoryStore", "SQLiteStore", "Store", "agent_path", "validate_agent_name"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+=-]{0,127}")


class _Latest:
    def __repr__(self) -> str:
        return "LATEST"


LATEST: Any = _Latest()
"""Default ``parent_id``: attach under the latest leaf."""


def validate_agent_name(name: str) -> str:
    """Return ``name`` if it is a safe single path segment, else raise ``InvalidAgentNameError``.

    Allowed: 1-128 characters of letters, digits and ``. _ @ : + = -``, starting with a letter or digit, so
    no name can be ``..``, hold a separator or reach another agent's file or key.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidAgentNameError(
            f"invalid agent name {name!r}: use 1-128 letters, digits or . _ @ : + = - starting with a letter or digit",
            name=str(name),
        )
    return name


def agent_path(*segments: str) -> str:
    """Join validated segments into an agent path (``lead/team-1/researcher/q1``)."""
    return "/".join(validate_agent_name(s) for s in segments)


@runtime_checkable
class Store(Protocol):
    """What an agent needs from its persistence. All methods are coroutines; writes are durable on return."""

    async def load_messages(self) -> list[UIMessage]:
        """The active transcript: root to latest leaf."""
        ...

    async def get_message(self, message_id: str) -> UIMessage | None: ...

    async def append_message(self, message: UIMessage, parent_id: str | None = LATEST) -> bool:
        """Insert unless the id exists anywhere in the tree (then a no-op returning False)."""
        ...

    async def upsert_message(self, message: UIMessage, parent_id: str | None = LATEST) -> None:
        """Update the message in place if its id exists, else append it under ``parent_id``."""
        ...

    async def update_message(self, message: UIMessage) -> bool:
        """Replace a stored message in place (same position in the tree); False when the id is unknown."""
        ...

    async def list_messages(self) -> list[UIMessage]:
        """Every stored message, all branches, in write order."""
        ...

    async def clear_messages(self) -> None: ...

    async def get_kv(self, key: str) -> Any:
        """A small msgpack-able value, or None."""
        ...

    async def set_kv(self, key: str, value: Any) -> None:
        """Store a value; None deletes the key."""
        ...

    async def close(self) -> None: ...


from .memory import MemoryStore  # noqa: E402
from .sqlite import SQLiteStore  # noqa: E402
