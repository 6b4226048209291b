"""The durable trace of a running turn: its turn record, the chunk log of its stream, and its effect ledger.

A turn writes its record when it starts and removes it when it ends, so a record left behind means a crash
interrupted the turn. The record goes in with the turn's input and, for a completed turn, goes out with its reply:
one write each where the store can (``Store.begin_turn`` / ``Store.end_turn``). The chunk log holds what the stream
produced so far (reference §3.7): a tool call's result is logged before the caller sees it, in the same write as
the effect ledger's ``finished`` when the call ran alone, else at once; a call's input goes in with its effect's
``started``; everything else (text, reasoning, step boundaries) in batches of ``FLUSH_EVERY`` chunks or
``FLUSH_AFTER_S``, so a crash loses at most that much text, which recovery's continuation writes again. The
reference flushes tool outputs at once and the rest every 10 chunks; a batch here is one SQLite commit (≈10 µs),
and at a provider's pace (tens of chunks a second) the time bound is the one that applies. Every tool call records
``started`` before it runs and ``finished`` after, so recovery can replay a finished call's result and knows which
calls are in doubt.

The log is the turn's whole stream, kept across its attempts: a context-overflow retry and a recovery's
continuation do not empty it but start a new segment (a ``start`` entry naming the segment's message), and only the
last segment is the reply still being built. So a caller can count what it received (``units``: a delta's
characters, one for every other chunk the log holds) and re-attach after it (``replay``), and nothing reaches it
twice. A caller on the other side of an actor boundary only receives what the log already holds (``durable``
before each batch leaves): what it saw is what recovery continues from.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Sequence
from typing import Any

from .. import tracing
from ..chunks import parse_chunk
from ..messages import UIMessage
from ..store import Store
from ..store.records import EffectRecord, TurnRecord
from .engine import Engine

# Chunks that settle a call: flushed at once, so a crash never loses a tool result that was reported. A call's input
# (tool-input-available) is logged with its effect's start when it runs (``take``), else with the next batch.
_FLUSH_NOW = frozenset({"tool-input-error", "tool-output-available", "tool-output-error"})
FLUSH_EVERY = 128  # chunks go in batches of this many (every delta counts, merged or not) ...
FLUSH_AFTER_S = 0.05  # ... or of what arrived within this long
_DELTAS = frozenset({"text-delta", "reasoning-delta"})
# Chunks of the stream the log never replays: a stream's start (the log's ``start`` entries are its segment marks),
# its end by abort or error, a child agent's events and transient data (none of them is part of the reply).
_NOT_REPLAYED = frozenset({"start", "abort", "error", "agent-tool-event"})


def units(chunk: Any) -> int:
    """How far ``chunk`` moves a caller's position in a turn's stream: a text or reasoning delta by its characters,
    a chunk the log never replays by nothing, every other chunk by one."""
    kind = chunk.type
    if kind in _DELTAS:
        return len(chunk.delta)
    if kind in _NOT_REPLAYED or (kind.startswith("data-") and chunk.transient):
        return 0
    return 1


def replay(chunks: Sequence[Any], position: int) -> list[Any]:
    """What of ``chunks`` (a turn's logged stream, parsed) lies after ``position``; a delta the position cuts gives
    its rest. Chunks without units are left out."""
    out: list[Any] = []
    seen = 0
    for chunk in chunks:
        size = units(chunk)
        if not size:
            continue
        if seen + size > position:
            if seen < position:  # a delta the caller holds the beginning of
                chunk = delta_from(chunk, position - seen)
            out.append(chunk)
        seen += size
    return out


def delta_from(chunk: Any, start: int) -> Any:
    """A text or reasoning delta without its first ``start`` characters."""
    return type(chunk)(id=chunk.id, delta=chunk.delta[start:])


def parse_log(entries: Sequence[dict[str, Any]]) -> list[Any]:
    """The chunks of a log (an entry this version cannot read is left out, so the rest still rebuilds)."""
    chunks = []
    for entry in entries:
        try:
            chunks.append(parse_chunk(entry))
        except Exception:
            continue
    return chunks


def last_segment(chunks: Sequence[Any], first_message_id: str | None) -> tuple[str | None, list[Any]]:
    """The message id and the chunks of the log's last segment: after its last ``start`` entry, or the whole log
    (the turn's first attempt, building ``first_message_id``)."""
    for i in range(len(chunks) - 1, -1, -1):
        if chunks[i].type == "start":
            return chunks[i].message_id, list(chunks[i + 1 :])
    return first_message_id, list(chunks)


def effect_key(path: str, request_id: str, tool_call_id: str) -> str:
    return f"{path}/{request_id}/{tool_call_id}"


class TurnJournal:
    """One turn's record and chunk log. ``None``-safe to use: a turn without a journal skips all of it."""

    __slots__ = (
        "_buffer",
        "_count",
        "_logged",
        "_run",
        "_since",
        "engine",
        "message_id",
        "record",
        "reply",
        "resume",
        "run_text",
        "writing",
    )

    def __init__(self, engine: Engine, record: TurnRecord) -> None:
        self.engine = engine
        self.record = record
        self.resume = False  # the turn stopped to be resumed: its record stays for recovery
        self.reply: UIMessage | None = None  # the finished reply, written with the record's removal (``end``)
        self._buffer: list[dict[str, Any]] = []
        # The open delta run: the buffered entry that consecutive deltas of one part merge into, and their texts
        # (joined when the run closes). ``run_text`` is a new list for every run and None when none is open.
        self._run: dict[str, Any] | None = None
        self.run_text: list[str] | None = None
        self._count = 0  # chunks since the last flush (merged deltas count one each)
        self._since = 0.0
        self._logged: list[Any] = []  # chunks ``take`` logged before they reached ``add``, in stream order
        self.message_id = record.message_id  # the message the log's last segment builds
        # Held by every write of the log: a flush from the actor boundary (``Engine.durable``) and the turn's own
        # writes go in the order their chunks were taken, and none lands after the record's removal.
        self.writing = asyncio.Lock()

    @classmethod
    def new(
        cls,
        engine: Engine,
        *,
        request_id: str,
        trigger: str,
        continuation: bool,
        input_ids: list[str],
        message_id: str,
        submission_id: str | None,
        data: dict[str, Any],
    ) -> TurnJournal:
        """The journal of a turn that starts now; nothing is written before ``begin``."""
        now = time.time()
        traceparent = tracing.traceparent()
        if traceparent is not None:  # a recovery after a crash links its span to this turn's
            data = {**data, "traceparent": traceparent}
        record = TurnRecord(
            request_id=request_id,
            trigger=trigger,
            status="running",
            started_at=now,
            updated_at=now,
            continuation=continuation,
            input_ids=input_ids,
            message_id=message_id,
            submission_id=submission_id,
            data=data,
        )
        return cls(engine, record)

    async def begin(self, messages: Sequence[UIMessage]) -> None:
        """Write the turn record and append the turn's input in one write: a crash leaves both or neither."""
        engine = self.engine
        store = engine.store
        begin = getattr(store, "begin_turn", None)
        appended = await (
            begin(self.record, messages) if begin is not None else Store.begin_turn(store, self.record, messages)
        )
        engine.messages.extend(m for m, new in zip(messages, appended, strict=True) if new)

    def add(self, chunk: Any) -> bool:
        """Buffer a chunk of the stream; True when the buffer must be flushed before the chunk goes out."""
        if self._logged and chunk is self._logged[0]:
            del self._logged[0]  # already in the log (``take``)
            return False
        kind = chunk.type
        if kind in _DELTAS:
            # Consecutive deltas of one part are logged as one (the rebuilt message is the same).
            run = self._run
            if run is not None and run["id"] == chunk.id and run["type"] == kind:
                self.run_text.append(chunk.delta)  # type: ignore[union-attr]
            else:
                self._open(kind, chunk.id, chunk.delta)
        elif kind == "agent-tool-event" or (kind.startswith("data-") and chunk.transient):
            return False  # neither is part of the message the log rebuilds
        else:
            self._append(chunk.model_dump(mode="json", by_alias=False, exclude_none=True))
            if kind in _FLUSH_NOW:
                self._count += 1
                return True
        return self.counted()

    def counted(self) -> bool:
        """Count one more buffered chunk; True when the batch is due (``FLUSH_EVERY`` chunks or ``FLUSH_AFTER_S``).

        The engine's hot path calls this alone for a delta it appended to ``run_text`` itself."""
        self._count += 1
        return self._count >= FLUSH_EVERY or time.monotonic() - self._since >= FLUSH_AFTER_S

    def run_of(self, chunk: Any) -> list[str] | None:
        """The texts of the open delta run when ``chunk`` (a delta just added) is in it, else None.

        The engine appends the deltas of the same part that follow straight to this list and calls ``counted``
        (``add``'s work for them, without its dispatch). Any other chunk added, ``flush`` or ``take`` closes the
        run, and the next run gets a new list, so a caller holding this one can tell (``run_text is`` it)."""
        run = self._run
        if run is None or self._logged or run["id"] != chunk.id or run["type"] != chunk.type:
            return None
        return self.run_text

    def _open(self, kind: str, part_id: str, delta: str) -> None:
        run = {"type": kind, "id": part_id, "delta": ""}
        self._append(run)
        self._run, self.run_text = run, [delta]

    def _append(self, entry: dict[str, Any]) -> None:
        """Buffer an entry after the open run (closed first); the batch's clock starts with its first entry."""
        self._close_run()
        if not self._buffer:
            self._since = time.monotonic()
        self._buffer.append(entry)

    def _close_run(self) -> None:
        run = self._run
        if run is not None:
            run["delta"] = "".join(self.run_text)  # type: ignore[arg-type]
            self._run = self.run_text = None

    def _take_buffer(self) -> list[dict[str, Any]]:
        self._close_run()
        batch, self._buffer = self._buffer, []
        self._count = 0
        return batch

    @property
    def pending(self) -> bool:
        """Whether chunks wait in the buffer for a write."""
        return bool(self._buffer)

    async def flush(self) -> None:
        async with self.writing:
            batch = self._take_buffer()
            if batch:
                await self.engine.store.append_chunks(self.record.request_id, batch)

    def take(self, emitted: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Empty the buffer for a write that carries the log (a tool call's effect starting or finishing), with
        ``emitted`` (chunks of the stream that have not reached ``add`` yet, in order) logged after it: one write
        instead of two, and ``add`` skips those chunks when they come. The caller holds ``writing`` until that
        write is done."""
        for chunk in emitted:
            self.add(chunk)
        self._logged.extend(emitted)
        return self._take_buffer()

    async def restart(self, message_id: str) -> None:
        """A new segment of the turn's stream, building ``message_id``: a context-overflow retry (the failed attempt
        discarded) or a recovery's continuation (the partial reply stored). The record (as the caller changed it)
        goes first: a crash before the segment's mark leaves the previous segment, whose message is stored or
        discarded already, to be recovered again."""
        self.record.updated_at = time.time()
        store = self.engine.store
        await store.put_turn(self.record)
        async with self.writing:
            batch = self._take_buffer()
            self._logged = []
            batch.append({"type": "start", "message_id": message_id})
            await store.append_chunks(self.record.request_id, batch)
        self.message_id = message_id

    async def persist_reply(self) -> None:
        """Write the held reply now (something that depends on it comes before the record's removal)."""
        reply, self.reply = self.reply, None
        if reply is not None:
            await self.engine.upsert(reply)

    async def end(self) -> None:
        """The turn ended (whatever its status): nothing is left to recover. A held reply goes in the same write."""
        reply, self.reply = self.reply, None
        engine = self.engine
        store = engine.store
        end = getattr(store, "end_turn", None)
        async with self.writing:
            self._take_buffer()
            self._logged = []
            await (
                end(self.record.request_id, reply)
                if end is not None
                else Store.end_turn(store, self.record.request_id, reply)
            )
        if reply is not None:
            engine.remember(reply)


async def effect_started(
    engine: Engine,
    request_id: str,
    tool_call_id: str,
    tool_name: str,
    input: Any,
    journal: TurnJournal | None = None,
) -> tuple[str, EffectRecord | None]:
    """Record that a call starts; returns its key, and the stored record when the call already finished.

    With ``journal`` (the call is the only one running, so nothing else writes the log meanwhile) the turn's
    buffered chunks, the call's input among them, go in the same write.
    """
    key = effect_key(engine.path, request_id, tool_call_id)
    record = EffectRecord(
        key=key,
        request_id=request_id,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        status="started",
        started_at=time.time(),
        input=input,
    )
    if journal is None:
        stored = await engine.store.start_effect(record)
    else:
        async with journal.writing:
            stored = await _carrying(engine.store, "start_effect", request_id, journal.take(), True, record)
    return key, (stored if stored.status == "finished" else None)


async def effect_finished(
    engine: Engine,
    request_id: str,
    key: str,
    output: Any,
    error: str | None,
    journal: TurnJournal | None = None,
    emitted: Sequence[Any] = (),
) -> None:
    """Record that a call finished with ``output`` or ``error``: durable before the result is reported to anyone.

    With ``journal`` (as for ``effect_started``) the turn's buffered chunks and ``emitted`` (the call's chunks not
    yet logged, its result's last) go in the same write.
    """
    if journal is None:
        await engine.store.finish_effect(key, output=output, error=error)
        return
    async with journal.writing:
        chunks = journal.take(emitted)
        await _carrying(engine.store, "finish_effect", request_id, chunks, False, key, output=output, error=error)


async def _carrying(
    store: Any,
    method: str,
    request_id: str,
    chunks: Sequence[dict[str, Any]],
    log_first: bool,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """The store's effect write ``method`` with ``chunks`` of the request's log in the same write; a store of the
    user's own without the ``chunks`` parameter makes two writes, the log first or after, as before it had one."""
    write = getattr(store, method)
    if not chunks:
        return await write(*args, **kwargs)
    if _takes_chunks(store, method):
        return await write(*args, chunks=chunks, **kwargs)
    if log_first:
        await store.append_chunks(request_id, chunks)
    result = await write(*args, **kwargs)
    if not log_first:
        await store.append_chunks(request_id, chunks)
    return result


_TAKES_CHUNKS: dict[Any, bool] = {}


def _takes_chunks(store: Any, name: str) -> bool:
    """Whether a store's effect method has the ``chunks`` parameter (a store of the user's own may not).

    Known once per class for a method the class defines; a method made per instance is looked at each time.
    """
    defined = getattr(type(store), name, None)
    known = _TAKES_CHUNKS.get(defined) if defined is not None else None
    if known is None:
        known = "chunks" in inspect.signature(getattr(store, name)).parameters
        if defined is not None:
            _TAKES_CHUNKS[defined] = known
    return known
