"""The scheduler's clock: real time, or a clock a test moves by hand."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Unix time in seconds."""

    async def wait(self, until: float, wake: asyncio.Event) -> None:
        """Return at ``until``, or earlier when ``wake`` is set."""


class SystemClock:
    """Real time (``time.time``)."""

    def now(self) -> float:
        return time.time()

    async def wait(self, until: float, wake: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), max(0.0, until - time.time()))


class ManualClock:
    """A clock that stands still until ``advance`` or ``set`` moves it (tests: every schedule form in no time).

    A scheduler waiting on it wakes when the clock reaches the time it waits for.
    """

    def __init__(self, start: float) -> None:
        self._now = float(start)
        self._moved = asyncio.Event()

    def now(self) -> float:
        return self._now

    def set(self, t: float) -> None:
        self._now = float(t)
        self._moved.set()
        self._moved = asyncio.Event()

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)

    async def wait(self, until: float, wake: asyncio.Event) -> None:
        while self._now < until and not wake.is_set():
            moved = asyncio.ensure_future(self._moved.wait())
            woken = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({moved, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                moved.cancel()
                woken.cancel()
