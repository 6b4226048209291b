"""What the engine and the turn pipeline call on the durable features that build on them.

Recovery (``recovery.py``), submissions (``submissions.py``) and interactions (``interactions.py``) run turns
through the driver, so the driver and the engine cannot import them: the features are built above and attached to
the engine (``Engine.attach``), and everything below them sees them through these protocols. ``LiveTurn`` lives here
because the relay below keeps streams in it too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..store.records import TurnRecord

__all__ = ["InteractionsPort", "LiveTurn", "RecoveryPort", "SubmissionsPort"]


@dataclass(slots=True)
class LiveTurn:
    """A recovered turn's chunks so far, for callers that re-attach by request id."""

    chunks: list[Any] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # The log of the turn when this process began to follow it (what the stream carried before ``chunks``, as
    # the restart found it), None until the recovery turn has read it; ``base`` is its units (journal.units).
    replay: list[Any] | None = None
    base: int = 0
    done: bool = False
    status: str | None = None
    attempts: int = 0  # runs of the turn started and not yet ended (a stalled one schedules the next)

    def end(self, status: str | None) -> None:
        """One run of the turn ended; the turn is done when no run of it is left (a stalled one scheduled its
        recovery, which carries on the same stream)."""
        self.attempts -= 1
        self.status = status
        self.done = self.attempts <= 0
        self.changed.set()


class RecoveryPort(Protocol):
    """Recovery of interrupted turns and the streams callers re-attach to (``recovery.Recovery``)."""

    live: dict[str, LiveTurn]

    async def start(self) -> None: ...

    def schedule(self, record: TurnRecord) -> None: ...

    def follow(self, request_id: str) -> LiveTurn: ...

    def attach(self, request_id: str, position: int | None = None) -> AsyncIterator[Any]: ...

    def busy(self) -> bool: ...


class SubmissionsPort(Protocol):
    """The submission ledger and its drain (``submissions.Submissions``)."""

    async def recover(self, interrupted: set[str]) -> None: ...

    async def wake_if_pending(self) -> None: ...

    def finisher(self, submission_id: str) -> Any: ...

    def wake(self) -> None: ...

    def draining(self) -> bool: ...


class InteractionsPort(Protocol):
    """Tool results, approvals and the auto-continuation barrier (``interactions.Interactions``)."""

    async def restore(self) -> None: ...

    def quiet(self) -> bool: ...

    def rearm(self) -> None: ...
