"""ChatStream: what ``Think.chat()`` returns, the chunks of one turn with its request id, status and outcome.

An ``AgentHandle``'s stream on Ray (``runtime.stream.RemoteStream``) answers the same calls with the same values,
and raises the same teaching errors (``NOT_SYNC_ITERABLE``, ``NOT_AWAITABLE``) when it is read the wrong way.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, NoReturn

from ._turn.driver import TurnOutcome, TurnSpec, turn_stream
from ._turn.engine import Engine

__all__ = ["NOT_AWAITABLE", "NOT_SYNC_ITERABLE", "AsyncStream", "ChatStream"]


NOT_SYNC_ITERABLE = (
    "a chat stream is asynchronous: read it with `async for chunk in stream`, or `await stream.collect()` for "
    "the list of chunks"
)
NOT_AWAITABLE = (
    "a chat stream is not awaitable: read it with `async for chunk in stream`, or `await stream.collect()` for "
    "the list of chunks (`await agent.save_messages(...)` runs a turn and returns its TurnResult)"
)


class AsyncStream:
    """How every chat stream is read, in process or from a Ray handle: ``async for`` or ``collect()``; a ``for``
    or an ``await`` says so (``NOT_SYNC_ITERABLE``, ``NOT_AWAITABLE``). A subclass gives ``__aiter__``."""

    def __aiter__(self) -> AsyncIterator[Any]:
        raise NotImplementedError

    async def __anext__(self) -> Any:
        return await self.__aiter__().__anext__()

    def __iter__(self) -> NoReturn:
        raise TypeError(NOT_SYNC_ITERABLE)

    def __await__(self) -> NoReturn:
        raise TypeError(NOT_AWAITABLE)

    async def collect(self) -> list[Any]:
        """Read the whole stream: every chunk of the turn, in order."""
        return [chunk async for chunk in self]


class ChatStream(AsyncStream):
    """The chunks of one ``chat()`` turn: read them with ``async for chunk in stream`` or ``await stream.collect()``.

    ``request_id`` is known before the turn starts, so ``agent.cancel_chat(stream.request_id)`` works while the
    turn still waits in the queue. ``status`` and ``outcome`` say how far the turn got; an ``AgentHandle``'s
    stream on Ray answers the same three with the same values at the same moments.
    """

    def __init__(self, engine: Engine, spec: TurnSpec):
        self.request_id: str = spec.request_id
        self._engine = engine
        self._spec = spec
        self._iterator: AsyncGenerator[Any, None] | None = None
        self._reading = _Reading()

    def __aiter__(self) -> AsyncGenerator[Any, None]:
        if self._iterator is None:
            self._iterator = _chunks(self._engine, self._spec, self._reading)
        return self._iterator

    async def aclose(self) -> None:
        """Stop reading: a running turn is aborted (its partial reply is kept); one not started never runs."""
        if self._iterator is not None:
            await self._iterator.aclose()
        if self._reading.state == "pending":  # never read, so the turn never started: it never will
            self._engine.aborts.remove(self.request_id)
            self._spec.outcome.status = "aborted"
            self._reading.state = "ended"

    @property
    def status(self) -> str:
        """``pending`` until the stream is first read, ``running`` while it is read, then how the turn ended:
        ``completed``, ``error``, ``aborted`` (cancelled, or the stream closed before its end) or ``skipped``."""
        state = self._reading.state
        return self._spec.outcome.status if state == "ended" else state

    @property
    def outcome(self) -> TurnOutcome:
        """How the turn ended (status, message, error, structured output, usage, cost) once the stream has ended;
        until then only its ``status`` is set, ``pending`` or ``running``, as ``status`` says."""
        state = self._reading.state
        return self._spec.outcome if state == "ended" else TurnOutcome(status=state)


class _Reading:
    """How far a ``ChatStream`` was read: ``pending``, ``running``, ``ended``. Its own object, so the stream's
    generator does not hold the stream: a stream dropped unread to its end is finalised (its turn closed) at once."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = "pending"


async def _chunks(engine: Engine, spec: TurnSpec, reading: _Reading) -> AsyncGenerator[Any, None]:
    """The turn's chunks, marking ``reading``; a fault (not a turn's failure, which ends the stream with an error
    chunk) ends it with status ``error``."""
    reading.state = "running"
    outcome = spec.outcome
    try:
        # Closed with this generator, so an early aclose() (or the finaliser) ends the turn at once.
        async with aclosing(turn_stream(engine, spec)) as chunks:  # type: ignore[type-var]
            async for chunk in chunks:
                yield chunk
    except Exception as err:
        outcome.status, outcome.error = "error", outcome.error or str(err) or type(err).__name__
        raise
    finally:
        reading.state = "ended"
