"""The per-agent FIFO turn queue: at most one turn runs at a time, across every entry point."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ..errors import NestedTurnError

# The agents whose turn body the current task (or a task it spawned) is inside of. A blocking admission
# into one of them would wait for the slot its own caller holds, forever.
_inside: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("think_actors_inside_turn", default=frozenset())


class TurnQueue:
    """FIFO turn slots with generations.

    ``reset()`` bumps the generation: turns queued under an older generation find it changed when they reach
    the front and are skipped by their callers. asyncio.Lock wakes waiters in FIFO order.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.generation = 0
        self.active_request_id: str | None = None
        self._waiting = 0

    @property
    def busy(self) -> bool:
        """Whether a turn runs or waits."""
        return self._lock.locked() or self._waiting > 0

    @property
    def queued(self) -> int:
        """Turns running or waiting."""
        return self._waiting + (1 if self._lock.locked() else 0)

    def reset(self) -> None:
        self.generation += 1

    @staticmethod
    def check_not_nested(owner: object, trigger: str) -> None:
        """Raise NestedTurnError when called from inside a turn of ``owner``."""
        if id(owner) in _inside.get():
            raise NestedTurnError(
                f"Think turn admission ({trigger}) cannot be called from inside an active turn; "
                "use submit_messages() or add_messages() instead",
                stage="turn",
            )

    @staticmethod
    def inside(owner: object) -> bool:
        return id(owner) in _inside.get()

    @asynccontextmanager
    async def slot(self, owner: object, request_id: str) -> AsyncIterator[None]:
        """Hold the turn slot; inside it the task is marked as inside ``owner``'s turn."""
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        token = _inside.set(_inside.get() | {id(owner)})
        self.active_request_id = request_id
        try:
            yield
        finally:
            self.active_request_id = None
            _inside.reset(token)
            self._lock.release()

    async def wait_idle(self) -> None:
        """Wait until no turn runs or waits."""
        while self.busy:
            async with self._lock:
                pass
            await asyncio.sleep(0)
