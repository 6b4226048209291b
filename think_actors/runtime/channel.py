"""Stream channels: a streamed remote call's batches travel over a TCP connection between the two processes.

Why: at a provider's pace a token arrives every 20 ms or so, and a batching window of a few milliseconds carries one
token; sent as a Ray streaming-generator item, each token then costs about a millisecond of CPU on each side of
every actor boundary (Ray's core worker, its gRPC threads and the item's round trip through the event loop), where a
write on an open connection costs tens of microseconds. So the Ray call still starts the stream, carries its
cancellation and tells the caller when the other process died or refused the call, while the batches themselves go
over a connection.

How: each process that consumes streams has an ``Inbox`` per event loop: a TCP listener on its node's address with
a random secret, started the first time a stream is consumed there (that first stream still travels as Ray items).
A call that wants its batches this way carries a ``ReplyTo`` (the inbox's host, port, secret and a stream id). The
producer (``deliver``) opens one connection per inbox and event loop, proves it knows the secret, and writes each
batch as one frame tagged with the stream id, in order. Before the producer's Ray call ends, normally or with an
error, its last frame has been written: a batch flagged as the stream's last, or an ``END`` frame. So the caller, on
learning that the call ended, waits for that frame and has every batch that was sent, in order, before it reports
the end or the error.

What it does not cover: a producer that cannot connect to the inbox (another node behind a firewall that allows
Ray's ports only) sends that stream as Ray items, as before; a connection that breaks mid-stream ends the stream
with ``StreamChannelError`` in the caller, as if the producer's process had gone. Only processes of one Ray cluster
talk on it: the secret travels in Ray calls and nothing is read from a connection before the secret matched.
``ta.init(stream_channels=False)`` sends every stream as Ray items.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import logging
import os
import struct
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import NamedTuple, Protocol

from ..batching import _LAST, BatchLimits
from ..errors import StreamChannelError

__all__ = [
    "CHANNEL",
    "END",
    "Inbox",
    "Inflow",
    "ReplyTo",
    "StreamChannelError",
    "deliver",
    "inbox_for_loop",
    "sent_count",
]

log = logging.getLogger("think_actors.runtime")

_HEADER = struct.Struct("!QI")  # stream id, payload length
_SECRET_BYTES = 16
END = b"\x02"  # a frame: the stream ended after the batches before it (its last batch was not flagged as last)
SENT = b"\x03"  # a Ray item: the producer wrote this many frames and raises next
CHANNEL = b"\x10"  # a bit of the first batch's flag byte: the rest of the stream comes on the channel
_COUNT = struct.Struct("!Q")
_CONNECT_S = 5.0
_HIGH_WATER = 1 << 20  # a producer waits for the connection to drain past this many unsent bytes
_DRAIN_AFTER_END_S = 10.0  # how long a caller waits for the last frame once the call has ended


class ReplyTo(NamedTuple):
    """Where a producer sends a stream's batches: an inbox's address and secret, and the stream's id there."""

    host: str
    port: int
    secret: bytes
    stream: int


class Inflow:
    """One stream's batches as they arrive, for one consumer (``RemoteStream``)."""

    __slots__ = ("_waiter", "closed", "connection", "ended", "frames", "id")

    def __init__(self, stream: int) -> None:
        self.id = stream
        self.frames: collections.deque[bytes] = collections.deque()
        self.ended = False  # its last frame arrived
        self.closed = False  # its connection broke before that
        self.connection: _Receiver | None = None  # the connection that carries it, once a frame came
        self._waiter: asyncio.Future[None] | None = None

    def put(self, frame: bytes) -> None:
        self.frames.append(frame)
        if frame[:1] in (_LAST, END):
            self.ended = True
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout_s: float | None = None) -> None:
        """Until a frame arrives, the connection breaks, ``wake`` is called, or ``timeout_s`` passes."""
        if self.frames or self.ended or self.closed:
            return
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        timer = None if timeout_s is None else loop.call_later(timeout_s, self.wake)
        try:
            await self._waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()


class Inbox:
    """The listener of one process and event loop that receives the batches of the streams it consumes."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.port = 0
        self.secret = os.urandom(_SECRET_BYTES)
        self.ready = False
        self.frames = 0  # frames received, for all streams
        self._streams: dict[int, Inflow] = {}
        self._next = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Receiver(self), self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.ready = True

    def close(self) -> None:
        self.ready = False
        if self._server is not None:
            self._server.close()

    def open(self) -> tuple[ReplyTo, Inflow]:
        """A new stream: the address its producer writes to, and where its batches arrive."""
        self._next += 1
        inflow = Inflow(self._next)
        self._streams[inflow.id] = inflow
        return ReplyTo(self.host, self.port, self.secret, inflow.id), inflow

    def discard(self, inflow: Inflow) -> None:
        """Forget a stream (its consumer is done with it); frames still arriving for it are dropped."""
        self._streams.pop(inflow.id, None)

    def lost(self, connection: _Receiver) -> None:
        """``connection`` closed: the streams it carried that had not ended never will."""
        for inflow in list(self._streams.values()):
            if inflow.connection is connection and not inflow.ended:
                inflow.closed = True
                inflow.wake()


class _Receiver(asyncio.Protocol):
    """One producer's connection to an inbox: the secret, then frames, parsed as bytes arrive (a frame costs no
    task switch of its own: its consumer is woken directly)."""

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox
        self.buffer = bytearray()
        self.trusted = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if not self.trusted:
            if len(buffer) < _SECRET_BYTES:
                return
            if not hmac.compare_digest(bytes(buffer[:_SECRET_BYTES]), self.inbox.secret):
                log.warning(
                    "stream channel: a connection from %s did not know the secret; closed",
                    self.transport.get_extra_info("peername") if self.transport else None,
                )
                buffer.clear()
                if self.transport is not None:
                    self.transport.close()
                return
            self.trusted = True
            del buffer[:_SECRET_BYTES]
        streams, size, unpack_from = self.inbox._streams, _HEADER.size, _HEADER.unpack_from
        offset, end = 0, len(buffer)
        while end - offset >= size:
            stream, length = unpack_from(buffer, offset)
            if end - offset - size < length:
                break  # the rest of this frame is still on its way
            start = offset + size
            offset = start + length
            self.inbox.frames += 1
            inflow = streams.get(stream)
            if inflow is not None:  # else its consumer gave up on it
                inflow.connection = self
                with memoryview(buffer) as view:  # one copy of the frame, not two
                    inflow.put(bytes(view[start:offset]))
        if offset:
            del buffer[:offset]

    def connection_lost(self, exc: Exception | None) -> None:
        self.inbox.lost(self)


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Inbox] = weakref.WeakKeyDictionary()


def inbox_for_loop(host: str | None) -> Inbox | None:
    """This event loop's inbox when it is listening; else None, and (given a ``host`` to listen on) it starts in
    the background, so the streams that follow use it. None outside an event loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    inbox = _inboxes.get(loop)
    if inbox is None:
        if host is None:
            return None
        inbox = _inboxes[loop] = Inbox(host)
        task = loop.create_task(inbox.start())
        task.add_done_callback(_log_start_failure)
        return None
    return inbox if inbox.ready else None


def _log_start_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("stream channel: the inbox did not start; streams stay Ray items: %s", task.exception())


class _Connection:
    """A producer's connection to one inbox, shared by every stream this event loop sends there."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.transport = writer.transport

    def broken(self) -> bool:
        return self.transport.is_closing()

    def write(self, stream: int, frame: bytes) -> None:
        self.transport.write(_HEADER.pack(stream, len(frame)) + frame)

    async def send(self, stream: int, frame: bytes) -> None:
        self.write(stream, frame)
        if self.transport.get_write_buffer_size() > _HIGH_WATER:
            await self.writer.drain()  # a slow reader holds this producer back, as a Ray stream's would


class _Outbox:
    def __init__(self) -> None:
        self.connections: dict[tuple[str, int, bytes], _Connection] = {}
        self.opening: dict[tuple[str, int, bytes], asyncio.Future[_Connection | None]] = {}
        self.unreachable: set[tuple[str, int]] = set()


_outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Outbox] = weakref.WeakKeyDictionary()


async def _connect(reply_to: ReplyTo) -> _Connection | None:
    """This event loop's connection to ``reply_to``'s inbox, opened if need be; None if it cannot be reached."""
    loop = asyncio.get_running_loop()
    outbox = _outboxes.get(loop)
    if outbox is None:
        outbox = _outboxes[loop] = _Outbox()
    key = (reply_to.host, reply_to.port, reply_to.secret)
    connection = outbox.connections.get(key)
    if connection is not None and not connection.broken():
        return connection
    if (reply_to.host, reply_to.port) in outbox.unreachable:
        return None
    pending = outbox.opening.get(key)
    if pending is not None:
        return await asyncio.shield(pending)
    future: asyncio.Future[_Connection | None] = loop.create_future()
    outbox.opening[key] = future
    try:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(reply_to.host, reply_to.port), _CONNECT_S)
        except (OSError, TimeoutError) as err:
            outbox.unreachable.add((reply_to.host, reply_to.port))
            log.warning(
                "stream channel: cannot reach %s:%s (%s); streams to it travel as Ray items",
                reply_to.host,
                reply_to.port,
                err,
            )
            future.set_result(None)
            return None
        writer.write(reply_to.secret)
        connection = outbox.connections[key] = _Connection(writer)
        future.set_result(connection)
        return connection
    finally:
        del outbox.opening[key]


def sent_marker(count: int) -> bytes:
    """The Ray item a producer on the channel yields before it raises: how many frames it wrote."""
    return SENT + _COUNT.pack(count)


def sent_count(item: bytes) -> int | None:
    """The frame count of a ``sent_marker`` item; None for a batch."""
    return _COUNT.unpack_from(item, 1)[0] if item[:1] == SENT else None


class StreamLimits(BatchLimits, Protocol):
    """A producer's batching (``runtime.RuntimeConfig`` has it): ``BatchLimits`` for Ray items, and how long a
    batch may wait for company on any stream (``stream_latency_s``, the user's latency budget)."""

    @property
    def stream_latency_s(self) -> float: ...


class _ChannelLimits(NamedTuple):
    """Batching on a channel: what is ready when the receiver takes a batch, and no wait for more unless the user
    set a latency budget (a frame costs tens of microseconds, so waiting ``flush_s`` would only delay a token)."""

    batch_max: int
    flush_s: float = 0.0


async def deliver(
    batches_for: Callable[[BatchLimits], AsyncGenerator[bytes, None]], limits: StreamLimits, reply_to: ReplyTo | None
) -> AsyncIterator[bytes]:
    """A producer's side of a streamed call: the Ray items to yield, the rest written to ``reply_to``'s inbox.

    ``batches_for(limits)`` makes the batches (``batching._batches``); on a channel they are held back only for the
    user's ``stream_latency_s`` (as Ray items, for the longer of it and ``flush_s``). The first batch is always a
    Ray item (it starts the caller's stream and says, by ``CHANNEL``, whether the rest follows on the channel).
    Then, on the channel, each batch is a frame, and the stream's end is the frame of a batch flagged last or an
    ``END`` frame; if the batches raise, the item ``sent_marker(frames written)`` is yielded and the error raised
    (no ``END``), so the caller delivers those frames before the error.
    Without a ``reply_to``, or when its inbox cannot be reached, every batch is a Ray item.
    """
    connection = await _connect(reply_to) if reply_to is not None else None
    latency_s = limits.stream_latency_s
    if connection is not None:
        batches = batches_for(_ChannelLimits(limits.batch_max, latency_s))
    else:
        batches = batches_for(_ChannelLimits(limits.batch_max, max(limits.flush_s, latency_s)))
    async with contextlib.aclosing(batches):
        if connection is None or reply_to is None:
            async for batch in batches:
                yield batch
            return
        async for item in _on_channel(batches, reply_to.stream, connection):
            yield item


async def _on_channel(batches: AsyncIterator[bytes], stream: int, connection: _Connection) -> AsyncIterator[bytes]:
    iterator = batches.__aiter__()
    try:
        first = await iterator.__anext__()
    except StopAsyncIteration:
        return
    if first[:1] == _LAST:
        yield first  # the whole stream in one batch: nothing for the channel
        return
    yield bytes((first[0] | CHANNEL[0],)) + first[1:]
    written, last = 0, b""
    try:
        async for batch in iterator:
            if connection.broken():
                raise StreamChannelError("the caller's stream channel closed mid-stream")
            await connection.send(stream, batch)
            written += 1
            last = batch
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except BaseException:
        yield sent_marker(written)
        raise
    if last[:1] != _LAST and not connection.broken():
        connection.write(stream, END)
