"""``RemoteStream``: the chunks of a streamed remote call, unbatched, resumable after the agent's actor died."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from .._turn.journal import units
from .._turn.spec import TurnOutcome
from ..batching import _is_last, _unpack
from ..chat_stream import AsyncStream
from ..errors import (
    AgentUnavailableError,
    ConfigurationError,
    StreamChannelError,
)
from .calls import RestartWait, _hibernated, _restarting, _unwrap
from .channel import _DRAIN_AFTER_END_S, CHANNEL, END, Inbox, Inflow, inbox_for_loop, sent_count
from .config import _require_config, current_config

_CLOSED_GRACE_S = 5.0  # a broken channel: how long to wait for the call's own error (the producer's death)
_node_ip: str | None = None


def open_channel() -> tuple[Any, Inbox | None, Inflow | None]:
    """A reply address for a streamed call from this event loop (``None`` when streams here are Ray items: channels
    are off, this loop's inbox is still starting, or no loop runs) and where its frames arrive."""
    global _node_ip
    config = current_config()
    if config is None or not config.stream_channels:
        return None, None, None
    if _node_ip is None:
        _node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    inbox = inbox_for_loop(_node_ip)
    if inbox is None:
        return None, None, None
    reply_to, inflow = inbox.open()
    return reply_to, inbox, inflow


class _Resumable(Protocol):
    """What a stream needs of its agent's handle: wake a hibernating agent, follow a resumed turn."""

    path: str
    _actor: Any

    async def _wake(self) -> None: ...

    def attach(self, request_id: str, *, position: int | None = None) -> RemoteStream: ...


class RemoteStream(AsyncStream):
    """Chunks of a streamed remote call, unbatched: ``async for chunk in stream`` or ``await stream.collect()``.
    Closing it early cancels the remote turn.

    A ``chat()`` stream answers ``request_id``, ``status`` and ``outcome`` as the in-process ``ChatStream`` does:
    the agent's actor sends the turn's ``TurnOutcome`` after its last chunk, and the stream keeps it.

    When the actor dies during a turn, the error says so and names the turn: the restarted actor resumes it,
    and ``resume()`` follows the resumed turn from ``position``, the units (``journal.units``) of the turn's
    stream this caller received: every chunk of the reply reaches it once. A chunk reaches the caller only once
    the agent's log holds it, so what the caller saw is what the recovery continues from.

    With a ``channel`` (an inbox and the stream's inflow there, ``open_channel``), the producer may send all but
    its first batch over a connection instead of as Ray items (``channel.deliver``); the order is the same.
    """

    def __init__(
        self,
        generator: Any,
        request_id: str = "",
        *,
        resumable: bool = False,
        handle: _Resumable | None = None,
        restart: Callable[[], Any] | None = None,
        position: int | None = None,
        channel: tuple[Inbox | None, Inflow | None] = (None, None),
        safe: bool = False,
    ):
        self.request_id: str = request_id
        self.position = position  # None: this stream does not know where in its turn's stream it began
        self._resumable = resumable
        self._generator = generator
        self._items: AsyncIterator[Any] | None = None
        self._done = False
        self._handle = handle  # with ``restart``: a call that found the agent hibernating wakes it and is resent
        self._restart = restart
        self._received = False
        self._state = "pending"  # then "running", then "ended"
        self._outcome: TurnOutcome | None = None
        self._last_type: str | None = None  # the last chunk's type: how a stream without an outcome ended
        self._stopped = False  # closed (or its reader cancelled) before its end
        # ``safe``: the call may be sent again while the agent's actor restarts (``restart_wait_s``), as an attach
        # with a position may (its caller gets each chunk once however often it is sent).
        self._waits_restart = safe and restart is not None
        self._restarts: RestartWait | None = None  # made at the first failure a restart explains
        self._inbox, self._inflow = channel
        if self._inbox is not None and self._inflow is not None:  # a stream dropped unread lets its inflow go too
            weakref.finalize(self, self._inbox.discard, self._inflow)

    def __aiter__(self) -> AsyncIterator[Any]:
        # An async generator: ``async for`` then takes each chunk without a coroutine of ours per chunk.
        if self._items is None:
            self._items = self._unbatched()
        return self._items

    async def _unbatched(self) -> AsyncIterator[Any]:
        self._state = "running"
        try:
            async for data in self._batches():
                items = _unpack(data)
                if items and type(items[-1]) is TurnOutcome:  # a chat turn's outcome follows its last chunk
                    self._outcome = items.pop()
                if not items:
                    continue
                self._last_type = getattr(items[-1], "type", None)
                if self.position is None:
                    for item in items:
                        yield item
                    continue
                for item in items:
                    self.position += units(item)
                    yield item
        except Exception as err:
            if self._outcome is None:
                self._outcome = TurnOutcome(status="error", error=str(err) or type(err).__name__)
            raise
        except (GeneratorExit, asyncio.CancelledError):
            self._stopped = True  # the reader stopped before the end: the remote turn is cancelled
            raise
        finally:
            self._state = "ended"
            self._release()

    @property
    def status(self) -> str:
        """``pending`` until the stream is first read, ``running`` while it is read, then how the turn ended:
        ``completed``, ``error``, ``aborted`` (cancelled, or the stream closed before its end) or ``skipped``."""
        return self.outcome.status

    @property
    def outcome(self) -> TurnOutcome:
        """How the turn ended (status, message, error, structured output, usage, cost) once the stream has ended;
        until then only its ``status`` is set, ``pending`` or ``running``, as ``status`` says. A stream that
        carried no outcome (``attach``) tells its status by its last chunk."""
        if self._state != "ended":
            return TurnOutcome(status=self._state)
        if self._outcome is None:
            ended = {"finish": "completed", "error": "error", "abort": "aborted"}.get(self._last_type or "")
            self._outcome = TurnOutcome(status=ended or ("aborted" if self._stopped else "completed"))
        return self._outcome

    async def _batches(self) -> AsyncIterator[bytes]:
        """The call's packed batches in order: Ray items, then (when the first says so) the channel's frames."""
        while not self._done:
            if self._generator is None:  # a provisioned agent: start it, then the call
                assert self._handle is not None and self._restart is not None
                await self._handle._wake()
                self._generator = self._restart()
            try:
                data = await (await self._generator.__anext__())
            except StopAsyncIteration:
                self._done = True
                return
            except (RayTaskError, RayActorError, ActorUnavailableError) as err:
                handle, restart = self._handle, self._restart
                if (
                    not self._received
                    and handle is not None
                    and restart is not None
                    and _hibernated(err, handle.path, handle._actor)
                ):
                    await handle._wake()  # nothing of the call ran: the agent was hibernating
                    self._generator = restart()
                    self._restart = None  # once
                    continue
                if not self._received and restart is not None and self._waits_restart and _restarting(err):
                    # An attach with a position is safe to send again: wait for the restarted actor.
                    if self._restarts is None:
                        self._restarts = RestartWait(_require_config().restart_wait_s)
                    try:
                        await self._restarts.pause(err, self.request_id)
                    except AgentUnavailableError:
                        self._done = True
                        raise
                    self._generator = restart()
                    continue
                self._done = True
                raise self._error(err) from None
            self._received = True
            if data[0] & CHANNEL[0]:
                yield data  # the first batch: the producer sends the rest on the channel
                async for frame in self._channel_frames():
                    yield frame
                return
            if _is_last(data):
                # The remote generator has returned: end here rather than wait for Ray's end-of-stream message.
                self._done = True
            yield data

    async def _channel_frames(self) -> AsyncIterator[bytes]:
        """The frames of the stream's inflow, to its end; an error of the call is raised after the frames the
        producer wrote before it (``channel.sent_count``)."""
        inflow = self._inflow
        if inflow is None:
            raise StreamChannelError("the producer sent a stream on a channel this caller never opened")
        watch: asyncio.Future[tuple[str, Any]] | None = self._watch_call(inflow)
        error: BaseException | None = None
        expected: int | None = None  # frames written before the producer raised
        received = 0
        deadline: float | None = None  # the call has ended: its frames must arrive by then
        loop = asyncio.get_running_loop()
        try:
            while True:
                if inflow.frames:
                    frame = inflow.frames.popleft()
                    received += 1
                    if frame == END:
                        break
                    yield frame
                    if _is_last(frame):
                        break
                    continue
                if error is not None and (expected is None or received >= expected):
                    raise error
                if watch is not None and watch.done():
                    kind, value = watch.result()
                    watch = None
                    if kind == "item":
                        expected = sent_count(value)
                        watch = self._watch_call(inflow)
                        continue
                    deadline = loop.time() + _DRAIN_AFTER_END_S
                    if kind == "error":
                        error = self._error(value)
                    continue
                if inflow.closed:
                    if watch is not None:  # the producer's process went away: the call says how
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(asyncio.shield(watch), _CLOSED_GRACE_S)
                        if watch.done() and watch.result()[0] == "error":
                            raise self._error(watch.result()[1])
                    raise error or StreamChannelError(
                        f"the connection of stream {self.request_id!r} broke before its end",
                        request_id=self.request_id,
                        retryable=True,
                    )
                if deadline is not None:
                    if loop.time() >= deadline:
                        raise error or StreamChannelError(
                            f"stream {self.request_id!r}: the call ended but its last frames never arrived",
                            request_id=self.request_id,
                            retryable=True,
                        )
                    await inflow.wait(deadline - loop.time())
                else:
                    await inflow.wait()
        finally:
            self._done = True
            if watch is not None:
                watch.cancel()

    def _watch_call(self, inflow: Inflow) -> asyncio.Future[tuple[str, Any]]:
        """The call's next Ray item, its end or its error, waking ``inflow`` when it comes."""
        watch = asyncio.ensure_future(_next_item(self._generator))
        watch.add_done_callback(lambda _: inflow.wake())
        return watch

    def _error(self, err: BaseException) -> BaseException:
        """What the caller sees of a failed call."""
        error = _unwrap(err)
        if self._resumable and isinstance(error, AgentUnavailableError):
            return AgentUnavailableError(
                f"the agent actor died during turn {self.request_id!r}; it restarts and resumes the turn "
                f"from its store: follow it with stream.resume(), which is "
                f"handle.attach({self.request_id!r}, position={self.position}) ({err})",
                request_id=self.request_id,
                retryable=True,
            )
        return error

    def _release(self) -> None:
        if self._inbox is not None and self._inflow is not None:
            self._inbox.discard(self._inflow)
            self._inbox = self._inflow = None

    def resume(self) -> RemoteStream:
        """The rest of this stream's turn after an interruption, from ``position``: ``handle.attach(request_id,
        position=...)``. Resume the stream it returns in turn if that is interrupted too."""
        if self._handle is None or not self.request_id or self.position is None:
            raise ConfigurationError(
                "only a chat() stream, or an attach() stream given a position, knows where to resume from"
            )
        return self._handle.attach(self.request_id, position=self.position)

    async def aclose(self) -> None:
        """Stop reading: the remote turn is cancelled (its partial reply is kept)."""
        if not self._done:
            self._done = True
            if self._generator is not None:
                ray.cancel(self._generator)
        if self._state != "ended":
            self._stopped, self._state = True, "ended"
        self._release()


async def _next_item(generator: Any) -> tuple[str, Any]:
    """``("item", data)``, ``("end", None)`` or ``("error", ray_error)``: what a streamed call gives next."""
    try:
        return "item", await (await generator.__anext__())
    except StopAsyncIteration:
        return "end", None
    except (RayTaskError, RayActorError, ActorUnavailableError) as err:
        return "error", err
