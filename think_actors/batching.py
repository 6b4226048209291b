"""Batches: how a stream crosses an actor boundary (agent -> caller, model server -> agent).

A Ray stream item costs ≈400 µs whatever its size, so an actor's stream goes out in batches: the first item alone,
at once (time to first chunk), then whatever is ready plus what arrives within ``flush_s``, up to ``batch_max``.

Each batch is one ``bytes`` object, pickled here once (with Ray's cloudpickle, so whatever Ray could carry still
crosses). Ray passes bytes through untouched (≈0.3 µs), where the list of ``(class index, field dict)`` tuples a
batch used to be cost it ≈0.9 µs per element to serialize and ≈0.5 µs to deserialize: its msgpack pass hands
every tuple to pickle on its own. Chunks travel as ``(class index, field dict)`` and model events as ``(class
index, field values)``, nested ones too (an agent tool event's chunk, a finish event's usage), and come back
without validation: the sender validated them when it built them, and the rebuilt objects equal the sent ones
(same fields; for chunks the same fields-set that validated construction from the fields gives).

``hold_opening`` (``ta.init(first_chunk_at_once=False)``) keeps the chunks that only open a turn (``start``,
``start-step``) until its first content, then batches as usual: a turn whose model answers in one burst crosses
in one item instead of two, and its first chunk arrives with the model's first output instead of at once.

The first byte says whether the batch is the stream's last: the caller then ends without waiting for Ray's
end-of-stream message (≈0.5 ms), while the actor's side of the call still runs to its end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import operator
import pickle
import typing
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol

from pydantic import BaseModel
from ray import cloudpickle

from .chunks import chunk_classes, trusted_builder
from .models import ModelEvent, Usage


class BatchLimits(Protocol):
    """When a batch is sent: after ``batch_max`` items or ``flush_s`` seconds (``runtime.RuntimeConfig`` has both)."""

    @property
    def batch_max(self) -> int: ...

    @property
    def flush_s(self) -> float: ...


_CHUNK_CLASSES: tuple[type[BaseModel], ...] = chunk_classes()
_EVENT_CLASSES: tuple[type[Any], ...] = (*typing.get_args(ModelEvent), Usage)
_CHUNK_INDEX = {cls: i for i, cls in enumerate(_CHUNK_CLASSES)}
_EVENT_INDEX = {cls: len(_CHUNK_CLASSES) + i for i, cls in enumerate(_EVENT_CLASSES)}
_OTHER = -1  # any other item: pickled as it is


def _event_codec(cls: type[Any]) -> tuple[Callable[[Any], tuple[Any, ...]], Callable[[tuple[Any, ...]], Any]]:
    names = [field.name for field in dataclasses.fields(cls)]
    get = operator.attrgetter(*names)
    values: Callable[[Any], tuple[Any, ...]] = (lambda event: (get(event),)) if len(names) == 1 else get
    if any(field.kw_only for field in dataclasses.fields(cls)):
        return values, lambda fields: cls(**dict(zip(names, fields, strict=True)))
    return values, lambda fields: cls(*fields)


_EVENT_VALUES: dict[type[Any], Callable[[Any], tuple[Any, ...]]] = {}
_BUILDERS: list[Callable[[Any], Any]] = [trusted_builder(cls) for cls in _CHUNK_CLASSES]
for _cls in _EVENT_CLASSES:
    _values, _build = _event_codec(_cls)
    _EVENT_VALUES[_cls] = _values
    _BUILDERS.append(_build)
_BUILDERS.append(lambda item: item)  # _OTHER (index -1)


def _rebuild(index: int, payload: Any) -> Any:
    """A nested chunk or event, rebuilt while the batch is unpickled."""
    return _BUILDERS[index](payload)


_CloudPickler: Any = cloudpickle.CloudPickler


class _Pickler(_CloudPickler):  # type: ignore[misc]
    """Ray's pickler (what Ray itself would use for these items), with chunks and events made compact."""

    def reducer_override(self, obj: Any) -> Any:
        # Only reached for objects nested inside an item: pickle handles tuples, dicts, strings ... before this.
        cls = type(obj)
        index = _CHUNK_INDEX.get(cls)
        if index is not None:
            return _rebuild, (index, obj.__dict__)
        index = _EVENT_INDEX.get(cls)
        if index is not None:
            return _rebuild, (index, _EVENT_VALUES[cls](obj))
        return super().reducer_override(obj)


_LAST, _MORE = b"\x01", b"\x00"


def _pack(batch: list[Any], *, last: bool = False) -> bytes:
    """A batch as one bytes object: a flag byte (is it the stream's last?), then the pickled items."""
    chunks, events, values = _CHUNK_INDEX, _EVENT_INDEX, _EVENT_VALUES
    items = [
        (chunks[cls], item.__dict__)
        if (cls := type(item)) in chunks
        else (events[cls], values[cls](item))
        if cls in events
        else (_OTHER, item)
        for item in batch
    ]
    return _dumps(items, _LAST if last else _MORE)


def _dumps(obj: Any, head: bytes = b"") -> bytes:
    """``head``, then ``obj`` pickled by ``_Pickler``."""
    out = io.BytesIO()
    out.write(head)
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return out.getvalue()


def _unpack(data: bytes) -> list[Any]:
    """The items of a packed batch, equal to those packed."""
    builders = _BUILDERS
    return [builders[index](payload) for index, payload in pickle.loads(memoryview(data)[1:])]


def pack_call(*args: Any) -> bytes:
    """A streamed call's arguments as one ``bytes`` argument (``unpack_call`` gives them back).

    Ray serializes each argument of a call on its own, ≈0.1 ms of the caller's CPU apiece for the small dicts and
    tuples of an agent's call; one bytes object it passes through untouched. Pickled as a batch is, so whatever
    Ray could carry still crosses.
    """
    return _dumps(args)


def unpack_call(data: bytes) -> tuple[Any, ...]:
    """The arguments ``pack_call`` packed."""
    args: tuple[Any, ...] = pickle.loads(data)
    return args


def _is_last(data: bytes) -> bool:
    """Whether the remote stream ended with this batch (nothing but Ray's end-of-stream message follows)."""
    return data[:1] == _LAST


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


_OPENING = frozenset({"start", "start-step"})  # chunks that open a turn or a step and carry no content


def _opening(item: Any) -> bool:
    return getattr(item, "type", None) in _OPENING


async def _batches(
    source: AsyncIterator[Any], config: BatchLimits, *, hold_opening: bool = False
) -> AsyncGenerator[bytes, None]:
    """Re-yield ``source`` as packed batches: the first item alone, then whatever is ready, plus what arrives
    within ``flush_s`` of the batch's first item, up to ``batch_max``. An error of ``source`` is raised after the
    batch of the items before it. ``hold_opening``: the first batch waits for an item that is not a turn's or a
    step's opening chunk (or the end), and then is a batch like the others."""
    loop = asyncio.get_running_loop()
    pending: list[Any] = []  # what the source gave and no batch has taken yet; a _Failure can only come last
    ended = False
    opened = not hold_opening  # whether the first batch may leave (with hold_opening: once content came)
    waiter: asyncio.Future[None] | None = None
    wanted = 1  # how many pending items wake the waiting consumer
    first_taken: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        nonlocal waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
            waiter = None  # the items that follow need not call here

    async def pump() -> None:
        nonlocal ended, opened
        append = pending.append
        try:
            async for item in source:
                append(item)
                if not opened:
                    if _opening(item):
                        continue
                    opened = True
                    wake()
                    break  # the first batch waits for more (flush_s) like any other, which yields the loop
                wake()
                # Hold the turn until Ray has taken the first batch: a turn that never waits would
                # otherwise keep the event loop (and the first chunk) to itself until it ends.
                await first_taken
                break
            async for item in source:  # the same iterator, on from the second item
                append(item)
                if waiter is not None and len(pending) >= wanted:
                    wake()
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # delivered in order, after the items before it
            pending.append(_Failure(err))
        finally:
            ended = True
            wake()

    async def wait(count: int, timeout_s: float | None = None) -> None:
        """Until ``count`` items are pending, the source has ended, or ``timeout_s`` has passed."""
        nonlocal waiter, wanted
        if ended or len(pending) >= count:
            return
        waiter, wanted = loop.create_future(), count
        timer = None if timeout_s is None else loop.call_later(timeout_s, wake)
        try:
            await waiter
        finally:
            waiter, wanted = None, 1
            if timer is not None:
                timer.cancel()

    task = asyncio.ensure_future(pump())
    first = True
    try:
        while True:
            await wait(1)
            while not (opened or ended):  # hold_opening: only a turn's opening chunks so far
                await wait(len(pending) + 1)
            if not pending:
                return  # ended with nothing more
            if first and not hold_opening:
                size = 1  # the first item never waits: time to first chunk
            else:
                if config.flush_s > 0:
                    await wait(config.batch_max, config.flush_s)
                size = config.batch_max
            batch = pending[:size]
            del pending[:size]
            if type(batch[-1]) is _Failure:
                if len(batch) > 1:
                    yield _pack(batch[:-1])
                raise batch[-1].error
            yield _pack(batch, last=ended and not pending)
            if first:
                first = False
                first_taken.set_result(None)
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # A source parked at a yield (not inside an await) is not reached by the cancel: close it here, so a turn
        # finalizes (partial reply kept, slot released) now rather than whenever the garbage collector runs.
        close = getattr(source, "aclose", None)
        if close is not None:
            await close()
