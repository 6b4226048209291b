"""Per-request abort signals: ``cancel_chat(request_id)`` reaches a turn that is queued or streaming."""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Callable
from typing import Any


def task_lookup(loop: asyncio.AbstractEventLoop) -> Callable[[], asyncio.Task[Any] | None]:
    """``loop``'s current task, as a call with no Python frame: the step loop asks for it before every event.

    3.12's ``asyncio.current_task`` is C; 3.11's is a Python function around the lookup done here.
    """
    if sys.version_info >= (3, 12):
        return functools.partial(asyncio.current_task, loop)
    from asyncio import tasks

    return functools.partial(tasks._current_tasks.get, loop)  # type: ignore[attr-defined]


class AbortSignal:
    """Set once. While the turn's task waits inside the engine (model stream, tools), aborting cancels that
    wait so the turn stops at once; between chunks the engine checks ``aborted`` before each yield.

    ``task`` and ``waiting`` say which task waits, and whether it does now (``enter_wait`` / ``leave_wait``; the
    step loop sets them itself around every event).
    """

    __slots__ = ("aborted", "failure", "reason", "task", "waiting")

    def __init__(self) -> None:
        self.aborted = False
        self.failure: BaseException | None = None  # the turn ends with this error, not as aborted (a run's deadline)
        self.reason: str | None = None
        self.task: asyncio.Task[Any] | None = None
        self.waiting = False

    def abort(self, reason: str | None = None, *, failure: BaseException | None = None) -> None:
        if self.aborted:
            return
        self.aborted = True
        self.reason = reason
        self.failure = failure
        if self.task is not None and self.waiting:
            self.task.cancel(msg="think_actors: turn aborted")

    def enter_wait(self) -> None:
        """Mark that the current task now waits inside the engine (safe to cancel). Aborted already (while its
        consumer was not reading, say), the wait it is about to start is cancelled at once."""
        self.task = asyncio.current_task()
        self.waiting = True
        if self.aborted and self.task is not None:
            self.task.cancel(msg="think_actors: turn aborted")

    def leave_wait(self) -> None:
        self.waiting = False

    def absorb_cancel(self) -> bool:
        """After a CancelledError: True (and the cancellation is consumed) if it came from ``abort``."""
        if not self.aborted:
            return False
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            task.uncancel()
        return True


EARLY_CANCEL_PREFIX = "agent-tool:"  # the runs a parent may cancel before they reach this agent
EARLY_CANCEL_KEPT_S = 60.0


class AbortRegistry:
    """One AbortSignal per live request id; removed when the turn ends.

    A parent that cancels its agent tool's run (``agent-tool:<call id>``) may do so before the run's call has reached
    the child: such a cancel is kept for a minute, and the run, if it arrives, starts aborted (no orphan run)."""

    def __init__(self) -> None:
        self._signals: dict[str, AbortSignal] = {}
        self._early: dict[str, tuple[str | None, float]] = {}  # request id -> (reason, monotonic time)

    def signal(self, request_id: str) -> AbortSignal:
        signal = self._signals.get(request_id)
        if signal is None:
            signal = self._signals[request_id] = AbortSignal()
            early = self._early.pop(request_id, None) if self._early else None
            if early is not None and time.monotonic() - early[1] < EARLY_CANCEL_KEPT_S:
                signal.abort(early[0])
        return signal

    def cancel(self, request_id: str, reason: str | None = None) -> bool:
        """Abort ``request_id``; False (a no-op) when it is unknown or finished."""
        signal = self._signals.get(request_id)
        if signal is None:
            if request_id.startswith(EARLY_CANCEL_PREFIX):
                now = time.monotonic()
                self._early = {k: v for k, v in self._early.items() if now - v[1] < EARLY_CANCEL_KEPT_S}
                self._early[request_id] = (reason, now)
            return False
        signal.abort(reason)
        return True

    def cancel_all(self, reason: str | None = None) -> None:
        for signal in list(self._signals.values()):
            signal.abort(reason)

    def remove(self, request_id: str, signal: AbortSignal | None = None) -> None:
        """Forget ``request_id`` (only while it is still ``signal``: a resumed turn may reuse the id)."""
        if signal is None or self._signals.get(request_id) is signal:
            self._signals.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._signals)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._signals
