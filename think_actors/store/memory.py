"""MemoryStore: the Store protocol in a dict, for tests and throwaway agents.

It keeps the encoded bytes SQLiteStore would write, not the message objects, so a value that SQLite cannot store
fails here too and a caller mutating a dict it passed in never changes what was stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from ..messages import UIMessage

# store/__init__.py defines LATEST before it imports this module, so the partly initialised package has it.
from . import LATEST
from ._codec import decode_message, encode_message, pack, unpack

__all__ = ["MemoryStore"]


@dataclass(slots=True)
class _Row:
    parent_id: str | None
    body: bytes


class MemoryStore:
    """An in-memory Store with SQLiteStore's semantics: same tree rules, same errors, same encoding."""

    def __init__(self) -> None:
        # Dict order stands in for SQLite's seq: rows are only ever added or all cleared, never re-inserted, so
        # the last key is always the latest leaf.
        self._rows: dict[str, _Row] = {}
        self._kv: dict[str, bytes] = {}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("MemoryStore is closed")

    async def load_messages(self) -> list[UIMessage]:
        """The active transcript: root to latest leaf."""
        self._check_open()
        path: list[UIMessage] = []
        message_id = next(reversed(self._rows), None)
        while message_id is not None and (row := self._rows.get(message_id)) is not None:
            path.append(decode_message(row.body))
            message_id = row.parent_id
        path.reverse()
        return path

    async def list_messages(self) -> list[UIMessage]:
        """Every stored message, all branches, in the order they were first written."""
        self._check_open()
        return [decode_message(row.body) for row in self._rows.values()]

    async def get_message(self, message_id: str) -> UIMessage | None:
        self._check_open()
        row = self._rows.get(message_id)
        return None if row is None else decode_message(row.body)

    async def append_message(self, message: UIMessage, parent_id: str | None = LATEST) -> bool:
        """Insert unless the id exists anywhere in the tree (then a no-op returning False).

        ``parent_id`` defaults to the latest leaf; None makes a root; an unknown id raises ``StoreError``.
        """
        self._check_open()
        if message.id in self._rows:
            return False
        if parent_id is LATEST:
            parent_id = next(reversed(self._rows), None)
        elif parent_id is not None and parent_id not in self._rows:
            raise StoreError(f"cannot append message {message.id!r}: parent {parent_id!r} does not exist")
        self._rows[message.id] = _Row(parent_id=parent_id, body=encode_message(message))
        return True

    async def upsert_message(self, message: UIMessage, parent_id: str | None = LATEST) -> None:
        """Update the message in place if its id exists, else append it under ``parent_id``.

        An update keeps the row's seq and parent, so the latest leaf and the transcript order do not move.
        """
        if not await self.update_message(message):
            await self.append_message(message, parent_id)

    async def update_message(self, message: UIMessage) -> bool:
        """Replace a stored message's content in place; returns whether it existed (nothing is inserted)."""
        self._check_open()
        row = self._rows.get(message.id)
        if row is None:
            return False
        row.body = encode_message(message)
        return True

    async def clear_messages(self) -> None:
        self._check_open()
        self._rows.clear()

    async def get_kv(self, key: str) -> Any:
        """A small msgpack-able value, or None."""
        self._check_open()
        data = self._kv.get(key)
        return None if data is None else unpack(data)

    async def set_kv(self, key: str, value: Any) -> None:
        """Store a value; None deletes the key."""
        self._check_open()
        if value is None:
            self._kv.pop(key, None)
        else:
            self._kv[key] = pack(value)

    async def close(self) -> None:
        """Refuse further use, as SQLiteStore does; closing twice is fine."""
        self._closed = True
