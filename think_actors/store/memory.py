"""MemoryStore: the Store protocol in a dict, for tests and throwaway agents.

It keeps the encoded bytes SQLiteStore would write, not the message objects, so a value that SQLite cannot store
fails here too and a caller mutating a dict it passed in never changes what was stored. The durable records are
kept as the rows SQLiteStore would write (``_codec``), each read decoding a fresh record.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from ..messages import UIMessage
from ._codec import (
    check_limit,
    decode_message,
    effect_finish,
    effect_record,
    effect_row,
    encode_message,
    existing_submission,
    pack,
    status_set,
    submission_fields,
    submission_record,
    submission_row,
    turn_record,
    turn_row,
    unpack,
)
from ._search import MessageHit, check_search, memory_search
from .protocol import LATEST
from .records import EffectRecord, SubmissionRecord, TurnRecord

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
        # Rows as SQLiteStore writes them. Dict order stands in for rowid order: a re-put turn keeps its place,
        # as an upsert keeps its rowid.
        self._submissions: dict[str, dict[str, Any]] = {}
        self._submission_keys: dict[str, str] = {}
        self._submission_seq = 0
        self._turns: dict[str, dict[str, Any]] = {}
        self._chunks: dict[str, list[bytes]] = {}
        self._effects: dict[str, dict[str, Any]] = {}
        self._closed = False
        self._used = False

    def _check_open(self) -> None:
        self._used = True
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

    async def search_messages(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """The stored messages (every branch) whose text matches ``query``, best first, at most ``limit``.

        The same search as SQLiteStore's (FTS5, ``porter`` stemming, the same query language and ranking), over an
        index built for the call: a scan of every message, fine for the tests and throwaway agents this store is for.
        """
        self._check_open()
        query, limit = check_search(query, limit)
        return memory_search((decode_message(row.body) for row in self._rows.values()), query, limit)

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

    # -- submissions -------------------------------------------------------------------------------------------
    # No method awaits between its checks and its writes, so each is atomic on the event loop.

    async def insert_submission(
        self, record: SubmissionRecord, *, id_given: bool = True
    ) -> tuple[SubmissionRecord, bool]:
        """Insert ``record`` unless its id or idempotency key is already taken; atomic.

        Returns ``(the stored record, True)`` for a new row (``seq`` assigned) or ``(the existing record,
        False)``, whose payload is not compared. Raises ``ConfigurationError`` when the id and the key name two
        different submissions (or the id's row has another non-null key).
        """
        self._check_open()
        row = submission_row(record)
        key = record.idempotency_key
        by_key = (
            None if key is None or key not in self._submission_keys else self._submissions[self._submission_keys[key]]
        )
        existing = existing_submission(record, self._submissions.get(record.submission_id), by_key, id_given=id_given)
        if existing is not None:
            return submission_record(existing), False
        self._submission_seq += 1
        row = {"seq": self._submission_seq, **row}
        self._submissions[record.submission_id] = row
        if key is not None:
            self._submission_keys[key] = record.submission_id
        return submission_record(row), True

    async def get_submission(self, submission_id: str) -> SubmissionRecord | None:
        self._check_open()
        row = self._submissions.get(submission_id)
        return None if row is None else submission_record(row)

    async def update_submission(
        self, submission_id: str, *, expect_status: Sequence[str] | None = None, **fields: Any
    ) -> bool:
        """Set ``fields`` on the row, only while its status is in ``expect_status`` (when given); atomic.

        Returns whether the row was updated (False: unknown id, or its status moved on). Any SubmissionRecord
        field but ``seq`` may be set; another name raises ``ConfigurationError``.
        """
        self._check_open()
        columns = submission_fields(fields)
        row = self._submissions.get(submission_id)
        expected = status_set(expect_status)
        if row is None or (expected is not None and row["status"] not in expected):
            return False
        if "idempotency_key" in columns:
            old, new = row["idempotency_key"], columns["idempotency_key"]
            if new is not None and self._submission_keys.get(new, submission_id) != submission_id:
                raise StoreError(f"cannot set idempotency_key {new!r} on {submission_id!r}: another submission has it")
            if old is not None:
                del self._submission_keys[old]
            if new is not None:
                self._submission_keys[new] = submission_id
        row.update(columns)
        return True

    async def list_submissions(
        self, *, statuses: Sequence[str] | None = None, limit: int | None = None, newest_first: bool = False
    ) -> list[SubmissionRecord]:
        """Rows with a status in ``statuses`` (all when None), oldest first by ``(created_at, seq)`` (the drain's
        FIFO), or with ``newest_first`` by ``created_at`` then ``submission_id``, both descending (Think's
        listing); ``limit`` applies after the status filter and the order.
        """
        self._check_open()
        check_limit(limit)
        wanted = status_set(statuses)
        rows = [r for r in self._submissions.values() if wanted is None or r["status"] in wanted]
        if newest_first:
            rows.sort(key=lambda r: (r["created_at"], r["submission_id"]), reverse=True)
        else:
            rows.sort(key=lambda r: (r["created_at"], r["seq"]))
        return [submission_record(r) for r in rows[:limit]]

    async def delete_submission(self, submission_id: str) -> bool:
        """Delete the row; returns whether it existed."""
        self._check_open()
        row = self._submissions.pop(submission_id, None)
        if row is None:
            return False
        if row["idempotency_key"] is not None:
            del self._submission_keys[row["idempotency_key"]]
        return True

    # -- turn records and the chunk log ------------------------------------------------------------------------

    async def put_turn(self, record: TurnRecord) -> None:
        """Insert or replace the turn record of ``record.request_id``."""
        self._check_open()
        self._turns[record.request_id] = turn_row(record)

    async def get_turn(self, request_id: str) -> TurnRecord | None:
        self._check_open()
        row = self._turns.get(request_id)
        return None if row is None else turn_record(row)

    async def list_turns(self, *, statuses: Sequence[str] | None = None) -> list[TurnRecord]:
        """Turn records, oldest ``started_at`` first (ties in the order they were first put)."""
        self._check_open()
        wanted = status_set(statuses)
        rows = [r for r in self._turns.values() if wanted is None or r["status"] in wanted]
        rows.sort(key=lambda r: r["started_at"])  # stable: ties keep dict order
        return [turn_record(r) for r in rows]

    async def delete_turn(self, request_id: str) -> None:
        """Remove the turn record, its chunk log and its effects (the turn ended: nothing is left to recover)."""
        self._check_open()
        self._turns.pop(request_id, None)
        self._chunks.pop(request_id, None)
        for key in [k for k, r in self._effects.items() if r["request_id"] == request_id]:
            del self._effects[key]

    async def append_chunks(self, request_id: str, chunks: Sequence[dict[str, Any]]) -> None:
        """Append wire-form chunks to the request's chunk log, in order (none of them if one cannot be stored)."""
        self._check_open()
        bodies = [pack(chunk) for chunk in chunks]
        if bodies:
            self._chunks.setdefault(request_id, []).extend(bodies)

    async def load_chunks(self, request_id: str) -> list[dict[str, Any]]:
        """The request's chunk log, in the order appended."""
        self._check_open()
        return [unpack(body) for body in self._chunks.get(request_id, ())]

    async def begin_turn(self, record: TurnRecord, messages: Sequence[UIMessage] = ()) -> list[bool]:
        """Put the turn record and append ``messages`` under the latest leaf, all or nothing.

        Returns whether each message was appended (False: its id existed).
        """
        self._check_open()
        row = turn_row(record)
        bodies = [encode_message(message) for message in messages]  # a value that cannot be stored writes nothing
        self._turns[record.request_id] = row
        appended = []
        for message, body in zip(messages, bodies, strict=True):
            new = message.id not in self._rows
            if new:
                self._rows[message.id] = _Row(parent_id=next(reversed(self._rows), None), body=body)
            appended.append(new)
        return appended

    async def end_turn(self, request_id: str, reply: UIMessage | None = None) -> None:
        """Upsert ``reply`` (when given) and remove the turn record, its chunk log and its effects, all or nothing."""
        if reply is not None:
            await self.upsert_message(reply)  # raises before anything changed when the reply cannot be stored
        await self.delete_turn(request_id)

    # -- the effect ledger -------------------------------------------------------------------------------------

    async def start_effect(self, record: EffectRecord, *, chunks: Sequence[dict[str, Any]] = ()) -> EffectRecord:
        """Record that a tool call starts, unless its key exists: returns the stored record either way.

        ``chunks`` go to the request's chunk log first, all or nothing with the effect.
        """
        self._check_open()
        row = effect_row(record)
        bodies = [pack(chunk) for chunk in chunks]  # a chunk that cannot be stored writes nothing
        if bodies:
            self._chunks.setdefault(record.request_id, []).extend(bodies)
        return effect_record(self._effects.setdefault(record.key, row))

    async def finish_effect(
        self, key: str, *, output: Any = None, error: str | None = None, chunks: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Mark the effect ``finished`` with its output or error, ``finished_at`` now (a second finish overwrites),
        and append ``chunks`` to its request's chunk log, all or nothing.

        Raises ``StoreError`` for an unknown key.
        """
        self._check_open()
        columns = {**effect_finish(output, error), "finished_at": time.time()}
        row = self._effects.get(key)
        if row is None:
            raise StoreError(f"cannot finish effect {key!r}: it was never started")
        bodies = [pack(chunk) for chunk in chunks]
        row.update(columns)
        if bodies:
            self._chunks.setdefault(row["request_id"], []).extend(bodies)

    async def get_effect(self, key: str) -> EffectRecord | None:
        self._check_open()
        row = self._effects.get(key)
        return None if row is None else effect_record(row)

    async def list_effects(self, request_id: str) -> list[EffectRecord]:
        """The request's effects in the order they started."""
        self._check_open()
        return [effect_record(r) for r in self._effects.values() if r["request_id"] == request_id]

    async def clear_turn_state(self) -> None:
        """Delete every turn record, chunk log and effect; submissions and messages stay."""
        self._check_open()
        self._turns.clear()
        self._chunks.clear()
        self._effects.clear()

    async def holds_lease(self) -> bool:
        """Always: a memory store belongs to one process, so no other writer can open it."""
        return True

    async def exists(self) -> bool:
        """Whether the store was ever used (as SQLiteStore's file exists after its first use)."""
        return self._used

    async def close(self) -> None:
        """Refuse further use, as SQLiteStore does; closing twice is fine."""
        self._closed = True
