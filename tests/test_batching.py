"""The batching that carries streams across actors, tested without a Ray cluster (it is plain asyncio)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import think_actors as ta
from think_actors.batching import _batches, _is_last, _pack, _unpack, pack_call, unpack_call
from think_actors.chunks import (
    AgentToolEventChunk,
    DataChunk,
    FinishChunk,
    FinishStepChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolOutputAvailableChunk,
)
from think_actors.models import (
    FileEvent,
    FinishEvent,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from think_actors.runtime import RuntimeConfig

CONFIG = RuntimeConfig(batch_max=4, flush_s=0.05)


async def collect(source: AsyncIterator[Any], config: RuntimeConfig = CONFIG) -> list[list[Any]]:
    return [_unpack(batch) async for batch in _batches(source, config)]


async def paced(items: list[Any], gaps: dict[int, asyncio.Event] | None = None) -> AsyncIterator[Any]:
    for i, item in enumerate(items):
        if gaps and i in gaps:
            await gaps[i].wait()
        yield item


def unpacked(batches: list[list[Any]]) -> list[Any]:
    return [item for batch in batches for item in batch]


async def test_the_first_item_leaves_alone_and_the_rest_fill_batches_up_to_the_cap() -> None:
    batches = await collect(paced(list(range(10))))
    assert [len(b) for b in batches] == [1, 4, 4, 1]
    assert unpacked(batches) == list(range(10))


async def test_a_batch_waits_for_late_items_within_the_flush_window_only() -> None:
    later = asyncio.Event()
    source = paced([0, 1, 2, 3], gaps={2: later})
    seen: list[list[Any]] = []

    async def consume() -> None:
        async for batch in _batches(source, CONFIG):
            seen.append(_unpack(batch))
            if len(seen) == 2:
                later.set()  # item 2 arrives only after the window of batch [1] has closed

    await asyncio.wait_for(consume(), 5)
    assert seen == [[0], [1], [2, 3]]


async def test_a_failure_arrives_after_the_items_before_it() -> None:
    async def failing() -> AsyncIterator[Any]:
        yield "a"
        yield "b"
        raise ta.RateLimitError("slow down", retryable=True)

    received: list[Any] = []
    with pytest.raises(ta.RateLimitError, match="slow down"):
        async for batch in _batches(failing(), CONFIG):
            received.extend(_unpack(batch))
    assert received == ["a", "b"]


@pytest.mark.parametrize("ask_for_more", [False, True], ids=["parked-at-yield", "inside-an-await"])
async def test_closing_the_batches_closes_the_source(ask_for_more: bool) -> None:
    waiting = asyncio.Event()
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[Any]:
        try:
            yield 0
            waiting.set()
            await asyncio.sleep(3600)
            yield 1
        finally:
            closed.set()

    stream = _batches(endless(), CONFIG)
    assert _unpack(await stream.__anext__()) == [0]
    if ask_for_more:  # the consumer waits for the next batch while the source sleeps
        pending = asyncio.ensure_future(stream.__anext__())
        await asyncio.wait_for(waiting.wait(), 5)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.wait_for(closed.wait(), 5)


async def test_chunks_cross_as_one_bytes_object_and_come_back_equal() -> None:
    chunks: list[Any] = [
        ta.StartChunk(message_id="m1"),
        ta.TextDeltaChunk(id="t1", delta="hi"),
        ToolOutputAvailableChunk(tool_call_id="c1", output={"n": 1}, preliminary=True),
        DataChunk(type="data-hook", data={"hook": "before_turn"}, transient=True),
        AgentToolEventChunk(agent="a/b", kind="chunk", sequence=3, chunk=ta.TextDeltaChunk(id="t2", delta="x")),
        ta.FinishChunk(finish_reason="stop"),
        "not a chunk",
        (3, {"a tuple": "that is not a packed chunk"}),
    ]
    packed = _pack(chunks)
    assert type(packed) is bytes and not _is_last(packed)
    restored = _unpack(packed)
    assert restored == chunks
    assert [type(c) for c in restored] == [type(c) for c in chunks]
    assert [c.to_wire() for c in restored[:6]] == [c.to_wire() for c in chunks[:6]]
    # As validated construction from the fields would leave them (what the caller got before batches were bytes).
    assert [c.model_fields_set for c in restored[:6]] == [set(type(c).model_fields) for c in chunks[:6]]
    assert type(restored[4].chunk) is ta.TextDeltaChunk


def test_a_calls_arguments_cross_as_one_bytes_object_and_come_back_equal() -> None:
    """An agent call's arguments go to Ray as one bytes object (``pack_call``): a message, its options, the caller
    chain and a trace context, UIMessages and chunks among them, come back equal and of their own types."""
    message = ta.UIMessage(id="u1", role="user", parts=[ta.TextPart(text="hi")])
    options = {"client_tools": [{"name": "pick", "parameters": {"type": "object"}}], "body": {"k": [1, 2]}, "x": None}
    args = (message, options, ("lead", "lead/team-1"), {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    packed = pack_call(*args)
    assert type(packed) is bytes
    restored = unpack_call(packed)
    assert restored == args and type(restored[0]) is ta.UIMessage
    assert unpack_call(pack_call(ta.TextDeltaChunk(id="t", delta="d"), None)) == (
        ta.TextDeltaChunk(id="t", delta="d"),
        None,
    )
    assert unpack_call(pack_call()) == ()


async def test_model_events_cross_compactly_and_come_back_equal() -> None:
    events: list[Any] = [
        ResponseMetadata(id="r1", model="m", timestamp=1.5),
        TextDelta("hi"),
        ReasoningDelta("hm"),
        ToolCallDelta(0, "call-1", "search", '{"q"'),
        SourceEvent("s1", "https://example.com", None),
        FileEvent("data:image/png;base64,AA", "image/png"),
        FinishEvent("stop", Usage(10, 4, 14), ("dropped seed",), {"k": [1]}, 0.25),
    ]
    restored = _unpack(_pack(events, last=True))
    assert restored == events and [type(e) for e in restored] == [type(e) for e in events]
    assert type(restored[-1].usage) is Usage


async def test_only_the_batch_that_ends_the_stream_says_it_is_the_last() -> None:
    batches = [batch async for batch in _batches(paced(list(range(6))), CONFIG)]
    assert [_is_last(b) for b in batches] == [False, False, True]

    async def failing() -> AsyncIterator[Any]:
        yield "a"
        yield "b"
        raise ta.RateLimitError("slow down", retryable=True)

    seen: list[bool] = []
    with pytest.raises(ta.RateLimitError):
        async for batch in _batches(failing(), CONFIG):
            seen.append(_is_last(batch))
    assert seen == [False, False]


def _turn_chunks(text_at: asyncio.Event | None = None) -> AsyncIterator[Any]:
    """A turn's chunks as an agent streams them: the opening ones at once, the text when ``text_at`` is set."""

    async def stream() -> AsyncIterator[Any]:
        yield StartChunk(message_id="m1")
        yield StartStepChunk()
        if text_at is not None:
            await text_at.wait()
        yield TextStartChunk(id="t1")
        for _ in range(3):
            yield TextDeltaChunk(id="t1", delta="ab")
        yield TextEndChunk(id="t1")
        yield FinishStepChunk()
        yield FinishChunk()

    return stream()


async def test_held_opening_chunks_cross_with_the_first_content_as_one_batch() -> None:
    text_at = asyncio.Event()
    seen: list[list[str]] = []

    async def consume() -> None:
        async for batch in _batches(_turn_chunks(text_at), RuntimeConfig(flush_s=0.05), hold_opening=True):
            seen.append([chunk.type for chunk in _unpack(batch)])

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(0.1)
    assert seen == []  # start and start-step wait for the model's first content
    text_at.set()
    await asyncio.wait_for(task, 5)
    assert seen == [
        [
            "start",
            "start-step",
            "text-start",
            "text-delta",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish",
        ]
    ]


async def test_without_holding_the_start_leaves_at_once() -> None:
    batches = [[c.type for c in _unpack(b)] async for b in _batches(_turn_chunks(), RuntimeConfig(flush_s=0.05))]
    assert batches[0] == ["start"]
    assert len(batches) == 2


async def test_held_opening_chunks_still_come_before_a_failure() -> None:
    async def failing() -> AsyncIterator[Any]:
        yield StartChunk(message_id="m1")
        yield StartStepChunk()
        raise ta.RateLimitError("slow down", retryable=True)

    received: list[str] = []
    with pytest.raises(ta.RateLimitError, match="slow down"):
        async for batch in _batches(failing(), CONFIG, hold_opening=True):
            received.extend(chunk.type for chunk in _unpack(batch))
    assert received == ["start", "start-step"]
