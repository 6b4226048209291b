"""The per-agent FIFO turn queue: at most one turn runs at a time, across every entry point."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from ..errors import NestedTurnError


class _Held:
    """One held turn slot. A chat stream is an async generator, so it marks the context of whoever iterates it;
    closed from another task (or by the garbage collector) it cannot unset that mark, so a mark only counts
    while its slot is ``live``."""

    __slots__ = ("live", "owner_id")

    def __init__(self, owner_id: int) -> None:
        self.owner_id = owner_id
        self.live = True


# The turn slots whose body the current task (or a task it spawned) is inside of. A blocking admission
# into one of their agents would wait for the slot its own caller holds, forever.
_inside: contextvars.ContextVar[tuple[_Held, ...]] = contextvars.ContextVar("think_actors_inside_turn", default=())


def _holds(owner: object) -> bool:
    return any(held.live and held.owner_id == id(owner) for held in _inside.get())


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
        if _holds(owner):
            raise NestedTurnError(
                f"{trigger}() cannot be called from inside an active turn of the same agent (a before_* hook, "
                "on_chunk, on_step_finish or a tool): it would wait for the turn it runs in. Write messages "
                "without a turn with add_messages(), or start the next turn from on_chat_response, which runs "
                "after the turn lock is released",
                stage="turn",
            )

    @staticmethod
    def inside(owner: object) -> bool:
        return _holds(owner)

    @asynccontextmanager
    async def slot(self, owner: object, request_id: str) -> AsyncIterator[None]:
        """Hold the turn slot; inside it the task is marked as inside ``owner``'s turn."""
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        held = _Held(id(owner))
        token = _inside.set((*(h for h in _inside.get() if h.live), held))
        self.active_request_id = request_id
        try:
            yield
        finally:
            held.live = False
            self.active_request_id = None
            self._lock.release()
            with suppress(ValueError):  # closed from another task's context: that context keeps a dead mark
                _inside.reset(token)

    async def wait_idle(self) -> None:
        """Wait until no turn runs or waits."""
        while self.busy:
            async with self._lock:
                pass
            await asyncio.sleep(0)
