"""Stream channels (``runtime/channel.py``): a streamed call's batches over a TCP connection, tested without a Ray
cluster. The producer is the real ``deliver`` and the consumer the real ``RemoteStream``; only Ray's streaming
call between them is played by ``Call``, which hands the producer's Ray items to the consumer in order, as Ray's
``ObjectRefGenerator`` does (an awaitable per item, ``StopAsyncIteration`` at the end, a ``RayTaskError`` for an
error)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
from ray.exceptions import ActorUnavailableError, RayTaskError

from think_actors.batching import _batches, _pack
from think_actors.errors import AgentUnavailableError, ConfigurationError, StreamChannelError
from think_actors.runtime import RuntimeConfig
from think_actors.runtime import config as config_module
from think_actors.runtime import stream as stream_module
from think_actors.runtime.calls import _until_restarted
from think_actors.runtime.channel import _HEADER, END, Inbox, ReplyTo, deliver, sent_marker
from think_actors.runtime.stream import RemoteStream

CONFIG = RuntimeConfig(batch_max=4, flush_s=0.003)


class Call:
    """A streamed Ray call as ``RemoteStream`` sees it: ``__anext__`` gives an awaitable of the next item."""

    def __init__(self, items: AsyncIterator[bytes]) -> None:
        self.items = items
        self.taken: list[bytes] = []  # the Ray items, in order

    async def __anext__(self) -> Any:
        try:
            item = await self.items.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as err:
            raise RayTaskError("stream", "traceback", err) from None
        self.taken.append(item)
        return _resolved(item)


def _resolved(value: Any) -> Any:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


async def paced(items: list[Any], error: BaseException | None = None) -> AsyncIterator[Any]:
    for item in items:
        await asyncio.sleep(0.001)  # a token at a time, as a provider streams
        yield item
    if error is not None:
        raise error


def batches_of(source: AsyncIterator[Any]) -> Any:
    def make(limits: Any) -> AsyncGenerator[bytes, None]:
        return _batches(source, limits)

    return make


async def started_inbox() -> Inbox:
    inbox = Inbox("127.0.0.1")
    await inbox.start()
    return inbox


async def test_a_stream_on_the_channel_arrives_whole_and_in_order() -> None:
    inbox = await started_inbox()
    reply_to, inflow = inbox.open()
    call = Call(deliver(batches_of(paced(list(range(50)))), CONFIG, reply_to))
    stream = RemoteStream(call, "r1", channel=(inbox, inflow))
    assert await stream.collect() == list(range(50))
    # One Ray item (the first batch, flagged: the rest comes on the channel), every other batch a frame.
    assert len(call.taken) == 1 and call.taken[0][0] & 0x10
    assert inbox._streams == {}  # the stream let its inflow go
    inbox.close()


async def test_without_a_reply_address_every_batch_is_a_ray_item() -> None:
    call = Call(deliver(batches_of(paced(list(range(20)))), CONFIG, None))
    assert await RemoteStream(call, "r1").collect() == list(range(20))
    assert len(call.taken) > 1


async def test_a_producer_that_cannot_reach_the_inbox_sends_ray_items(caplog: pytest.LogCaptureFixture) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    inbox = await started_inbox()
    _, inflow = inbox.open()
    unreachable = ReplyTo("127.0.0.1", port, inbox.secret, inflow.id)
    with caplog.at_level(logging.WARNING, logger="think_actors.runtime"):
        call = Call(deliver(batches_of(paced(list(range(20)))), CONFIG, unreachable))
        assert await RemoteStream(call, "r1", channel=(inbox, inflow)).collect() == list(range(20))
    assert len(call.taken) > 1 and not call.taken[0][0] & 0x10
    assert f"cannot reach 127.0.0.1:{port}" in caplog.text
    inbox.close()


async def test_an_error_arrives_after_every_frame_written_before_it() -> None:
    inbox = await started_inbox()
    reply_to, inflow = inbox.open()
    failure = ConfigurationError("the tool broke")
    call = Call(deliver(batches_of(paced(list(range(30)), failure)), CONFIG, reply_to))
    stream = RemoteStream(call, "r1", channel=(inbox, inflow))
    received = []
    with pytest.raises(ConfigurationError, match="the tool broke"):
        async for item in stream:
            received.append(item)
    assert received == list(range(30))
    inbox.close()


async def test_frames_that_arrive_after_the_calls_error_are_still_delivered_first() -> None:
    # The race the sent marker exists for: Ray reports the producer's error before its last frames arrived.
    inbox = await started_inbox()
    reply_to, inflow = inbox.open()
    first = bytes((_pack(["a"])[0] | 0x10,)) + _pack(["a"])[1:]

    async def ray_items() -> AsyncIterator[bytes]:
        yield first
        yield sent_marker(2)
        raise ConfigurationError("failed after two frames")

    stream = RemoteStream(Call(ray_items()), "r1", channel=(inbox, inflow))
    items = stream.__aiter__()
    assert await items.__anext__() == "a"
    late = asyncio.ensure_future(items.__anext__())
    await asyncio.sleep(0.05)  # the call has failed by now; the consumer waits for the two frames
    assert not late.done()
    _, writer = await asyncio.open_connection(reply_to.host, reply_to.port)
    writer.write(reply_to.secret)
    for batch in (_pack(["b"]), _pack(["c"])):
        writer.write(_HEADER.pack(reply_to.stream, len(batch)) + batch)
    assert await late == "b"
    assert await items.__anext__() == "c"
    with pytest.raises(ConfigurationError, match="failed after two frames"):
        await items.__anext__()
    writer.close()
    inbox.close()


async def test_frames_split_anywhere_by_tcp_are_put_back_together() -> None:
    inbox = await started_inbox()
    reply_to, inflow = inbox.open()
    frames = [_pack([f"chunk {i}" * (i + 1)]) for i in range(20)] + [END]
    wire = reply_to.secret + b"".join(_HEADER.pack(reply_to.stream, len(f)) + f for f in frames)
    _, writer = await asyncio.open_connection(reply_to.host, reply_to.port)
    for i in range(0, len(wire), 7):  # seven bytes per write, with a pause: TCP delivers them in pieces
        writer.write(wire[i : i + 7])
        await writer.drain()
        if i % 70 == 0:
            await asyncio.sleep(0.001)
    for _ in range(500):
        if inflow.ended:
            break
        await asyncio.sleep(0.01)
    assert list(inflow.frames) == frames
    writer.close()
    inbox.close()


async def test_a_connection_without_the_secret_is_closed_and_delivers_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inbox = await started_inbox()
    reply_to, inflow = inbox.open()
    batch = _pack(["forged"])
    reader, writer = await asyncio.open_connection(reply_to.host, reply_to.port)
    with caplog.at_level(logging.WARNING, logger="think_actors.runtime"):
        writer.write(b"\x00" * 16 + _HEADER.pack(reply_to.stream, len(batch)) + batch)
        assert await asyncio.wait_for(reader.read(), 2.0) == b""  # the inbox hung up
    assert not inflow.frames
    assert "did not know the secret" in caplog.text
    inbox.close()


async def test_a_connection_that_breaks_mid_stream_ends_the_stream_with_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stream_module, "_CLOSED_GRACE_S", 0.2)  # how long the call may take to say why
    inbox = await started_inbox()
    reply_to, inflow = inbox.open()
    first = bytes((_pack(["a"])[0] | 0x10,)) + _pack(["a"])[1:]
    never = asyncio.Event()

    async def ray_items() -> AsyncIterator[bytes]:
        yield first
        await never.wait()  # the producer's process hangs; only its connection tells
        yield b""

    stream = RemoteStream(Call(ray_items()), "r1", channel=(inbox, inflow))
    items = stream.__aiter__()
    assert await items.__anext__() == "a"
    _, writer = await asyncio.open_connection(reply_to.host, reply_to.port)
    batch = _pack(["b"])
    writer.write(reply_to.secret + _HEADER.pack(reply_to.stream, len(batch)) + batch)
    assert await items.__anext__() == "b"
    writer.transport.abort()
    with pytest.raises(StreamChannelError, match="broke before its end"):
        await asyncio.wait_for(items.__anext__(), 10.0)
    inbox.close()


async def test_a_stream_dropped_unread_lets_its_inflow_go() -> None:
    inbox = await started_inbox()
    _, inflow = inbox.open()

    async def ray_items() -> AsyncIterator[bytes]:
        yield _pack(["a"], last=True)

    stream = RemoteStream(Call(ray_items()), "r1", channel=(inbox, inflow))
    assert inflow.id in inbox._streams
    del stream
    assert inbox._streams == {}
    inbox.close()


async def paced_every(items: list[Any], gap_s: float) -> AsyncIterator[Any]:
    for item in items:
        await asyncio.sleep(gap_s)
        yield item


@pytest.mark.parametrize("latency_ms", [0.0, 60.0])
async def test_a_latency_budget_sends_tokens_together_and_the_first_at_once(latency_ms: float) -> None:
    # Tokens 10 ms apart, as a fast provider streams them. Without a budget each is a frame of its own; with 60 ms
    # a frame carries several, and still the first token leaves alone, at once (time to first token).
    inbox = await started_inbox()
    reply_to, inflow = inbox.open()
    limits = RuntimeConfig(batch_max=64, flush_s=0.003, stream_latency_s=latency_ms / 1000)
    call = Call(deliver(batches_of(paced_every(list(range(30)), 0.01)), limits, reply_to))
    stream = RemoteStream(call, "r1", channel=(inbox, inflow))
    assert await stream.collect() == list(range(30))
    assert len(call.taken) == 1  # the first batch: one token
    if latency_ms:
        assert 3 <= inbox.frames <= 12, inbox.frames  # ~6 tokens a frame (the timer's own slack allowed for)
    else:
        assert inbox.frames >= 25, inbox.frames
    inbox.close()


def test_a_latency_budget_out_of_range_is_refused_before_ray_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module.ray, "init", _must_not_start)
    with pytest.raises(ConfigurationError, match="stream_latency_ms=-5"):
        config_module.init(stream_latency_ms=-5)


def _must_not_start(**kwargs: Any) -> None:
    raise AssertionError("Ray started before the latency budget was checked")


async def test_a_safe_call_gives_up_on_an_actor_that_never_comes_back_saying_where_the_wait_is_set() -> None:
    sent = 0

    async def send() -> None:
        nonlocal sent
        sent += 1
        raise ActorUnavailableError("The actor is restarting.", None)

    with pytest.raises(AgentUnavailableError, match=r"within 0.3 s \(ta.init\(restart_wait_s=...\)\)") as caught:
        await _until_restarted(send, ActorUnavailableError("The actor is restarting.", None), 0.3)
    assert caught.value.retryable and 2 <= sent <= 4  # 50, 100, 200 ms apart, then the wait is over
