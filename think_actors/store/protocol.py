"""The Store protocol and the agent-path rules every store shares (``LATEST``, ``validate_agent_name``).

The stores (``sqlite.py``, ``postgres.py``, ``memory.py``) import this module, never the package, so the package
can import them without a circle.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidAgentNameError
from ..messages import UIMessage
from ._search import MessageHit
from .records import EffectRecord, SubmissionRecord, TurnRecord

__all__ = ["LATEST", "Store", "agent_path", "validate_agent_name"]

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

    async def search_messages(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """Every stored message (all branches) whose text matches ``query``, best first, at most ``limit``.

        Stemmed full-text search in the query language of ``_search`` (words, ``"phrases"``, ``or``, ``-word``);
        no query is a syntax error, a query without a word finds nothing. Raises ``ConfigurationError`` for a blank
        query or a limit outside 1..1000. Optional for a store of your own: ``Session.search`` says the store cannot
        search when it lacks this method.
        """
        ...

    async def get_kv(self, key: str) -> Any:
        """A small msgpack-able value, or None."""
        ...

    async def set_kv(self, key: str, value: Any) -> None:
        """Store a value; None deletes the key."""
        ...

    # -- submissions (reference §1.7) ------------------------------------------------------------------------

    async def insert_submission(
        self, record: SubmissionRecord, *, id_given: bool = True
    ) -> tuple[SubmissionRecord, bool]:
        """Insert ``record`` unless its id or idempotency key is already taken; atomic.

        Returns ``(the stored record, True)`` for a new row (``seq`` assigned) or ``(the existing record,
        False)``. Raises ``ConfigurationError`` when the caller's id and the key name two different submissions
        (or the id's row has another non-null key); with ``id_given=False`` (the id was generated) the key's row
        is simply returned.
        """
        ...

    async def get_submission(self, submission_id: str) -> SubmissionRecord | None: ...

    async def update_submission(
        self, submission_id: str, *, expect_status: Sequence[str] | None = None, **fields: Any
    ) -> bool:
        """Set ``fields`` on the row, only while its status is in ``expect_status`` (when given); atomic.

        Returns whether the row was updated (False: unknown id, or its status moved on).
        """
        ...

    async def list_submissions(
        self, *, statuses: Sequence[str] | None = None, limit: int | None = None, newest_first: bool = False
    ) -> list[SubmissionRecord]:
        """Rows with a status in ``statuses`` (all when None), oldest first by ``(created_at, seq)``, or with
        ``newest_first`` by ``(created_at, submission_id)`` descending; ``limit`` applies after both."""
        ...

    async def delete_submission(self, submission_id: str) -> bool: ...

    # -- turn records and the chunk log (reference §2.8, §3.7) ---------------------------------------------

    async def put_turn(self, record: TurnRecord) -> None:
        """Insert or replace the turn record of ``record.request_id``."""
        ...

    async def get_turn(self, request_id: str) -> TurnRecord | None: ...

    async def list_turns(self, *, statuses: Sequence[str] | None = None) -> list[TurnRecord]:
        """Turn records, oldest ``started_at`` first."""
        ...

    async def delete_turn(self, request_id: str) -> None:
        """Remove the turn record, its chunk log and its effects."""
        ...

    async def append_chunks(self, request_id: str, chunks: Sequence[dict[str, Any]]) -> None:
        """Append wire-form chunks to the request's chunk log, in order (one write for the batch)."""
        ...

    async def load_chunks(self, request_id: str) -> list[dict[str, Any]]: ...

    async def begin_turn(self, record: TurnRecord, messages: Sequence[UIMessage] = ()) -> list[bool]:
        """Put the turn record and append ``messages`` under the latest leaf, in one atomic write if the store can.

        Returns whether each message was appended (False: its id existed). Optional: the turn engine calls this
        default for a store without it, which makes the single writes, the record first.
        """
        await self.put_turn(record)
        return [await self.append_message(message) for message in messages]

    async def end_turn(self, request_id: str, reply: UIMessage | None = None) -> None:
        """Upsert ``reply`` (when given) and remove the turn record, its chunk log and its effects, in one atomic
        write if the store can.

        Optional: the turn engine calls this default for a store without it, which makes the single writes, the
        reply first.
        """
        if reply is not None:
            await self.upsert_message(reply)
        await self.delete_turn(request_id)

    # -- the effect ledger ------------------------------------------------------------------------------------

    async def start_effect(self, record: EffectRecord, *, chunks: Sequence[dict[str, Any]] = ()) -> EffectRecord:
        """Record that a tool call starts, unless its key exists: returns the stored record either way.

        ``chunks`` are appended to the chunk log of ``record.request_id`` first, in the same atomic write (the
        turn's log up to the call goes in with it). Optional for a store of your own: a ``start_effect`` without
        the parameter gets them in an ``append_chunks`` just before.
        """
        ...

    async def finish_effect(
        self, key: str, *, output: Any = None, error: str | None = None, chunks: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Mark the effect ``finished`` with its output or error (durable on return).

        ``chunks`` are appended to the chunk log of the effect's request in the same atomic write (the result's
        chunk goes in with it). Optional, as for ``start_effect``: without the parameter they are appended just
        after.
        """
        ...

    async def get_effect(self, key: str) -> EffectRecord | None: ...

    async def list_effects(self, request_id: str) -> list[EffectRecord]:
        """The request's effects in the order they started."""
        ...

    async def clear_turn_state(self) -> None:
        """Delete every turn record, chunk log and effect (``clear()``: the conversation they belong to is gone)."""
        ...

    async def exists(self) -> bool:
        """Whether the agent was ever stored here, asked without creating its file or rows (the gateway answers
        404 to a read of an agent that never ran). Optional: the gateway calls this default for a store without
        it, which reads the messages (and may create what the store creates on first use)."""
        return bool(await self.load_messages())

    async def close(self) -> None: ...
